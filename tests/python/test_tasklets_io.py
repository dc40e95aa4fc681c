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
