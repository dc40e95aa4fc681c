"""``python3 -m shoal.bench tasks`` (or ``shoal bench py-tasks``): the task farm from
Python (``shoal.tasks``), the seed's two experiments on ipyparallel's scheduler, side by
side with ipyparallel itself (Debian's python3-ipyparallel, when installed) in the same
run, with the same number of engines (2) on this host.

- ``flood``: a client submits N no-op tasks (``nop``, importable by reference) as fast as
  it can, then waits for every result. ``sent_s``: from the first submit until the last
  returns; ``roundtrip_s``: until the last result; ``roundtrip_per_s``: N over that. The
  best of 3 rounds (of 1 where a round takes over 10 s). Params ``n``, ``scheme`` and
  ``transport``: ``local`` (the controller's unix socket and rings) or ``tcp`` (loopback,
  the secure channel, encrypted); ipyparallel's rows (``zmq-tcp``, its default scheme)
  stop where a round would take over 60 s, and say so.
- ``buffers``: a numpy array of 1 KiB to 8 MiB echoed by a task (``echo``): ``mb_s``
  counts it both ways; beside raw TCP loopback in this process (a thread echoing over a
  socket, the same bytes) and ipyparallel's echo.
- ``cluster_start``: ``Cluster(n=2)`` until both engines answer a task, ``mean_ms``;
  ipyparallel's ``Cluster(n=2)`` until ``wait_for_engines(2)``.
- dask.distributed's flood and start beside them when it is installed (a LocalCluster of
  2 worker processes), else a skipped row that says so.

The helpers (result, the table) are ``shoal.bench``'s.
"""
from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time

from . import bench as B
from . import tasks as st

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional


def nop() -> None:
    return None


def echo(x: Any) -> Any:
    return x


def flood(view: Any, n: int, rounds: int) -> Dict[str, float]:
    best: Optional[Dict[str, float]] = None
    rts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ars = [view.apply_async(nop) for _ in range(n)]
        t1 = time.perf_counter()
        for ar in ars:
            ar.get()
        t2 = time.perf_counter()
        rts.append(t2 - t0)
        if best is None or t2 - t0 < best["roundtrip_s"]:
            best = {"sent_s": t1 - t0, "roundtrip_s": t2 - t0, "roundtrip_per_s": n / (t2 - t0)}
    assert best is not None
    best["roundtrip_s_mean"] = statistics.fmean(rts)
    best["rounds"] = rounds
    return best


def flood_rows(view: Any, sizes: List[int], params: Dict[str, Any], impl: str,
               limit_s: float) -> None:
    rate = 0.0  # tasks a second at the last size: what predicts the next
    for n in sizes:
        p = dict(params, n=n)
        if rate and n / rate > limit_s:
            B.result("flood", p, {}, impl=impl, baseline=impl != "shoal", status="skipped",
                     why="a round would take about %.0f s (over %.0f s)" % (n / rate, limit_s))
            continue
        rounds = 3 if not rate or 3 * n / rate < 30 else 1
        try:
            m = flood(view, n, rounds)
        except Exception as e:
            B.result("flood", p, {}, impl=impl, baseline=impl != "shoal", status="failed",
                     why="%s: %s" % (type(e).__name__, e))
            return
        rate = m["roundtrip_per_s"]
        B.result("flood", p, m, impl=impl, baseline=impl != "shoal")


def buffer_sizes(quick: bool) -> List[int]:
    return [1 << 10, 64 << 10, 1 << 20] if quick else [1 << 10, 16 << 10, 256 << 10,
                                                        1 << 20, 4 << 20, 8 << 20]


def echo_rate(call: Callable[[Any], Any], data: Any, nbytes: int, budget_s: float) -> float:
    """MB/s of data through call (both ways), over at least 3 calls or budget_s."""
    call(data)  # warm
    n, t0 = 0, time.perf_counter()
    while n < 3 or (time.perf_counter() - t0 < budget_s and n < 1000):
        call(data)
        n += 1
    return 2 * nbytes * n / (time.perf_counter() - t0) / 1e6


def raw_tcp(sizes: List[int], budget_s: float) -> None:
    """The same bytes echoed over a TCP loopback socket by a thread: the ceiling."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            while True:
                head = conn.recv(8, socket.MSG_WAITALL)
                if len(head) < 8:
                    return
                k = int.from_bytes(head, "little")
                buf = bytearray(k)
                view = memoryview(buf)
                got = 0
                while got < k:
                    got += conn.recv_into(view[got:])
                conn.sendall(buf)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    c = socket.create_connection(srv.getsockname())
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(data: bytes) -> None:
        c.sendall(len(data).to_bytes(8, "little") + data)
        buf = bytearray(len(data))
        view = memoryview(buf)
        got = 0
        while got < len(data):
            got += c.recv_into(view[got:])
    for size in sizes:
        B.result("buffers", {"bytes": size}, {"mb_s": echo_rate(call, os.urandom(size), size,
                                                                 budget_s)},
                 impl="raw tcp", baseline=True)
    c.close()
    t.join(5)
    srv.close()


def cluster_start(reps: int) -> None:
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        with st.Cluster(n=2) as c:
            with c.client() as cl:
                v = cl.load_balanced_view()
                v.apply_sync(nop)
                ms.append((time.perf_counter() - t0) * 1e3)
    B.result("cluster_start", {"engines": 2}, {"mean_ms": statistics.fmean(ms),
                                               "min_ms": min(ms), "max_ms": max(ms),
                                               "runs": len(ms)})


def ipyparallel(sizes: List[int], bufs: List[int], quick: bool) -> None:
    try:
        import ipyparallel as ipp
    except ImportError:
        for t in ("flood", "buffers", "cluster_start"):
            B.result(t, {}, {}, impl="ipyparallel", baseline=True, status="skipped",
                     why="ipyparallel is not installed (apt-get install python3-ipyparallel)")
        return
    import numpy as np
    t0 = time.perf_counter()
    cluster = ipp.Cluster(n=2, log_level=40)
    client = cluster.start_and_connect_sync()
    try:
        client.wait_for_engines(2, timeout=120)
        B.result("cluster_start", {"engines": 2},
                 {"mean_ms": (time.perf_counter() - t0) * 1e3, "runs": 1},
                 impl="ipyparallel", baseline=True)
        view = client.load_balanced_view()
        flood_rows(view, sizes, {"scheme": "leastload", "transport": "zmq-tcp"},
                   "ipyparallel", 60.0)
        for size in bufs:
            a = np.frombuffer(os.urandom(size), dtype=np.uint8)
            B.result("buffers", {"bytes": size},
                     {"mb_s": echo_rate(lambda x: view.apply_sync(echo, x), a, size,
                                        0.5 if quick else 2.0)},
                     impl="ipyparallel", baseline=True)
    finally:
        client.close()
        cluster.stop_cluster_sync()


class _DaskView:
    """dask.distributed's client in the shape flood() drives: apply_async, get."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def apply_async(self, f: Callable[..., Any], *args: Any) -> Any:
        fut = self.client.submit(f, *args, pure=False)
        fut.get = fut.result
        return fut


def dask(sizes: List[int]) -> None:
    """The flood on dask.distributed (Debian's python3-distributed) when installed: a
    LocalCluster of 2 worker processes of one thread each."""
    try:
        from distributed import Client as DaskClient, LocalCluster
    except ImportError:
        B.result("flood", {}, {}, impl="dask", baseline=True, status="skipped",
                 why="dask.distributed is not installed (apt-get install python3-distributed)")
        return
    t0 = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as lc, \
            DaskClient(lc) as dc:
        dc.wait_for_workers(2)
        B.result("cluster_start", {"engines": 2},
                 {"mean_ms": (time.perf_counter() - t0) * 1e3, "runs": 1},
                 impl="dask", baseline=True)
        flood_rows(_DaskView(dc), sizes, {"scheme": "dask", "transport": "tcp"}, "dask", 60.0)


def run(a: Any) -> int:
    B.SUITE = "py-tasks"
    import numpy as np
    sizes = [256, 1024, 4096] if a.quick else [256, 1024, 4096, 16384, 65536]
    bufs = buffer_sizes(a.quick)
    budget = 0.5 if a.quick else 2.0
    for scheme in (["leastload"] if a.quick else ["leastload", "pure", "lru", "twobin"]):
        with st.Cluster(n=2, scheme=scheme) as c:
            view = c.client().load_balanced_view()
            view.apply_sync(nop)
            flood_rows(view, sizes, {"scheme": scheme, "transport": "local"}, "shoal", 60.0)
            if scheme == "leastload":
                for size in bufs:
                    arr = np.frombuffer(os.urandom(size), dtype=np.uint8)
                    B.result("buffers", {"bytes": size},
                             {"mb_s": echo_rate(lambda x: view.apply_sync(echo, x), arr, size,
                                                budget)})
    # over TCP loopback, with the secure channel (a secret of this run)
    secret = os.urandom(24).hex()
    old = os.environ.get("SHOAL_SECRET")
    os.environ["SHOAL_SECRET"] = secret
    ctl, engines = None, []
    try:
        import subprocess
        ctl = st._shoal.Controller(tcp="127.0.0.1:0")
        url = "tcp://" + ctl.tcp
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [st._PKG_PARENT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                if p]))
        engines = [subprocess.Popen(st.engine_command(url) + ["--die-with-parent"], env=env)
                   for _ in range(2)]
        with st.Client(url) as cl:
            cl.wait_for_engines(2, 30)
            view = cl.load_balanced_view()
            view.apply_sync(nop)
            flood_rows(view, sizes, {"scheme": "leastload", "transport": "tcp"}, "shoal", 60.0)
    finally:
        for p in engines:
            p.terminate()
            p.wait(10)
        if ctl is not None:
            ctl.close()
        if old is None:
            os.environ.pop("SHOAL_SECRET", None)
        else:
            os.environ["SHOAL_SECRET"] = old
    raw_tcp(bufs, budget)
    cluster_start(3 if a.quick else 10)
    ipyparallel(sizes, bufs, a.quick)
    dask(sizes)
    B.emit(a.json, "shoal bench py-tasks: the task farm from Python (%s)" % sys.executable)
    return B.exit_status()
