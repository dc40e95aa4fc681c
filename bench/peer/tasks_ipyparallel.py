# The task flood of `shoal bench tasks` on ipyparallel, the system whose
# scheduler benchmark the suite repeats: a cluster of a controller and 2
# engines on this host (its default load-balancing scheme, leastload, over
# ZMQ on TCP loopback), a client submitting n no-op tasks as fast as it can,
# then waiting for every result. Sent: first submit until the last submit
# returns; Roundtrip: first submit until the last result. The suite runs it
# with Debian's python3 and parses its lines:
#   start s=SECONDS                       the cluster up, both engines in
#   round n=N sent=SECONDS rt=SECONDS     one flood
#   ok                                    all done
# Exit status 3 with "skip REASON" when ipyparallel is not installed.
import sys
import time

try:
    import ipyparallel as ipp
except ImportError:
    print("skip ipyparallel not installed (apt-get install python3-ipyparallel)")
    sys.exit(3)


def nop():
    return None


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [256]
    t0 = time.monotonic()
    cluster = ipp.Cluster(n=2, log_level=40)
    client = cluster.start_and_connect_sync()
    try:
        client.wait_for_engines(2, timeout=60)
        print("start s=%.6f" % (time.monotonic() - t0), flush=True)
        view = client.load_balanced_view()
        for n in sizes:
            for _ in range(3):
                t0 = time.monotonic()
                results = [view.apply_async(nop) for _ in range(n)]
                t1 = time.monotonic()
                for r in results:
                    r.get()
                t2 = time.monotonic()
                print("round n=%d sent=%.6f rt=%.6f" % (n, t1 - t0, t2 - t0), flush=True)
        print("ok", flush=True)
    finally:
        client.close()
        cluster.stop_cluster_sync()


main()
