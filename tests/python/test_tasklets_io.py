"""shoal.tasklets beyond one thread's channels: select(), fd waits, to_thread(),
channels between threads and the asyncio bridge (python/_shoal/channel.c,
tasklet_io.c, python/shoal/tasklets.py).

Every test leaves no tasklet alive (run() at its end): the tests share the main
thread's tasklets."""
import collections
import threading
import time

import pytest

from shoal import tasklets as T


@pytest.fixture(autouse=True)
def no_tasklet_left():
    yield
    T.run(timeout=10)


# ---- select ----

def test_select_picks_a_ready_case_at_random():
    chans = [T.channel() for _ in range(3)]
    senders = []
    rounds = 3000
    for i, ch in enumerate(chans):
        def send(ch=ch, i=i):
            for _ in range(rounds):
                ch.send(i)
        senders.append(T.tasklet(send)())
    T.schedule()  # every sender now waits on its channel
    seen = collections.Counter()
    for _ in range(rounds):
        assert all(ch.balance == 1 for ch in chans)  # all three ready every time
        idx, v = T.select([ch.receive_case() for ch in chans])
        assert v == idx
        seen[idx] += 1
        T.schedule()  # the sender that was served queues again
    # uniform choice: each about 1000 of 3000 (a fixed order would give 3000/0/0)
    assert all(800 < seen[i] < 1200 for i in range(3)), seen
    for i, ch in enumerate(chans):
        for _ in range(rounds - seen[i]):
            assert ch.receive() == i
    for t in senders:
        t.join()


def test_select_waits_and_unlinks_the_other_cases():
    a, b, c = T.channel(), T.channel(), T.channel()
    got = []

    def selector():
        got.append(T.select([a.receive_case(), b.receive_case(), c.send_case("to-c")]))

    t = T.tasklet(selector)()
    T.schedule()
    assert (a.balance, b.balance, c.balance) == (-1, -1, 1)
    b.send("to-b")
    t.join()
    assert got == [(1, "to-b")]
    # the select left every other channel: nothing waits there any more
    assert (a.balance, b.balance, c.balance) == (0, 0, 0)

    # a send case fires when a receiver comes
    t = T.tasklet(selector)()
    T.schedule()
    assert c.receive() == "to-c"
    t.join()
    assert got[1] == (2, None) and (a.balance, b.balance, c.balance) == (0, 0, 0)


def test_select_timeout_and_closed_channels():
    a, b = T.channel(), T.channel()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        T.select([a, b.receive_case()], timeout=0.05)
    assert time.monotonic() - t0 >= 0.04
    assert (a.balance, b.balance) == (0, 0)
    with pytest.raises(TimeoutError):
        T.select([a], timeout=0)
    # Go's: a receive from a closed, empty channel is ready and gets CLOSED
    a.close()
    assert T.select([a, b]) == (0, T.CLOSED)
    with pytest.raises(ValueError, match="closed"):
        T.select([a.send_case(1)])
    # senders waiting when a channel closes are still received, then CLOSED
    c = T.channel()
    s = T.tasklet(c.send)("last")
    T.schedule()
    c.close()
    assert T.select([c.receive_case()]) == (0, "last")
    assert T.select([c.receive_case()]) == (0, T.CLOSED)
    s.join()
    # a close while a select waits ends it with that case
    got = []
    t = T.tasklet(lambda: got.append(T.select([b, T.channel()])))()
    T.schedule()
    b.close()
    t.join()
    assert got == [(0, T.CLOSED)]
    with pytest.raises(TypeError, match="receive_case"):
        T.select([42])
    c = T.channel()
    with pytest.raises(ValueError, match="same channel"):
        T.select([c.receive_case(), c.send_case(1)])


def test_kill_and_deadlock_in_select():
    a = T.channel()
    t = T.tasklet(T.select)([a, a])
    T.schedule()
    assert a.balance == -2
    t.kill()
    with pytest.raises(T.TaskletExit):
        t.join()
    assert a.balance == 0
    with pytest.raises(RuntimeError, match="deadlock.*select"):
        T.select([a])
    assert a.balance == 0


# ---- channels between threads ----

def test_channel_between_two_threads_both_directions():
    to_thread, back = T.channel(), T.channel()
    n = 2000

    def other():
        # a thread with tasklets of its own: its echo tasklet serves us
        def echo():
            for v in to_thread:
                back.send(v * 2)

        e = T.tasklet(echo)()
        T.run()
        assert not e.alive

    th = threading.Thread(target=other)
    th.start()
    ticks = []
    ticker = T.tasklet(lambda: [ticks.append(T.sleep(0.001)) for _ in range(20)])()
    for i in range(n):
        to_thread.send(i)
        assert back.receive() == 2 * i
    to_thread.close()
    th.join()
    ticker.join()
    assert len(ticks) == 20


def test_a_thread_without_tasklets_sends_and_receives():
    ch = T.channel()
    got = []
    n = 500

    def plain():  # no tasklet here: each send blocks this thread, GIL released
        for i in range(n):
            ch.send(i)
        got.append(ch.receive())

    def consumer():
        for _ in range(n):
            got.append(ch.receive())
        ch.send("bye")

    others = []
    t = T.tasklet(consumer)()
    busy = T.tasklet(lambda: [others.append(T.schedule()) for _ in range(100)])()
    th = threading.Thread(target=plain)
    th.start()
    t.join(timeout=30)
    busy.join()
    th.join(timeout=30)
    assert got == list(range(n)) + ["bye"]
    assert len(others) == 100


def test_deadlock_detection_waits_for_other_threads():
    # main receives before the other thread even started sending: not a deadlock
    ch = T.channel()
    th = threading.Timer(0.1, ch.send, ("late",))
    th.start()
    assert ch.receive() == "late"
    th.join()
    # and once no other thread is left, a receive nobody can end is one
    with pytest.raises(RuntimeError, match="deadlock"):
        ch.receive()


# ---- fd waits ----

def test_wait_readable_suspends_only_the_tasklet():
    import socket
    a, b = socket.socketpair()
    a.setblocking(False)
    got, ticks = [], []

    def reader():
        while True:
            T.wait_readable(a)
            data = a.recv(100)
            if not data:
                return
            got.append(data)

    def ticker():
        for _ in range(5):
            ticks.append(len(got))
            T.sleep(0.005)

    r = T.tasklet(reader)()
    k = T.tasklet(ticker)()
    T.schedule()
    for i in range(3):
        T.sleep(0.01)
        b.send(b"m%d" % i)
        T.wait_writable(b.fileno(), timeout=1)  # an int fd too
    T.sleep(0.01)
    b.close()
    r.join(timeout=5)
    k.join()
    assert b"".join(got) == b"m0m1m2"
    assert len(ticks) == 5  # the ticker ran while the reader waited
    # several tasklets may wait on one fd, and a closed fd number can be reused
    c, d = socket.socketpair()
    woke = []
    waiters = [T.tasklet(lambda: woke.append(T.wait_readable(c)))() for _ in range(3)]
    T.schedule()
    d.send(b"x")
    for w in waiters:
        w.join(timeout=5)
    assert len(woke) == 3
    a.close(), c.close(), d.close()


def test_wait_readable_timeout_kill_and_no_deadlock():
    import socket
    a, b = socket.socketpair()
    with pytest.raises(TimeoutError, match="wait_readable"):
        T.wait_readable(a, timeout=0.02)
    with pytest.raises(TimeoutError):
        T.wait_readable(a, timeout=0)
    t = T.tasklet(T.wait_readable)(a)
    T.schedule()
    assert "wait_readable" in repr(t)
    # run() with only an fd waiter left is not a deadlock: it times out
    with pytest.raises(TimeoutError, match="wait_readable"):
        T.run(timeout=0.05)
    t.kill()
    with pytest.raises(T.TaskletExit):
        t.join()
    # the fd works as before for the next waiter
    b.send(b"y")
    T.wait_readable(a, timeout=1)
    a.close(), b.close()


# ---- to_thread ----

def test_to_thread_result_exception_and_others_run():
    ticks = []

    def ticker():
        for _ in range(10):
            ticks.append(1)
            T.sleep(0.005)

    k = T.tasklet(ticker)()
    t0 = time.monotonic()
    assert T.to_thread(lambda x, y=1: (time.sleep(0.1), x + y)[1], 40, y=2) == 42
    assert time.monotonic() - t0 >= 0.09
    assert len(ticks) >= 5  # the ticker ran while the call blocked its worker
    k.join()
    with pytest.raises(ZeroDivisionError):
        T.to_thread(lambda: 1 / 0)
    # in a copy of the caller's context
    import contextvars
    var = contextvars.ContextVar("var", default="unset")
    var.set("caller's")
    assert T.to_thread(var.get) == "caller's"
    assert T.to_thread(lambda: var.set("worker's") and var.get()) == "worker's"
    assert var.get() == "caller's"
    # many at once, from tasklets: each suspends only itself
    out = []
    ts = [T.tasklet(lambda i=i: out.append(T.to_thread(lambda: (time.sleep(0.02), i)[1])))()
          for i in range(8)]
    for t in ts:
        t.join(timeout=10)
    assert sorted(out) == list(range(8))


def test_to_thread_kill_and_channel_from_the_worker():
    ev = threading.Event()
    t = T.tasklet(T.to_thread)(ev.wait, 5)
    T.schedule()
    assert "to_thread" in repr(t)
    t.kill()
    with pytest.raises(T.TaskletExit):
        t.join()
    ev.set()
    # the worker may use a channel: a tasklet here receives what it sends
    ch = T.channel()
    r = T.tasklet(ch.receive)()
    T.schedule()
    T.to_thread(ch.send, "from a worker")
    assert r.join(timeout=5) == "from a worker"
    # idle workers do not hide a deadlock
    with pytest.raises(RuntimeError, match="deadlock"):
        T.channel().receive()


# ---- asyncio ----

def test_run_asyncio_in_a_tasklet_lets_the_others_run():
    import asyncio
    ticks = []

    def ticker():
        for i in range(5):
            ticks.append(i)
            T.sleep(0.005)

    async def main():
        await asyncio.sleep(0.1)
        return len(ticks)

    T.tasklet(ticker)()
    assert T.run_asyncio(main()) == 5
    # two tasklets, each with its own loop, at once
    async def nap(x):
        await asyncio.sleep(0.03)
        return x
    a = T.tasklet(T.run_asyncio)(nap("a"))
    b = T.tasklet(T.run_asyncio)(nap("b"))
    assert (a.join(timeout=5), b.join(timeout=5)) == ("a", "b")


def test_await_wrap_a_tasklet_and_a_channel():
    import asyncio

    def crunch(n):
        T.sleep(0.01)
        return sum(range(n))

    def fail():
        raise KeyError("tasklet")

    async def main():
        ch = T.channel()
        T.tasklet(lambda: (T.sleep(0.02), ch.send("hello"))[1])()
        r, v, s = await asyncio.gather(T.wrap(T.tasklet(crunch)(10)), T.wrap(ch),
                                       asyncio.sleep(0.01, "slept"))
        with pytest.raises(KeyError):
            await T.wrap(T.tasklet(fail)())
        # a cancelled await kills its helper: the receive takes nothing
        w = asyncio.ensure_future(T.wrap(ch))
        await asyncio.sleep(0.01)
        w.cancel()
        with pytest.raises(asyncio.CancelledError):
            await w
        T.schedule()  # the killed helper ends
        assert ch.balance == 0
        return r, v, s

    assert T.run_asyncio(main()) == (45, "hello", "slept")


def test_wrap_needs_a_loop_run_by_shoal():
    import asyncio

    async def main():
        await T.wrap(T.channel())

    with pytest.raises(RuntimeError, match="run_asyncio"):
        asyncio.run(main())


def test_select_between_threads():
    a, b, quit = T.channel(), T.channel(), T.channel()
    n = 300

    def producer(ch, tag):
        for i in range(n):
            ch.send((tag, i))

    ths = [threading.Thread(target=producer, args=(a, "a")),
           threading.Thread(target=producer, args=(b, "b"))]
    for th in ths:
        th.start()
    got = {"a": [], "b": []}
    while len(got["a"]) + len(got["b"]) < 2 * n:
        idx, (tag, i) = T.select([a, b.receive_case(), quit.receive_case()], timeout=10)
        assert tag == "ab"[idx]
        got[tag].append(i)
    for th in ths:
        th.join()
    assert got == {"a": list(range(n)), "b": list(range(n))}
    assert (a.balance, b.balance, quit.balance) == (0, 0, 0)


@pytest.mark.parametrize("wait", ["wait_readable", "channel from a thread"])
def test_ctrl_c_in_an_fd_or_cross_thread_wait_raises_at_once(wait):
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import os, signal, socket, sys, threading, time
        from shoal import tasklets as T
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        a, b = socket.socketpair()
        ch = T.channel()
        th = threading.Thread(target=time.sleep, args=(30,), daemon=True)
        th.start()  # another thread: the receive is no deadlock
        t0 = time.monotonic()
        try:
            if sys.argv[1] == "wait_readable":
                T.wait_readable(a)
            else:
                ch.receive()
        except KeyboardInterrupt:
            print("KeyboardInterrupt after %.1f s" % (time.monotonic() - t0))
    """)
    r = subprocess.run([sys.executable, "-c", code, wait], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("KeyboardInterrupt after"), r.stdout
    assert float(r.stdout.split()[2]) < 5
