"""shoal.tasklets: Stackless-shaped tasklets on shoal's fibers (python/_shoal/tasklet.c).

Every test leaves no tasklet alive (run() at its end): the tests share the main
thread's tasklets."""
import contextvars
import gc
import os
import random
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from shoal import _shoal
from shoal import tasklets as T


@pytest.fixture(autouse=True)
def no_tasklet_left():
    yield
    T.run(timeout=10)


def hackysack(n, turns):
    """The seed's program: n sackers kick one ball around until turns kicks."""
    class Sacker:
        counter = 0

        def __init__(self, name, circle):
            self.name = name
            self.circle = circle
            circle.append(self)
            self.ch = T.channel()
            T.tasklet(self.loop)()

        def loop(self):
            while True:
                msg = self.ch.receive()
                if msg == "exit":
                    return
                Sacker.counter += 1
                if Sacker.counter >= turns:
                    for hs in self.circle:
                        if hs is not self:
                            hs.ch.send("exit")
                    return
                kick = self
                while kick is self:
                    kick = random.choice(self.circle)
                kick.ch.send(self)

    circle = []
    one = Sacker("1", circle)
    for i in range(n):
        Sacker(str(i), circle)
    one.ch.send(one)
    T.run()
    return Sacker.counter


def test_hackysack():
    assert hackysack(1000, 100) == 100
    assert hackysack(100, 1000) == 1000


def test_the_readmes_hackysack_example_runs():
    """examples/hackysack.py, the README's: its game ends after its turns, as a program."""
    ex = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hackysack.py")
    out = subprocess.run([sys.executable, ex, "200", "300"], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("hackysack(200, 300): best of 5 "), out.stdout


def test_join_returns_the_result_and_raises_the_exception():
    def ok(a, b=0):
        T.schedule()
        return a + b

    def bad():
        T.schedule()
        raise KeyError("nope")

    t1 = T.tasklet(ok)(1, b=2)
    t2 = T.tasklet(bad)()
    assert t1.alive and t2.alive
    assert t1.join() == 3
    with pytest.raises(KeyError, match="nope"):
        t2.join()
    assert not t1.alive and not t2.alive
    with pytest.raises(RuntimeError, match="never started"):
        T.tasklet(ok).join()


def test_join_timeout():
    t = T.tasklet(T.sleep)(5)
    with pytest.raises(TimeoutError):
        t.join(timeout=0.05)
    t.kill()
    with pytest.raises(T.TaskletExit):
        t.join()


def test_interleaved_except_blocks_keep_their_own_exception():
    seen = []

    def f(exc):
        try:
            raise exc
        except Exception:
            for _ in range(3):
                T.schedule()
                seen.append((exc.args[0], sys.exc_info()[1].args[0]))
        assert sys.exc_info() == (None, None, None)

    a = T.tasklet(f)(ValueError("a"))
    b = T.tasklet(f)(TypeError("b"))
    try:
        raise OSError("main")
    except OSError:
        T.run()
        assert sys.exc_info()[1].args[0] == "main"
    a.join()
    b.join()
    assert len(seen) == 6 and all(x == y for x, y in seen)


def test_contextvars_are_copied_at_spawn_and_isolated():
    var = contextvars.ContextVar("var", default="unset")
    var.set("main")
    got = {}

    def f(name):
        got[name, "start"] = var.get()
        var.set(name)
        T.schedule()
        got[name, "after"] = var.get()

    a = T.tasklet(f)("a")
    var.set("main2")  # after a's spawn: a keeps its copy
    b = T.tasklet(f)("b")
    T.run()
    assert got == {("a", "start"): "main", ("a", "after"): "a",
                   ("b", "start"): "main2", ("b", "after"): "b"}
    assert var.get() == "main2"
    a.join(), b.join()


def test_recursion_error_in_a_tasklet_is_an_exception():
    def down(n):
        return down(n + 1)

    t = T.tasklet(down)(0)
    with pytest.raises(RecursionError):
        t.join()
    # recursion through C frames (map) uses the tasklet's C stack: still an exception
    code = textwrap.dedent("""
        from shoal import tasklets as T
        def viac(n):
            return list(map(viac, [n + 1]))
        t = T.tasklet(viac)(0)
        try:
            t.join()
        except RecursionError:
            print("RecursionError")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "RecursionError"


def test_kill_raises_taskletexit_at_the_next_switch_point():
    log = []
    ch = T.channel()

    def blocked():
        try:
            ch.receive()
        except T.TaskletExit:
            log.append("exit")
            raise
        finally:
            log.append("finally")

    def never():
        log.append("ran")

    t = T.tasklet(blocked)()
    T.schedule()
    assert ch.balance == -1
    t.kill()
    with pytest.raises(T.TaskletExit):
        t.join()
    assert log == ["exit", "finally"] and ch.balance == 0
    n = T.tasklet(never)()
    n.kill()
    with pytest.raises(T.TaskletExit):
        n.join()
    assert log == ["exit", "finally"]
    # a tasklet that catches it goes on
    def stubborn():
        try:
            T.sleep(10)
        except T.TaskletExit:
            return "survived"

    s = T.tasklet(stubborn)()
    T.schedule()
    s.kill()
    assert s.join() == "survived"


def test_deadlock_names_the_blocked_tasklets():
    a, b = T.channel(), T.channel()

    def waiter(ch):
        ch.receive()

    ta = T.tasklet(waiter)(a)
    ta.name = "waits-on-a"
    tb = T.tasklet(waiter)(b)
    tb.name = "waits-on-b"
    with pytest.raises(RuntimeError, match="deadlock") as e:
        T.run()
    assert "waits-on-a" in str(e.value) and "waits-on-b" in str(e.value)
    assert "channel.receive" in str(e.value)
    # main blocking for ever on a channel is a deadlock too
    with pytest.raises(RuntimeError, match="deadlock"):
        T.channel().receive()
    ta.kill()
    tb.kill()
    T.run()
    assert not ta.alive and not tb.alive


def test_channel_preference():
    for pref, expect in [(-1, ["recv", "sent"]), (0, ["sent", "recv"]), (1, ["sent", "recv"])]:
        log = []
        ch = T.channel(preference=pref)

        def receiver():
            ch.receive()
            log.append("recv")

        T.tasklet(receiver)()
        T.schedule()  # the receiver waits
        assert ch.balance == -1
        ch.send(1)
        log.append("sent")
        T.run()
        assert log == expect, pref
    for pref, expect in [(1, ["sender on", "got"]), (0, ["got", "sender on"]),
                         (-1, ["got", "sender on"])]:
        log = []
        ch = T.channel(preference=pref)

        def sender():
            ch.send(1)
            log.append("sender on")

        T.tasklet(sender)()
        T.schedule()
        assert ch.balance == 1
        ch.receive()
        log.append("got")
        T.run()
        assert log == expect, pref
    with pytest.raises(ValueError, match="preference"):
        T.channel(preference=2)


def test_channel_close_and_iteration():
    ch = T.channel()
    got = []

    def consumer():
        for x in ch:
            got.append(x)
        return "ended"

    c = T.tasklet(consumer)()

    def producer():
        for i in range(5):
            ch.send(i)

    p = T.tasklet(producer)()
    p.join()
    ch.close()
    assert ch.closing and ch.closed
    assert c.join() == "ended"
    assert got == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="closed"):
        ch.send(1)
    with pytest.raises(ValueError, match="closed"):
        ch.receive()
    # senders waiting when it closes are still received
    ch2 = T.channel()
    s = T.tasklet(ch2.send)("late")
    T.schedule()
    ch2.close()
    assert ch2.closing and not ch2.closed and ch2.balance == 1
    assert ch2.receive() == "late"
    assert ch2.closed
    s.join()


def test_getcurrent_and_schedule():
    main = T.getcurrent()
    assert main.alive and "main" in repr(main)
    inside = []

    def f():
        inside.append(T.getcurrent())

    t = T.tasklet(f)()
    T.run()
    assert inside == [t] and T.getcurrent() is main
    T.schedule()  # nothing else runnable: returns


def test_sleep_lets_others_run():
    import time
    log = []

    def sleeper(s, tag):
        T.sleep(s)
        log.append(tag)

    t0 = time.monotonic()
    T.tasklet(sleeper)(0.06, "slow")
    T.tasklet(sleeper)(0.02, "fast")
    T.run()
    assert log == ["fast", "slow"]
    assert 0.05 < time.monotonic() - t0 < 2


def test_unjoined_exception_is_reported():
    reports = []
    old = sys.unraisablehook
    sys.unraisablehook = reports.append
    try:
        def bad():
            raise ZeroDivisionError("lost?")

        T.tasklet(bad)()
        T.run()
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert len(reports) == 1
    assert isinstance(reports[0].exc_value, ZeroDivisionError)
    assert "nobody joined" in reports[0].err_msg


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE") // 1024


def test_100000_tasklets_without_growth():
    ch = T.channel()

    def f(i):
        if i % 2:
            T.schedule()
        return i

    def batch(n):
        ts = [T.tasklet(f)(i) for i in range(n)]
        T.run()
        assert sum(t.join() for t in ts) == n * (n - 1) // 2

    batch(2000)  # warms the pools
    gc.collect()
    tracemalloc.start()
    before_py = tracemalloc.get_traced_memory()[0]
    before_rss = rss_kib()
    for _ in range(50):
        batch(2000)
    gc.collect()
    grown_py = tracemalloc.get_traced_memory()[0] - before_py
    tracemalloc.stop()
    grown_rss = rss_kib() - before_rss
    assert grown_py < 256 * 1024, grown_py
    if not _shoal._SANITIZER_ENV:  # ASan's quarantine keeps freed memory
        assert grown_rss < 8 * 1024, grown_rss
    assert sys.getrefcount(f) < 10
    assert ch.balance == 0


def test_tasklets_belong_to_their_thread():
    import threading
    ch = T.channel()
    t = T.tasklet(ch.receive)()
    errors = []

    def other():
        for op in (t.kill, t.join):
            try:
                op()
            except RuntimeError as e:
                errors.append(str(e))
        # a thread of its own runs its own tasklets
        errors.append(T.tasklet(lambda: 7)().join())

    th = threading.Thread(target=other)
    th.start()
    th.join()
    # (channels are not bound: test_tasklets_io.py sends between threads)
    assert len(errors) == 3 and "another thread" in errors[0] and errors[2] == 7
    ch.send("done")
    t.join()


def test_a_finished_tasklet_in_a_cycle_is_collected():
    gone = []

    class Sentinel:
        def __del__(self):
            gone.append(1)

    box = []

    def f():
        box.append(Sentinel())
        return box  # the result refers to the tasklet through box

    t = T.tasklet(f)()
    box.append(t)
    assert t.join() is box
    del t, box
    gc.collect()
    assert gone == [1]


def test_a_thread_that_used_tasklets_leaves_nothing_behind():
    import threading

    def use():
        ch = T.channel()
        T.tasklet(ch.send)(1)
        assert ch.receive() == 1
        T.run()

    def fds():
        return len(os.listdir("/proc/self/fd"))

    th = threading.Thread(target=use)
    th.start()
    th.join()
    before = fds()
    for _ in range(20):
        th = threading.Thread(target=use)
        th.start()
        th.join()
    assert fds() <= before  # each thread's scheduler (epoll, eventfd) went with it


def test_ctrl_c_while_run_idles_raises_at_once():
    code = textwrap.dedent("""
        import os, signal, threading, time
        from shoal import tasklets as T
        T.tasklet(T.sleep)(30)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            T.run()
        except KeyboardInterrupt:
            print("KeyboardInterrupt after %.1f s" % (time.monotonic() - t0))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("KeyboardInterrupt after"), r.stdout
    assert float(r.stdout.split()[2]) < 5


def test_settrace_sees_every_tasklet_across_switches():
    calls = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name.startswith("traced_"):
            calls.append(frame.f_code.co_name)
        return None

    def traced_inner():
        return 1

    def traced_worker(n):
        for _ in range(n):
            T.schedule()
            traced_inner()

    a = T.tasklet(traced_worker)(2)
    T.schedule()  # a is parked inside traced_worker before tracing starts
    sys.settrace(tracer)
    try:
        b = T.tasklet(traced_worker)(2)
        T.run()
    finally:
        sys.settrace(None)
    a.join(), b.join()
    # a's calls after tracing began, b's call and all its inner calls
    assert calls.count("traced_worker") == 1
    assert calls.count("traced_inner") == 4
    T.tasklet(traced_inner)().join()
    assert calls.count("traced_inner") == 4  # tracing off again in new tasklets


def test_switching_inside_a_c_callback():
    import ctypes
    libc = ctypes.CDLL(None)
    CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                           ctypes.POINTER(ctypes.c_int))
    switches = []

    def sort(values, tag):
        def cmp(a, b):
            switches.append(tag)
            T.schedule()  # qsort's C frames stay on this tasklet's stack
            return a[0] - b[0]

        arr = (ctypes.c_int * len(values))(*values)
        libc.qsort(arr, len(arr), ctypes.sizeof(ctypes.c_int), CMP(cmp))
        # a C extension calling back takes the GIL state as usual
        st = ctypes.pythonapi.PyGILState_Ensure()
        ctypes.pythonapi.PyGILState_Release(st)
        return list(arr)

    a = T.tasklet(sort)([5, 3, 9, 1, 7], "a")
    b = T.tasklet(sort)([8, 2, 6, 4], "b")
    assert a.join() == [1, 3, 5, 7, 9]
    assert b.join() == [2, 4, 6, 8]
    assert "ab" in "".join(switches) and "ba" in "".join(switches)


def test_systemexit_and_keyboardinterrupt_in_a_tasklet_reach_the_main_tasklet():
    def leave():
        T.schedule()
        raise SystemExit(3)

    t = T.tasklet(leave)()
    sleeper = T.tasklet(T.sleep)(0.05)
    with pytest.raises(SystemExit):
        T.run()
    with pytest.raises(SystemExit):
        t.join()  # still its outcome
    sleeper.join()

    def interrupted():
        raise KeyboardInterrupt

    T.tasklet(interrupted)()
    with pytest.raises(KeyboardInterrupt):
        T.schedule()


def test_c_stack_overflow_in_a_tasklet_is_reported_as_shoal_reports_it():
    # a recursion limit raised past what 1 MiB holds: the guard page stops it
    code = textwrap.dedent("""
        import sys
        from shoal import tasklets as T
        sys.setrecursionlimit(1000000)
        def viac(n):
            return list(map(viac, [n + 1]))
        T.tasklet(viac)(0).join()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == -11, (r.returncode, r.stderr)
    assert "shoal: stack overflow in fiber 'viac'" in r.stderr
    assert "1024 KiB with guard page" in r.stderr
