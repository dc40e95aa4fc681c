"""Store calls from tasklets (issue 34): a get in a tasklet suspends only that tasklet
(its fiber waits in the thread's poller, on the doorbell shoald made for the
connection) while the others run; a kill interrupts it and leaves the connection
usable; outside tasklets a get is what it always was. Against real shoald processes
(conftest's shoald_proc); a stopped shoald (SIGSTOP) makes a get wait for as long as
a test wants."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import shoal
from shoal import tasklets as T


@pytest.fixture(autouse=True)
def no_tasklet_left():
    yield
    T.run(timeout=10)


def stop_store(proc):
    """SIGSTOP, and until it took (a request sent before it lands is served)."""
    proc.send_signal(signal.SIGSTOP)
    for _ in range(2000):
        with open("/proc/%d/stat" % proc.pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.001)
    raise AssertionError("shoald did not stop")


def test_a_thousand_tasklets_get_through_one_client_on_one_thread(shoald_proc):
    c = shoal.connect(shoald_proc.sock)
    ids = [c.put(b"v%d" % i) for i in range(1000)]
    threads = threading.active_count()
    got = {}
    ticks = []
    done = []

    def getter(i):
        got[i] = bytes(c.get(ids[i]))

    def ticker():
        # makes progress while the gets wait: it runs between them
        while len(done) < 1:
            ticks.append(1)
            T.schedule()

    def watcher(ts):
        for t in ts:
            t.join()
        done.append(1)

    ts = [T.tasklet(getter)(i) for i in range(1000)]
    T.tasklet(ticker)()
    T.tasklet(watcher)(ts)
    T.run(timeout=60)
    assert got == {i: b"v%d" % i for i in range(1000)}
    assert len(ticks) > 10
    assert threading.active_count() == threads  # no helper thread
    got.clear()
    for k in ids:  # every get's reference was let go of: nothing waits for a reader
        c.delete(k)
    st = c.stat()
    assert st["objects"] == 0 and st["pending_frees"] == 0
    c.close()


def test_a_get_waiting_on_a_stopped_store_lets_the_others_run(shoald_proc):
    c = shoal.connect(shoald_proc.sock)
    key = c.put(b"x")
    out = []

    def getter():
        out.append(bytes(c.get(key)))

    stop_store(shoald_proc)
    try:
        t = T.tasklet(getter)()
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 0.2:  # main runs, the get waits
            T.sleep(0.001)
            n += 1
        assert n >= 50 and out == [] and t.alive
    finally:
        shoald_proc.send_signal(signal.SIGCONT)
    t.join(timeout=10)
    assert out == [b"x"]
    c.close()


def test_kill_of_a_tasklet_blocked_in_a_store_get(shoald_proc):
    c = shoal.connect(shoald_proc.sock)
    key = c.put(b"payload")
    seen = []

    def getter():
        try:
            seen.append(bytes(c.get(key)))
        except T.TaskletExit:
            seen.append("killed")
            T.sleep(0.001)  # the tasklet's own waits still work after the kill
            raise

    def queued():  # waits its turn at the connection behind the getter
        seen.append(bytes(c.get(key)))

    stop_store(shoald_proc)
    try:
        t = T.tasklet(getter)()
        q = T.tasklet(queued)()
        T.sleep(0.05)
        assert t.alive and q.alive and seen == []
        t0 = time.monotonic()
        t.kill()
        with pytest.raises(T.TaskletExit):
            t.join(timeout=5)
        assert time.monotonic() - t0 < 1  # at once, with the store still stopped
        assert seen == ["killed"] and q.alive
    finally:
        shoald_proc.send_signal(signal.SIGCONT)
    q.join(timeout=10)
    assert seen == ["killed", b"payload"]
    # the connection is still good, and the killed get's reference was let go of
    assert bytes(c.get(key)) == b"payload"
    c.delete(key)
    st = c.stat()
    assert st["objects"] == 0 and st["pending_frees"] == 0
    c.close()


def test_kill_of_a_tasklet_waiting_its_turn_at_the_connection(shoald_proc):
    c = shoal.connect(shoald_proc.sock)
    key = c.put(b"x")
    seen = []

    def getter(tag):
        try:
            seen.append((tag, bytes(c.get(key))))
        except T.TaskletExit:
            seen.append((tag, "killed"))
            raise

    stop_store(shoald_proc)
    try:
        a = T.tasklet(getter)("a")
        b = T.tasklet(getter)("b")
        T.sleep(0.02)
        b.kill()  # queued behind a, not in a call
        with pytest.raises(T.TaskletExit):
            b.join(timeout=5)
    finally:
        shoald_proc.send_signal(signal.SIGCONT)
    a.join(timeout=10)
    assert seen == [("b", "killed"), ("a", b"x")]
    c.close()


def test_objects_dropped_while_another_tasklet_is_in_a_call(shoald_proc):
    c = shoal.connect(shoald_proc.sock)
    keys = [c.put(b"k%d" % i) for i in range(20)]
    base = c.stat()["objects"]

    def holder_and_dropper(k):
        v = c._c.get(k)  # the Object alone: its drop is at the del
        T.schedule()
        del v  # dropped while another tasklet may be inside a get

    for k in keys:
        T.tasklet(holder_and_dropper)(k)
    T.run(timeout=30)
    for k in keys:  # the first call released what was left for it
        c.delete(k)
    st = c.stat()
    assert st["objects"] == base - len(keys) and st["pending_frees"] == 0
    c.close()


def test_gets_outside_tasklets_are_unchanged(tmp_path):
    # a fresh interpreter: no tasklet state on its thread, gets release the GIL
    sock = str(tmp_path / "s.sock")
    code = textwrap.dedent("""
        import sys, threading, shoal
        with shoal.Store(size=64 << 20, socket=sys.argv[1]) as s, s.connect() as c:
            k = c.put(b"abc")
            ok = []
            def other():
                for _ in range(200):
                    ok.append(bytes(c.get(k)))
            t = threading.Thread(target=other)
            t.start()
            for _ in range(200):
                assert bytes(c.get(k)) == b"abc"
            t.join()
            assert len(ok) == 200
            from shoal import _shoal
            print("ok")
    """)
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code, sock], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_run_sees_no_deadlock_while_tasklets_wait_in_gets(shoald_proc):
    # every other context waits for ever (for its turn, or in run()), the holder in a
    # get: that one can still end, so run() waits instead of raising a deadlock
    c = shoal.connect(shoald_proc.sock)
    key = c.put(b"x")
    out = []

    def getter():
        out.append(bytes(c.get(key)))

    stop_store(shoald_proc)
    threading.Timer(0.3, shoald_proc.send_signal, (signal.SIGCONT,)).start()
    for _ in range(3):
        T.tasklet(getter)()
    t0 = time.monotonic()
    T.run(timeout=10)
    assert time.monotonic() - t0 >= 0.2
    assert out == [b"x"] * 3
    c.close()


def test_the_main_tasklets_get_lets_the_tasklets_run(shoald_proc):
    c = shoal.connect(shoald_proc.sock)
    key = c.put(b"m")
    ticks = []
    stopping = []

    def ticker():
        while not stopping:
            ticks.append(1)
            T.sleep(0.001)

    t = T.tasklet(ticker)()
    T.schedule()
    stop_store(shoald_proc)
    threading.Timer(0.2, shoald_proc.send_signal, (signal.SIGCONT,)).start()
    assert bytes(c.get(key)) == b"m"  # main waits in the get, the ticker runs
    stopping.append(1)
    t.join(timeout=5)
    assert len(ticks) >= 50
    c.close()
