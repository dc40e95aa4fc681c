# ipyparallel's cluster start, the peer of `shoal bench tasks`' cluster_start rows:
# ipp.Cluster (what `ipcluster start` runs) with a controller on this host and n
# engines through the launcher given (local, mpi or slurm, as ipyparallel names
# them: LocalEngineSetLauncher, MPIEngineSetLauncher, SlurmEngineSetLauncher),
# timed from the start until a client sees every engine, then stopped. As root,
# mpiexec gets --allow-run-as-root (ipyparallel passes mpi_args through), and
# --oversubscribe as shoal's mpi launcher uses. The suite parses:
#   start s=SECONDS     one start, every engine in (one line a round)
#   ok                  all rounds done
# Exit status 3 with "skip REASON" when ipyparallel is not installed.
import os
import sys
import time

try:
    import ipyparallel as ipp
    from traitlets.config import Config
except ImportError:
    print("skip ipyparallel not installed (apt-get install python3-ipyparallel)")
    sys.exit(3)


def main():
    launcher, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cfg = Config()
    cfg.MPILauncher.mpi_args = (["--allow-run-as-root"] if os.geteuid() == 0 else []) + \
        ["--oversubscribe"]
    for _ in range(rounds):
        t0 = time.monotonic()
        cluster = ipp.Cluster(n=n, engine_launcher_class=launcher, config=cfg, log_level=40)
        client = cluster.start_and_connect_sync()
        try:
            client.wait_for_engines(n, timeout=120)
            print("start s=%.6f" % (time.monotonic() - t0), flush=True)
        finally:
            client.close()
            cluster.stop_cluster_sync()
    print("ok", flush=True)


main()
