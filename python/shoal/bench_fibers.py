"""``python3 -m shoal.bench fibers`` (or ``shoal bench py-fibers``): Python tasklets on
shoal's fibers (``shoal.tasklets``) beside the other ways Python runs many lightweight
threads, each in its best setting, with the same script shape, in the same run:

- ``shoal``: ``shoal.tasklets`` (tasklet, channel with Stackless's preference -1, run).
- ``greenlet``: Debian's python3-greenlet with the smallest scheduler on it: a deque of
  runnable greenlets, a blocked one switching straight to the next (not through a hub),
  and a buffered channel whose send never switches.
- ``gevent``: Debian's python3-gevent, ``gevent.spawn_raw`` (no Greenlet object) and an
  unbounded ``gevent.queue.Queue`` (a put never blocks), ``gevent.wait()``.
- ``asyncio``: tasks and an unbounded ``asyncio.Queue`` (``put_nowait``, ``await get()``),
  timed inside the running loop.
- ``generator``: generators on a deque, what Fibra did: a task yields the channel it
  receives from, a send appends (or hands the value to the receiver waiting).

Rows (one per impl; the peers are baselines, greenlet's first):

- ``hackysack`` (params ``n``, ``turns``): Stackless's seed program, n + 1 sackers each
  with a channel kick a ball to a random other until ``turns`` kicks; the last kicker
  sends every other one "exit". From making the sackers until all have ended.
  ``best_s`` is the best of 5 (of 3 with --quick), ``mean_ms`` and its spread beside it.
- ``hop`` (param ``n`` round trips): two tasklets ping-pong a value over two channels;
  ``ns`` is a hop (one message from one to the other), the best of 5.
- ``spawn`` (param ``n``: 10 000 and 100 000, --quick 20 000): n tasklets of a function
  that returns at once made and run to their end; ``ns`` a tasklet, the best of 5.
- ``idle`` (param ``n`` = 10 000): n tasklets each blocked in a receive on its own
  channel, in a fresh process: what each adds to the process's Uss (``uss_bytes``, and
  ``pss_bytes``; /proc/self/smaps_rollup), then they are all ended.

Each impl runs in a process of its own (``idle`` in another), so one's memory and heap
never count for another. A peer that is not installed is a skipped row saying so.
"""
from __future__ import annotations

import collections
import json
import os
import random
import statistics
import subprocess
import sys
import time

from . import bench as B

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional

IMPLS = ["shoal", "greenlet", "gevent", "asyncio", "generator"]
PACKAGES = {"greenlet": "python3-greenlet", "gevent": "python3-gevent"}
GOALS = {"hackysack_s": 0.015, "vs_greenlet": 30.0, "hop_ns": 100.0, "spawn_ns": 500.0,
         "idle_bytes": 16 * 1024}


# ---- the impls: spawn, channel, run, each as cheap as that impl allows ----

class ShoalImpl:
    name = "shoal"

    def __init__(self) -> None:
        from shoal import tasklets as T
        self.T = T
        self.channel = T.channel

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        self.T.tasklet(fn)(*args)

    def let_run(self) -> None:
        """Lets every runnable tasklet run until it blocks or ends."""
        self.T.schedule()

    def run(self) -> None:
        self.T.run()


class GreenletImpl:
    name = "greenlet"

    def __init__(self) -> None:
        import greenlet
        ready: collections.deque = collections.deque()
        getcurrent = greenlet.getcurrent
        self.greenlet = greenlet.greenlet
        self.ready = ready
        pop = ready.popleft
        hub: List[Any] = [None]

        def block() -> Any:
            # straight to the next runnable greenlet; through run()'s when there is
            # none, or when it has not started: a greenlet starts at the recursion
            # depth of the one that starts it, so a chain of starts would overflow
            if ready and ready[0][0]:
                g, v = pop()
                return g.switch(v)
            return hub[0].switch()

        class Chan:
            __slots__ = ("items", "waiter")

            def __init__(self) -> None:
                self.items: collections.deque = collections.deque()
                self.waiter = None

            def send(self, v: Any) -> None:
                w = self.waiter
                if w is not None:
                    self.waiter = None
                    ready.append((w, v))
                else:
                    self.items.append(v)

            def receive(self) -> Any:
                if self.items:
                    return self.items.popleft()
                self.waiter = getcurrent()
                return block()

        self.hub = hub
        self.getcurrent = getcurrent
        self.channel = Chan

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        self.ready.append((self.greenlet(fn), args))

    def run(self) -> None:
        self.hub[0] = self.getcurrent()
        ready, pop = self.ready, self.ready.popleft
        while ready:
            g, v = pop()
            if g:
                g.switch(v)
            else:
                g.switch(*v)

    let_run = run


class GeventImpl:
    name = "gevent"

    def __init__(self) -> None:
        import gevent
        import gevent.queue

        class Chan:
            __slots__ = ("send", "receive")

            def __init__(self) -> None:
                q = gevent.queue.Queue()
                self.send = q.put_nowait
                self.receive = q.get

        self.gevent = gevent
        self.spawn = gevent.spawn_raw
        self.channel = Chan

    def let_run(self) -> None:
        self.gevent.sleep(0)

    def run(self) -> None:
        self.gevent.wait()


class GeneratorImpl:
    """Fibra's shape: a task is a generator that yields the channel it receives from;
    the scheduler resumes it with the value once there is one."""
    name = "generator"

    def __init__(self) -> None:
        ready: collections.deque = collections.deque()

        class Tube:
            __slots__ = ("items", "waiter")

            def __init__(self) -> None:
                self.items: collections.deque = collections.deque()
                self.waiter = None

            def send(self, v: Any) -> None:
                w = self.waiter
                if w is not None:
                    self.waiter = None
                    ready.append((w, v))
                else:
                    self.items.append(v)

        self.ready = ready
        self.channel = Tube

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        self.ready.append((fn(*args), None))

    def run(self) -> None:
        ready = self.ready
        pop = ready.popleft
        while ready:
            g, v = pop()
            try:
                ch = g.send(v)
                while ch.items:  # the value is there: go on at once
                    ch = g.send(ch.items.popleft())
                ch.waiter = g
            except StopIteration:
                pass

    let_run = run


# ---- the programs: one shape, written as each impl's tasks must be ----

def hackysack(impl: Any, n: int, turns: int) -> int:
    """Stackless's hackysack (the seed): blocking calls (shoal, greenlet, gevent)."""
    chan, spawn = impl.channel, impl.spawn
    counter = [0]

    class Sacker:
        __slots__ = ("circle", "ch")

        def __init__(self, circle: List[Any]) -> None:
            self.circle = circle
            circle.append(self)
            self.ch = chan()
            spawn(self.loop)

        def loop(self) -> None:
            receive, circle, choice = self.ch.receive, self.circle, random.choice
            while True:
                msg = receive()
                if msg == "exit":
                    return
                counter[0] += 1
                if counter[0] >= turns:
                    for hs in circle:
                        if hs is not self:
                            hs.ch.send("exit")
                    return
                kick = self
                while kick is self:
                    kick = choice(circle)
                kick.ch.send(self)

    circle: List[Any] = []
    one = Sacker(circle)
    for _ in range(n):
        Sacker(circle)
    spawn(one.ch.send, one)
    impl.run()
    return counter[0]


def hackysack_gen(impl: Any, n: int, turns: int) -> int:
    chan, spawn = impl.channel, impl.spawn
    counter = [0]

    class Sacker:
        __slots__ = ("circle", "ch")

        def __init__(self, circle: List[Any]) -> None:
            self.circle = circle
            circle.append(self)
            self.ch = chan()
            spawn(self.loop)

        def loop(self) -> Any:
            ch, circle, choice = self.ch, self.circle, random.choice
            while True:
                msg = yield ch
                if msg == "exit":
                    return
                counter[0] += 1
                if counter[0] >= turns:
                    for hs in circle:
                        if hs is not self:
                            hs.ch.send("exit")
                    return
                kick = self
                while kick is self:
                    kick = choice(circle)
                kick.ch.send(self)

    circle: List[Any] = []
    one = Sacker(circle)
    for _ in range(n):
        Sacker(circle)
    one.ch.send(one)
    impl.run()
    return counter[0]


async def hackysack_async(n: int, turns: int) -> int:
    import asyncio
    counter = [0]
    tasks = []
    create = asyncio.get_running_loop().create_task

    class Sacker:
        __slots__ = ("circle", "ch")

        def __init__(self, circle: List[Any]) -> None:
            self.circle = circle
            circle.append(self)
            self.ch = asyncio.Queue()
            tasks.append(create(self.loop()))

        async def loop(self) -> None:
            get, circle, choice = self.ch.get, self.circle, random.choice
            while True:
                msg = await get()
                if msg == "exit":
                    return
                counter[0] += 1
                if counter[0] >= turns:
                    for hs in circle:
                        if hs is not self:
                            hs.ch.put_nowait("exit")
                    return
                kick = self
                while kick is self:
                    kick = choice(circle)
                kick.ch.put_nowait(self)

    circle: List[Any] = []
    one = Sacker(circle)
    for _ in range(n):
        Sacker(circle)
    one.ch.put_nowait(one)
    await asyncio.gather(*tasks)
    return counter[0]


def hop(impl: Any, n: int) -> None:
    a, b = impl.channel(), impl.channel()

    def ping() -> None:
        send, receive = a.send, b.receive
        for i in range(n):
            send(i)
            receive()

    def pong() -> None:
        send, receive = b.send, a.receive
        for _ in range(n):
            send(receive())

    impl.spawn(pong)
    impl.spawn(ping)
    impl.run()


def hop_gen(impl: Any, n: int) -> None:
    a, b = impl.channel(), impl.channel()

    def ping() -> Any:
        send = a.send
        for i in range(n):
            send(i)
            yield b

    def pong() -> Any:
        send = b.send
        for _ in range(n):
            send((yield a))

    impl.spawn(pong)
    impl.spawn(ping)
    impl.run()


async def hop_async(n: int) -> None:
    import asyncio
    a, b = asyncio.Queue(), asyncio.Queue()

    async def ping() -> None:
        send, receive = a.put_nowait, b.get
        for i in range(n):
            send(i)
            await receive()

    async def pong() -> None:
        send, receive = b.put_nowait, a.get
        for _ in range(n):
            send(await receive())

    await asyncio.gather(pong(), ping())


def nop() -> None:
    return None


def nop_gen() -> Any:
    return
    yield  # a generator that ends at its first step


async def nop_async() -> None:
    return None


def spawn(impl: Any, n: int) -> None:
    sp = impl.spawn
    for _ in range(n):
        sp(nop)
    impl.run()


def spawn_gen(impl: Any, n: int) -> None:
    sp = impl.spawn
    for _ in range(n):
        sp(nop_gen)
    impl.run()


async def spawn_async(n: int) -> None:
    import asyncio
    create = asyncio.get_running_loop().create_task
    await asyncio.gather(*[create(nop_async()) for _ in range(n)])


# ---- memory ----

def uss_pss() -> tuple:
    """This process's Uss and Pss in bytes (smaps_rollup)."""
    uss = pss = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Private_Clean", "Private_Dirty"):
                uss += int(v.split()[0]) * 1024
            elif k == "Pss":
                pss = int(v.split()[0]) * 1024
    return uss, pss


def idle(impl_name: str, n: int) -> Dict[str, float]:
    """n tasklets blocked in a receive each: bytes each adds to Uss and Pss."""
    import gc
    blocked = [0]
    if impl_name == "asyncio":
        import asyncio

        async def waiter(q: Any) -> None:
            blocked[0] += 1
            await q.get()

        async def main() -> Dict[str, float]:
            gc.collect()
            qs = [asyncio.Queue() for _ in range(n)]
            u0, p0 = uss_pss()
            create = asyncio.get_running_loop().create_task
            ts = [create(waiter(q)) for q in qs]
            await asyncio.sleep(0)
            u1, p1 = uss_pss()
            assert blocked[0] == n, blocked[0]
            for q in qs:
                q.put_nowait("exit")
            await asyncio.gather(*ts)
            return {"uss_bytes": (u1 - u0) / n, "pss_bytes": (p1 - p0) / n}
        return asyncio.run(main())
    impl = make_impl(impl_name)
    gc.collect()
    chans = [impl.channel() for _ in range(n)]
    u0, p0 = uss_pss()
    if impl_name == "generator":
        def gwaiter(ch: Any) -> Any:
            blocked[0] += 1
            yield ch
        for ch in chans:
            impl.spawn(gwaiter, ch)
    else:
        def waiter(ch: Any) -> None:
            blocked[0] += 1
            ch.receive()
        for ch in chans:
            impl.spawn(waiter, ch)
    impl.let_run()
    u1, p1 = uss_pss()
    assert blocked[0] == n, blocked[0]
    for ch in chans:
        ch.send("exit")
    impl.run()
    return {"uss_bytes": (u1 - u0) / n, "pss_bytes": (p1 - p0) / n}


# ---- one impl's rows, in a process of its own ----

def make_impl(name: str) -> Any:
    return {"shoal": ShoalImpl, "greenlet": GreenletImpl, "gevent": GeventImpl,
            "generator": GeneratorImpl}[name]()


def timed_runs(fn: Callable[[], Any], runs: int) -> List[float]:
    """Each run timed as the seed timed hackysack (``python timeit.py -n 3``): timeit
    turns the cyclic collector off while it times, so the garbage of the previous run is
    collected before each run rather than inside a random one; every impl alike."""
    import gc
    fn()  # a warm-up: pools, caches and the first page faults
    out = []
    enabled = gc.isenabled()
    try:
        for _ in range(runs):
            gc.collect()
            gc.disable()
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
            if enabled:
                gc.enable()
    finally:
        if enabled:
            gc.enable()
    return out


def child_rows(impl_name: str, sizes: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The timed rows of one impl: (test, params, metrics)."""
    import gc
    runs = sizes["runs"]
    rows = []
    if impl_name == "asyncio":
        import asyncio

        def inloop(coro_fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
            # timed inside one running loop: the loop's start is not a tasklet's cost
            return lambda: loop.run_until_complete(coro_fn(*args))
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        hs = lambda n, t: inloop(hackysack_async, n, t)  # noqa: E731
        hp = lambda n: inloop(hop_async, n)  # noqa: E731
        sp = lambda n: inloop(spawn_async, n)  # noqa: E731
    else:
        impl = make_impl(impl_name)
        gen = impl_name == "generator"
        hs = lambda n, t: lambda: (hackysack_gen if gen else hackysack)(impl, n, t)  # noqa
        hp = lambda n: lambda: (hop_gen if gen else hop)(impl, n)  # noqa: E731
        sp = lambda n: lambda: (spawn_gen if gen else spawn)(impl, n)  # noqa: E731
    gc.collect()
    for n in sizes["hackysack"]:
        t = timed_runs(hs(n, sizes["turns"]), runs)
        rows.append(("hackysack", {"n": n, "turns": sizes["turns"]},
                     {"best_s": min(t), "mean_ms": statistics.fmean(t) * 1e3,
                      "std_ms": statistics.stdev(t) * 1e3 if len(t) > 1 else 0.0,
                      "min_ms": min(t) * 1e3, "max_ms": max(t) * 1e3, "runs": len(t)}))
    for test, fn, n, per in ([("hop", hp, sizes["hop"], 2)] +
                             [("spawn", sp, k, 1) for k in sizes["spawn"]]):
        t = [x / (n * per) * 1e9 for x in timed_runs(fn(n), runs)]
        rows.append((test, {"n": n}, {"ns": min(t), "mean_ns": statistics.fmean(t),
                                      "std_ns": statistics.stdev(t) if len(t) > 1 else 0.0,
                                      "min_ns": min(t), "max_ns": max(t), "runs": len(t)}))
    if impl_name == "asyncio":
        loop.close()
    return rows


def importable(impl_name: str) -> Optional[str]:
    """None, or why impl cannot run here."""
    mod = {"shoal": "shoal._shoal"}.get(impl_name, impl_name)
    if impl_name in ("asyncio", "generator"):
        return None
    try:
        __import__(mod)
    except Exception as e:  # not installed, or broken
        pkg = PACKAGES.get(impl_name)
        return "%s cannot be imported (%s: %s)%s" % (
            impl_name, type(e).__name__, e, "; Debian: apt-get install " + pkg if pkg else "")
    return None


def child(argv: List[str]) -> int:
    """python3 -m shoal.bench_fibers IMPL PART SIZES_JSON: the rows as JSON lines."""
    impl_name, part, sizes = argv[0], argv[1], json.loads(argv[2])
    if part == "idle":
        m = idle(impl_name, sizes["idle"])
        print(json.dumps(["idle", {"n": sizes["idle"]}, m]))
    else:
        for row in child_rows(impl_name, sizes):
            print(json.dumps(list(row)))
    return 0


def run_child(impl_name: str, part: str, sizes: Dict[str, Any], tests: List[Any]) -> None:
    baseline = impl_name != "shoal"
    why = importable(impl_name)
    if why is None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] +
            [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        try:
            r = subprocess.run([sys.executable, "-m", "shoal.bench_fibers", impl_name, part,
                                json.dumps(sizes)], capture_output=True, text=True, env=env,
                               timeout=900)
            got = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("[")]
            for test, params, metrics in got:
                B.result(test, params, metrics, impl=impl_name, baseline=baseline)
            if r.returncode == 0 and got:
                return
            why = "exited with %d: %s" % (r.returncode, (r.stderr.strip().splitlines()
                                                       or ["no output"])[-1])
        except subprocess.TimeoutExpired:
            why = "timed out after 900 s"
        status = "failed"
    else:
        status = "skipped"
    for test, params in tests:
        B.result(test, params, {}, impl=impl_name, baseline=baseline, status=status, why=why)


def summary(rows: List[Dict[str, Any]]) -> str:
    ok = {}
    for r in rows:
        if r["status"] == "ok":
            ok[(r["test"], r["impl"], tuple(sorted(r["params"].items())))] = r["metrics"]

    def get(test: str, impl: str, **params: Any) -> Optional[Dict[str, float]]:
        return ok.get((test, impl, tuple(sorted(params.items()))))

    def met(b: bool) -> str:
        return "met" if b else "NOT met"
    parts = []
    big = max([r["params"]["n"] for r in rows if r["test"] == "hackysack"] or [0])
    turns = max([r["params"]["turns"] for r in rows if r["test"] == "hackysack"] or [0])
    hs = get("hackysack", "shoal", n=big, turns=turns)
    gl = get("hackysack", "greenlet", n=big, turns=turns)
    if hs:
        parts.append("hackysack(%d,%d) best %.1f ms (goal <= 15 ms: %s)" % (
            big, turns, hs["best_s"] * 1e3,
            met(hs["best_s"] <= GOALS["hackysack_s"]) if big == 10000 else "not run at 10000"))
    if hs and gl:
        x = gl["best_s"] / hs["best_s"]
        parts.append("%.0fx greenlet (goal >= 30x: %s)" % (x, met(x >= GOALS["vs_greenlet"])))
    others = []
    for impl in IMPLS[2:]:
        o = get("hackysack", impl, n=big, turns=turns)
        if o and hs:
            others.append("%s %.1f ms" % (impl, o["best_s"] * 1e3))
    if others:
        parts.append("beside " + ", ".join(others))
    for test, key, goal, unit in (("hop", "ns", GOALS["hop_ns"], "ns"),
                                  ("spawn", "ns", GOALS["spawn_ns"], "ns a tasklet")):
        for r in rows:
            if r["test"] == test and r["impl"] == "shoal" and r["status"] == "ok":
                v = r["metrics"][key]
                parts.append("%s %.0f %s at n=%d (goal <= %.0f: %s)" % (
                    test, v, unit, r["params"]["n"], goal, met(v <= goal)))
    r = [x for x in rows if x["test"] == "idle" and x["impl"] == "shoal" and x["status"] == "ok"]
    if r:
        v = r[0]["metrics"]["uss_bytes"]
        parts.append("idle %.1f KiB Uss a blocked tasklet of %d (goal <= 16 KiB: %s)" % (
            v / 1024, r[0]["params"]["n"], met(v <= GOALS["idle_bytes"])))
    return "summary: " + "; ".join(parts)


def plan(a: Any) -> Dict[str, Any]:
    tiny = getattr(a, "tiny", False) or os.environ.get("SHOAL_BENCH_TINY") == "1"
    if tiny:  # the tests' check that every row runs, not a measurement
        return {"hackysack": [100], "turns": 100, "hop": 1000, "spawn": [1000], "idle": 1000,
                "runs": 1}
    if a.quick:
        return {"hackysack": [1000, 10000], "turns": 1000, "hop": 100000, "spawn": [20000],
                "idle": 10000, "runs": 3}
    return {"hackysack": [100, 1000, 10000], "turns": 1000, "hop": 200000,
            "spawn": [10000, 100000], "idle": 10000, "runs": 5}


def run(a: Any) -> int:
    B.SUITE = "py-fibers"
    sizes = plan(a)
    tests = [("hackysack", {"n": n, "turns": sizes["turns"]}) for n in sizes["hackysack"]]
    tests += [("hop", {"n": sizes["hop"]})] + [("spawn", {"n": k}) for k in sizes["spawn"]]
    # idle in a fresh process each, first, then the timed rows: one impl at a time
    for impl in IMPLS:
        run_child(impl, "idle", sizes, [("idle", {"n": sizes["idle"]})])
    for impl in IMPLS:
        run_child(impl, "timed", sizes, tests)
    # rows grouped by test, shoal then its peers (greenlet first: the baseline)
    order = {t: i for i, t in enumerate(["hackysack", "hop", "spawn", "idle"])}
    B.RESULTS.sort(key=lambda r: (order.get(r["test"], 9), r["params"].get("n", 0),
                                  IMPLS.index(r["impl"]) if r["impl"] in IMPLS else 9))
    B.emit(a.json, "shoal bench py-fibers: Python tasklets on shoal's fibers and their peers "
                   "(%s)" % sys.executable)
    if not a.json:
        print(summary(B.RESULTS))
    return B.exit_status()


if __name__ == "__main__":
    sys.exit(child(sys.argv[1:]))
