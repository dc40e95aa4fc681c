"""``python3 -m shoal.bench store`` (or ``shoal bench py-store``): the object store from
Python, each figure beside a baseline measured in the same run. ``python3 -m shoal.bench
rpc`` (``shoal bench py-rpc``) is in shoal.bench_rpc and ``python3 -m shoal.bench tasks``
(``shoal bench py-tasks``) in shoal.bench_tasks and ``python3 -m shoal.bench fibers``
(``shoal bench py-fibers``) in shoal.bench_fibers, with these helpers.

- put_small / get_small: a 64-byte bytes object; baseline: pickle through
  ``multiprocessing.shared_memory`` (the same object, the same round trip).
- get_state_dict: a state dict of 1 100 tensors into a dict of torch tensors, in a fresh
  process; baselines: ``torch.load`` of the same state dict from a file on tmpfs, and
  pickle through ``multiprocessing.shared_memory``.
- put_array: numpy arrays, MB/s and the ratio to memcpy (``numpy.copyto``) of the same
  size, with the kernel's huge-page mode for shared memory (``shmem_huge``), which
  decides most of it.
- put_state_dict: a state dict of 1 000 torch tensors (1.21 GB; --quick 128 MiB) put,
  against copying the same tensors into ones that exist (memcpy of the same bytes).
- fetch_state_dict_first: that state dict fetched into a store just started (a second
  shoald on loopback, encrypted), until it is torch tensors here; baseline: plain Python
  sockets moving its bytes into a fresh bytearray.
- readers: N processes holding the same tensor: what each adds (Uss) as a share of it.
- get_tasklets: 1 000 tasklets (shoal.tasklets) each getting its own 64-byte object through
  one connection at once, on one thread, total time (best of the rounds); baseline: the
  same 1 000 gets one after another, outside tasklets (issue 34's goal: within 2x).

put_array, put_state_dict and fetch_state_dict_first run on the machine's default pages
(``pages: 4k``), then, as root, on huge pages with ``--reserve`` (the hugetlb pool grown
for them and put back after; skipped with the reason otherwise).

Output as every shoal benchmark: a table for people, ``--json`` for machines (one object
a result: suite, test, params, status, baseline, metrics with their unit in their name).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from multiprocessing import shared_memory
from typing import Any, Dict, List, Optional

import shoal

SUITE = "py-store"
RESULTS: List[Dict[str, Any]] = []


def result(test: str, params: Dict[str, Any], metrics: Dict[str, float], *,
           baseline: bool = False, impl: str = "shoal", status: str = "ok",
           why: str = "") -> None:
    r: Dict[str, Any] = {"suite": SUITE, "test": test, "params": params, "status": status,
                         "baseline": baseline, "impl": impl, "metrics": metrics}
    if status == "skipped":
        r["reason"] = why
    elif status == "failed":
        r["error"] = why
    RESULTS.append(r)


def exit_status() -> int:
    """The run's exit status: 1 when one of shoal's own rows failed, else 0. A baseline
    or a peer that could not run is a row (failed, with why), not a failed run."""
    return 1 if any(r["status"] == "failed" and not r["baseline"] for r in RESULTS) else 0


def param_text(v: Any) -> str:
    """A parameter as the tables show it (booleans as JSON writes them)."""
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def timed(fn, n: int) -> List[float]:
    """n calls of fn, each timed, in microseconds."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def timed_puts(client: shoal.Client, value: Any, n: int, pause: float = 0.0) -> List[float]:
    """n puts of value, each timed (microseconds) and its object deleted after, pause
    seconds between them (for the store to free it and make a spare)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        oid = client.put(value)
        out.append((time.perf_counter_ns() - t0) / 1000)
        client.delete(oid)
        if pause:
            time.sleep(pause)
    return out


def stats_us(samples: List[float]) -> Dict[str, float]:
    s = sorted(samples)
    return {"mean_us": statistics.fmean(s), "p50_us": s[len(s) // 2],
            "p99_us": s[min(len(s) - 1, len(s) * 99 // 100)], "min_us": s[0], "max_us": s[-1]}


def small(client: shoal.Client, n: int) -> None:
    obj = os.urandom(64)
    client.put(obj, name="bench-small", replace=True)
    timed(lambda: client.put(obj), 100)
    result("put_small", {"bytes": 64}, stats_us(timed(lambda: client.put(obj), n)))

    def get() -> None:
        v = client.get("bench-small")
        bytes(v)
        v.release()

    timed(get, 100)
    result("get_small", {"bytes": 64}, stats_us(timed(get, n)))
    # The baseline: pickle into and out of a shared memory segment.
    shm = shared_memory.SharedMemory(create=True, size=4096)
    try:
        def put_pickle() -> None:
            b = pickle.dumps(obj, protocol=5)
            shm.buf[:8] = len(b).to_bytes(8, "little")
            shm.buf[8:8 + len(b)] = b

        def get_pickle() -> None:
            k = int.from_bytes(shm.buf[:8], "little")
            pickle.loads(shm.buf[8:8 + k])

        put_pickle()
        result("put_small", {"bytes": 64}, stats_us(timed(put_pickle, n)), baseline=True,
               impl="pickle+shm")
        result("get_small", {"bytes": 64}, stats_us(timed(get_pickle, n)), baseline=True,
               impl="pickle+shm")
    finally:
        shm.close()
        shm.unlink()


def run_py(code: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(shoal.__file__)))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr else "failed")
    return r.stdout


def state_dict(client: shoal.Client, tensors: int, total: int, rounds: int) -> None:
    try:
        import torch
    except ImportError:
        result("get_state_dict", {}, {}, status="skipped", why="needs python3-torch")
        return
    per = max(1, total // tensors // 4)
    sd = {"layer%d.weight" % i: torch.rand(per) for i in range(tensors)}
    nbytes = sum(t.numel() * 4 for t in sd.values())
    params = {"tensors": tensors, "bytes": nbytes}
    client.put(sd, name="bench-sd", replace=True)
    times = [float(run_py("""
        import sys, time, shoal, torch  # torch's import (about 1 s) is not the get's
        c = shoal.connect(sys.argv[1])
        t0 = time.perf_counter_ns()
        sd = c.get("bench-sd", framework="torch")
        print((time.perf_counter_ns() - t0) / 1e6)
    """, client.socket)) for _ in range(rounds)]
    result("get_state_dict", params, {"mean_ms": statistics.fmean(times), "min_ms": min(times)})
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        path = os.path.join(d, "sd.pt")
        torch.save(sd, path)
        times = [float(run_py("""
            import sys, time, torch
            t0 = time.perf_counter_ns()
            sd = torch.load(sys.argv[1])
            print((time.perf_counter_ns() - t0) / 1e6)
        """, path)) for _ in range(rounds)]
        result("get_state_dict", params, {"mean_ms": statistics.fmean(times),
                                          "min_ms": min(times)},
               baseline=True, impl="torch.load")
    b = pickle.dumps(sd, protocol=5)
    shm = shared_memory.SharedMemory(create=True, size=len(b))
    try:
        shm.buf[:len(b)] = b
        times = [float(run_py("""
            import sys, time, pickle, torch
            from multiprocessing import shared_memory, resource_tracker
            t0 = time.perf_counter_ns()
            shm = shared_memory.SharedMemory(name=sys.argv[1])
            sd = pickle.loads(shm.buf[:int(sys.argv[2])])
            print((time.perf_counter_ns() - t0) / 1e6)
            resource_tracker.unregister(shm._name, "shared_memory")
        """, shm.name, str(len(b)))) for _ in range(rounds)]
        result("get_state_dict", params, {"mean_ms": statistics.fmean(times),
                                          "min_ms": min(times)},
               baseline=True, impl="pickle+shm")
    finally:
        shm.close()
        shm.unlink()
    client.delete("bench-sd")


def put_state_dict(client: shoal.Client, tensors: int, total: int, rounds: int,
                   pages: str, reserve: bool) -> None:
    """A put of a state dict of tensors against copying the same tensors into ones that
    exist (memcpy of the same bytes); the best of rounds, the first one apart."""
    try:
        import torch
    except ImportError:
        result("put_state_dict", {}, {}, status="skipped", why="needs python3-torch")
        return
    sd = {"layers.%d.weight" % i: torch.rand(total // tensors // 4) for i in range(tensors)}
    nbytes = sum(t.numel() * 4 for t in sd.values())
    dst = {k: torch.empty_like(v) for k, v in sd.items()}

    def copy() -> None:
        for k, v in sd.items():
            dst[k].copy_(v)
    copy()  # the copies' pages faulted in, as the store's are once it holds them
    memcpy = min(timed(copy, rounds))
    times = timed_puts(client, sd, rounds, pause=0.2)
    params = {"tensors": tensors, "bytes": nbytes, "pages": pages, "reserve": reserve}
    best = min(times[1:]) if len(times) > 1 else times[0]
    result("put_state_dict", params, {"mb_s": nbytes / best, "best_us": best,
                                      "first_us": times[0], "ratio_vs_memcpy": memcpy / best})
    result("put_state_dict", params, {"mb_s": nbytes / memcpy, "best_us": memcpy},
           baseline=True, impl="memcpy")


def _shoald_start(d: str, name: str, size: int, *extra: str) -> Any:
    """A shoald of this build on d/name.sock with peers on loopback, once it serves:
    (its Popen, its socket, where its peers connect)."""
    exe = os.environ.get("SHOAL_SHOALD") or "shoald"
    sock, log = os.path.join(d, name + ".sock"), os.path.join(d, name + ".log")
    with open(log, "w") as lf:
        p = subprocess.Popen([exe, "--socket", sock, "--size", str(size), "--peer", "127.0.0.1:0",
                              *extra], stderr=lf, stdin=subprocess.DEVNULL)
    for _ in range(6000):
        with open(log) as lf:
            text = lf.read()
        if "peers on " in text:
            peer = text.split("peers on ", 1)[1].split()[0].rstrip(",")
            return p, sock, peer.split(" ")[0].rstrip(")")
        if p.poll() is not None:
            raise RuntimeError("shoald exited at start: " + text.strip()[-300:])
        time.sleep(0.02)
    p.kill()
    raise RuntimeError("shoald did not start")


def _tcp_copy(nbytes: int) -> float:
    """Seconds for plain Python sockets to move nbytes from another process into a fresh
    bytearray here, on loopback."""
    import socket
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    code = """
        import socket, sys
        n = int(sys.argv[2]); buf = bytearray(b"\\7") * (1 << 20)
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        view = memoryview(buf)
        while n:
            k = min(n, len(buf)); s.sendall(view[:k]); n -= k
        s.close()
    """
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(shoal.__file__)))
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code),
                          str(ls.getsockname()[1]), str(nbytes)], env=env)
    c, _ = ls.accept()
    t0 = time.perf_counter()
    dst = bytearray(nbytes)
    view, got = memoryview(dst), 0
    while got < nbytes:
        k = c.recv_into(view[got:], min(nbytes - got, 4 << 20))
        if k == 0:
            break
        got += k
    t = time.perf_counter() - t0
    c.close()
    ls.close()
    p.wait()
    if got != nbytes:
        raise RuntimeError("plain TCP: %d of %d bytes came" % (got, nbytes))
    return t


def fetch_state_dict(tensors: int, total: int, pages: str, reserve: bool) -> None:
    """The first fetch of a state dict into a store just started (another shoald on
    loopback, encrypted as by default), until its tensors are torch tensors here,
    against plain TCP moving its bytes into a fresh bytearray in the same run."""
    try:
        import torch
    except ImportError:
        result("fetch_state_dict_first", {}, {}, status="skipped", why="needs python3-torch")
        return
    extra = (["--huge-pages"] if pages != "4k" else []) + (["--reserve"] if reserve else [])
    secret = os.urandom(16).hex()
    os.environ["SHOAL_SECRET"] = secret
    sd = {"layers.%d.weight" % i: torch.rand(total // tensors // 4) for i in range(tensors)}
    nbytes = sum(t.numel() * 4 for t in sd.values())
    params = {"tensors": tensors, "bytes": nbytes, "encrypted": True, "pages": pages,
              "reserve": reserve}
    procs = []
    try:
        with tempfile.TemporaryDirectory() as d:
            size = nbytes + (256 << 20)
            a, asock, apeer = _shoald_start(d, "a", size, *extra)
            procs.append(a)
            ca = shoal.connect(asock)
            ca.put(sd, name="bench-sd-fetch")
            b, bsock, _ = _shoald_start(d, "b", size, *extra)
            procs.append(b)
            cb = shoal.connect(bsock, timeout=600)
            t0 = time.perf_counter()
            got = cb.get("bench-sd-fetch", fetch=True, source=apeer, framework="torch")
            t = time.perf_counter() - t0
            assert len(got) == tensors
            del got
            cb.close()
            ca.close()
        tcp = min(_tcp_copy(nbytes) for _ in range(2))
        result("fetch_state_dict_first", params, {"s": t, "mb_s": nbytes / t / 1e6,
                                                  "ratio_vs_tcp_copy": t / tcp})
        result("fetch_state_dict_first", {"bytes": nbytes}, {"s": tcp, "mb_s": nbytes / tcp / 1e6},
               baseline=True, impl="python_tcp")
    except (RuntimeError, OSError, shoal.Error) as e:
        result("fetch_state_dict_first", params, {}, status="failed", why=str(e))
    finally:
        for p in procs:
            p.terminate()
            p.wait()


def shmem_huge() -> str:
    """The kernel's huge-page mode for shared memory: a put into 4 KiB pages ("never",
    the default) allocates 16 times more pages than into 64 KiB ones, 512 times more
    than into 2 MiB ones, and that, not the copy, is most of its time."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as f:
            mode = f.read()
        return mode[mode.index("[") + 1:mode.index("]")]
    except (OSError, ValueError):
        return "unknown"


NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"
FREE_HUGEPAGES = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"
SHMEM_ENABLED = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"


class HugePages:
    """As root, the hugetlb pool grown to hold nbytes for the rows inside ``with``, its
    pages touched once (as each host's store would with --reserve), and put back when
    they end, fail or are interrupted (atexit and SIGTERM too). ``why`` says why not
    (not root, no pool, memory too fragmented): the rows are then skipped with it."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes, self.saved, self.why = nbytes, None, ""

    def __enter__(self) -> "HugePages":
        import atexit
        import signal
        if os.geteuid() != 0:
            self.why = "huge pages are set up by root only"
            return self
        try:
            with open(NR_HUGEPAGES) as f:
                self.saved = int(f.read())
            with open(FREE_HUGEPAGES) as f:
                free = int(f.read())
            want = (self.nbytes + (2 << 20) - 1) >> 21
            with open(NR_HUGEPAGES, "w") as f:
                f.write(str(self.saved + max(0, want - free)))
            atexit.register(self.restore)
            signal.signal(signal.SIGTERM, lambda *_: (self.restore(), os._exit(143)))
            with open(FREE_HUGEPAGES) as f:
                if int(f.read()) < want:
                    self.why = "the hugetlb pool did not grow to %d pages" % want
                    self.restore()
                    return self
            fd = os.memfd_create("bench-pool", os.MFD_HUGETLB)
            try:
                os.ftruncate(fd, want << 21)
                os.posix_fallocate(fd, 0, want << 21)
            finally:
                os.close(fd)
        except OSError as e:
            self.why = "no hugetlb pool here: %s" % e
            self.restore()
        return self

    def restore(self) -> None:
        if self.saved is not None:
            with open(NR_HUGEPAGES, "w") as f:
                f.write(str(self.saved))
            self.saved = None

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def put_array(client: shoal.Client, sizes: List[int], rounds: int,
              pages: str = "4k", reserve: bool = False) -> None:
    import numpy as np
    huge = shmem_huge()
    for size in sizes:
        a = np.ones(size, dtype=np.uint8)
        dst = np.empty_like(a)
        np.copyto(dst, a)  # its pages faulted in, as the store's are after the first put
        memcpy = min(timed(lambda: np.copyto(dst, a), rounds))
        t = min(timed_puts(client, a, rounds))
        params = {"bytes": size, "pages": pages, "reserve": reserve, "shmem_huge": huge}
        result("put_array", params, {"mb_s": size / t, "best_us": t,
                                     "ratio_vs_memcpy": memcpy / t})
        result("put_array", params, {"mb_s": size / memcpy, "best_us": memcpy},
               baseline=True, impl="memcpy")
        del a, dst
        gc.collect()


def readers(client: shoal.Client, counts: List[int], size: int) -> None:
    import numpy as np
    client.put(np.ones(size, dtype=np.uint8), name="bench-readers", replace=True)
    # This process reads it too, as the process that made a tensor usually
    # does: its pages are then shared, and a reader's private memory (Uss) is
    # what mapping them costs it, not the tensor itself.
    mine = client.get("bench-readers")
    int(mine[::4096].sum())
    code = """
        import sys, shoal, numpy as np
        def uss():
            return sum(int(l.split()[1]) * 1024 for l in open("/proc/self/smaps_rollup")
                       if l.startswith(("Private_Clean", "Private_Dirty")))
        before = uss()
        c = shoal.connect(sys.argv[1])
        a = c.get("bench-readers")
        int(a[::4096].sum())  # every page touched
        print(uss() - before, flush=True)
        sys.stdin.read()  # held until the benchmark lets go
    """
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(shoal.__file__)))
    for n in counts:
        procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), client.socket],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True) for _ in range(n)]
        grown = [int(p.stdout.readline()) for p in procs]
        for p in procs:
            p.stdin.close()
            p.wait()
        result("readers", {"readers": n, "bytes": size},
               {"uss_per_reader_pct": 100 * statistics.fmean(grown) / size,
                "uss_per_reader_kib": statistics.fmean(grown) / 1024})
    del mine
    client.delete("bench-readers")


def fmt(v: float) -> str:
    return "%.3g" % v if abs(v) < 1000 else "{:,.0f}".format(v).replace(",", " ")


def emit(as_json: bool, title: str) -> None:
    """The results on stdout: JSON Lines (--json), else rows under title."""
    if as_json:
        for r in RESULTS:
            print(json.dumps(r))
    else:
        rows(sys.stdout, title)


def rows(out, title: str) -> None:
    """The results, a line each, under title."""
    print(title, file=out)
    w = max([15] + [len(r["test"]) for r in RESULTS])
    for r in RESULTS:
        p = " ".join("%s=%s" % (k, param_text(v)) for k, v in r["params"].items())
        if r["status"] != "ok":
            print("%-*s %-12s %-30s %s: %s" % (w, r["test"], r["impl"], p, r["status"],
                                               r.get("reason", r.get("error"))), file=out)
            continue
        m = "  ".join("%s %s" % (k, fmt(v)) for k, v in r["metrics"].items())
        print("%-*s %-12s %-30s %s%s" % (w, r["test"], r["impl"], p, m,
                                         "  (baseline)" if r["baseline"] else ""), file=out)


def table(out) -> None:
    rows(out, "shoal bench py-store: the object store from Python (%s)" % sys.executable)
    ok = {(r["test"], r["impl"]): r["metrics"] for r in RESULTS if r["status"] == "ok"}
    g = ok.get(("get_small", "shoal"), {})
    sd, tl = ok.get(("get_state_dict", "shoal")), ok.get(("get_state_dict", "torch.load"))
    parts = []
    if g:
        parts.append("get_small p50 %.2f us (goal <= 5)" % g["p50_us"])
    gt = ok.get(("get_tasklets", "shoal"))
    if gt:
        parts.append("1 000 tasklets' gets at once %.1f ms, %.2fx 1 000 in a row, %d threads "
                     "added (goals <= 2x, 0)" % (gt["total_ms"], gt["ratio_vs_sequential"],
                                                 gt["threads_added"]))
    if sd and tl:
        parts.append("get_state_dict %.2f ms, %.0fx faster than torch.load (goals <= 5 ms, "
                     ">= 100x)" % (sd["mean_ms"], tl["mean_ms"] / sd["mean_ms"]))
    pa = [r["metrics"]["ratio_vs_memcpy"] for r in RESULTS
          if r["status"] == "ok" and r["test"] == "put_array" and r["impl"] == "shoal"
          and r["params"]["bytes"] >= 64 << 20]
    if pa:
        parts.append("put_array from 64 MiB %.2f-%.2f of memcpy, shared memory huge pages: %s "
                     "(goal >= 0.5)" % (min(pa), max(pa), shmem_huge()))
    for r in RESULTS:
        if r["status"] != "ok" or r["baseline"]:
            continue
        m, pp = r["metrics"], r["params"]
        if r["test"] == "put_array" and pp["bytes"] >= 1 << 30:
            parts.append("put_array 1 GiB on %s pages%s %.2f of memcpy (goal >= %s)" % (
                pp["pages"], " with --reserve" if pp["reserve"] else "",
                m["ratio_vs_memcpy"], "0.9" if pp["reserve"] else "0.6"))
        elif r["test"] == "put_state_dict":
            parts.append("put_state_dict (%d tensors) on %s pages %.2f of memcpy (goal >= 0.8)"
                         % (pp["tensors"], pp["pages"], m["ratio_vs_memcpy"]))
        elif r["test"] == "fetch_state_dict_first":
            parts.append("first fetch of it into a fresh store on %s pages %.2fx a plain TCP "
                         "copy (goal <= 1.25)" % (pp["pages"], m["ratio_vs_tcp_copy"]))
    rd = [m["uss_per_reader_pct"] for (t, i), m in ok.items() if t == "readers"]
    if rd:
        parts.append("a reader adds %.3f%% of the tensor at most (goal <= 1%%)" % max(rd))
    print("summary: " + "; ".join(parts), file=out)


def huge_rows(a: Any, sizes: List[int], sd_bytes: int, d: str) -> None:
    """The same puts into a store on huge pages with --reserve, and the first fetch of a
    state dict on the default pages and on huge ones."""
    fetch_state_dict(1000, sd_bytes, "4k", False)
    size = (3 << 30) if not a.quick else (1 << 30)
    # the store's capacity, a spare as large as the largest put beside it, and the
    # fetch's two stores each holding the state dict
    with HugePages(size + max(sizes) + 2 * sd_bytes + (64 << 20)) as hp:
        if hp.why:
            for t in ("put_array", "put_state_dict", "fetch_state_dict_first"):
                result(t, {"pages": "hugetlb", "reserve": True}, {}, status="skipped",
                       why=hp.why)
            return
        store = shoal.Store(size=size, socket=os.path.join(d, "h.sock"), huge_pages=True,
                            reserve=True)
        try:
            client = store.connect()
            put_array(client, sizes, 3 if a.quick else 10, store.pages, True)
            put_state_dict(client, 1000, sd_bytes, 3 if a.quick else 5, store.pages, True)
            client.close()
        finally:
            store.close()
        fetch_state_dict(1000, sd_bytes, "hugetlb", True)


def tasklet_gets(client: shoal.Client, n: int, rounds: int) -> None:
    """n gets from n tasklets at once vs the same gets in a row. The sequential ones run
    first: after the first tasklet this thread has tasklet state for good."""
    from . import tasklets
    ids = [client.put(os.urandom(64)) for _ in range(n)]

    def get(k: int) -> None:
        v = client.get(k)
        bytes(v)
        v.release()

    def sequential() -> float:
        t0 = time.perf_counter_ns()
        for k in ids:
            get(k)
        return (time.perf_counter_ns() - t0) / 1e6

    threads = [len(os.listdir("/proc/self/task"))]

    def at_once() -> float:
        def count() -> None:  # runs while the gets wait: the threads then
            threads.append(len(os.listdir("/proc/self/task")))
        t0 = time.perf_counter_ns()
        for k in ids:
            tasklets.tasklet(get)(k)
        tasklets.tasklet(count)()
        tasklets.run()
        return (time.perf_counter_ns() - t0) / 1e6

    seq = min(sequential() for _ in range(rounds))
    tl = min(at_once() for _ in range(rounds))
    for k in ids:
        client.delete(k)
    result("get_tasklets", {"tasklets": n, "bytes": 64},
           {"total_ms": tl, "ratio_vs_sequential": tl / seq,
            "threads_added": max(threads) - threads[0]})
    result("get_tasklets", {"tasklets": n, "bytes": 64}, {"total_ms": seq}, baseline=True,
           impl="sequential")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m shoal.bench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=["store", "rpc", "tasks", "fibers"],
                    help="the suite (store, rpc, tasks or fibers)")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and smaller sizes")
    ap.add_argument("--json", action="store_true", help="JSON Lines instead of the table")
    ap.add_argument("--large", action="store_true",
                    help="store: the 1 GiB array with --quick too; rpc: the 6 GiB tensor")
    ap.add_argument("--socket", help="a running store (default: one in this process)")
    ap.add_argument("--only", metavar="PART",
                    help="rpc: only calls, shared (calls with share_torch), readers, start "
                         "or idle")
    ap.add_argument("--tiny", action="store_true",
                    help="fibers: every row at a tiny size, one run (the tests' check)")
    a = ap.parse_args(argv)
    if a.suite == "fibers":
        from . import bench_fibers
        return bench_fibers.run(a)
    if a.suite == "rpc":
        # As shoal.bench: under -m this module is __main__, a copy of shoal.bench
        # whose RESULTS the rpc suite does not fill.
        from . import bench_rpc
        return bench_rpc.run(a)
    if a.suite == "tasks":
        from . import bench_tasks
        return bench_tasks.run(a)
    n = 2000 if a.quick else 20000
    with tempfile.TemporaryDirectory() as d:
        store = None if a.socket else shoal.Store(size=(3 << 30) if not a.quick else (1 << 30),
                                                  socket=os.path.join(d, "s.sock"))
        try:
            client = shoal.connect(a.socket or store.socket)
            small(client, n)
            tasklet_gets(client, 1000, 3 if a.quick else 10)
            state_dict(client, 1100, (128 << 20) if a.quick else (2 << 30), 3 if a.quick else 5)
            sizes = [1 << 20, 64 << 20] + ([1 << 30] if a.large or not a.quick else [])
            put_array(client, sizes, 3 if a.quick else 10)
            sd_bytes = (128 << 20) if a.quick else 1210 * 10**6
            put_state_dict(client, 1000, sd_bytes, 3 if a.quick else 5, "4k", False)
            readers(client, [1, 5] if a.quick else [1, 5, 20, 50],
                    (64 << 20) if a.quick else (256 << 20))
            client.close()
        finally:
            if store:
                store.close()
        if not a.socket:
            huge_rows(a, sizes, sd_bytes, d)
    if a.json:
        for r in RESULTS:
            print(json.dumps(r))
    else:
        table(sys.stdout)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
