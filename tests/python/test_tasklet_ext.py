"""Extension calls from tasklets (issue 34): a call into a real extension process made
in a tasklet suspends only that tasklet (the host's ring wait switches in the thread's
poller) while the thread's others run, the tasklets take turns at one extension, and a
host service the extension calls back runs in the calling tasklet, nested calls too."""
import os
import sys
import textwrap
import time

import pytest

import shoal.isolate as si
from shoal import tasklets as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iso_app  # noqa: E402  (the application both sides import)


@pytest.fixture(autouse=True)
def no_tasklet_left():
    yield
    T.run(timeout=10)


@pytest.fixture
def node(tmp_path):
    p = tmp_path / "slowmod.py"
    p.write_text(textwrap.dedent("""
        import time
        def slow(s, tag):
            time.sleep(s)
            return tag
    """))
    with si.ExtensionManager(iso_app.Node) as m:
        n = m.load_extension(si.ExtensionConfig(name="slow", module_path=str(p),
                                                call_timeout=20))
        iso_app.Counter().ext = n
        yield n


def ticking():
    ticks, stop = [], []

    def ticker():
        while not stop:
            ticks.append(1)
            T.sleep(0.001)

    T.tasklet(ticker)()
    return ticks, stop


def test_an_extension_call_in_a_tasklet_lets_the_others_run(node):
    ticks, stop = ticking()
    out = []

    def caller():
        for i in range(3):
            out.append(node.run("slow", 0.1, i))
        stop.append(1)

    T.tasklet(caller)()
    t0 = time.monotonic()
    T.run(timeout=30)
    assert out == [0, 1, 2]
    assert time.monotonic() - t0 >= 0.3
    assert len(ticks) >= 100  # ~1 ms each, while the calls waited


def test_tasklets_take_turns_at_one_extension(node):
    out = []

    def caller(tag):
        out.append(node.run("slow", 0.02, tag))

    for i in range(10):
        T.tasklet(caller)(i)
    T.run(timeout=30)
    assert sorted(out) == list(range(10))


def test_a_host_service_runs_in_the_calling_tasklet_nested_calls_too(node):
    ticks, stop = ticking()
    got = {}

    def caller(k):
        me = T.getcurrent()
        # host -> ext -> host service -> ext -> ... (Counter.down, nested calls)
        got[k] = (node.down(4), T.getcurrent() is me)

    for k in range(3):
        T.tasklet(caller)(k)

    def stopper():
        while len(got) < 3:
            T.sleep(0.005)
        stop.append(1)

    T.tasklet(stopper)()
    T.run(timeout=30)
    want = ["ext0", "host1", "ext2", "host3", "ext4"]  # 4 levels of nested calls
    assert got == {k: (want, True) for k in range(3)}
    assert len(ticks) > 0


def test_descriptors_freed_by_a_closed_extension_wait_again():
    """An extension's calls and the host services it calls back, made from tasklets, have
    its descriptors waited on in the thread's poller; once it is closed, the numbers they
    had go to new descriptors, and a tasklet waiting on one of those must wake. A poller
    that still held the old ones took the new for registered and never woke: the two
    cases of this file above, then test_tasklets_io's first fd wait, hung. Run as that
    sequence, in a fresh interpreter (its descriptor numbers as they were then)."""
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    ext = os.path.join(here, "test_tasklet_ext.py")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         ext + "::test_tasklets_take_turns_at_one_extension",
         ext + "::test_a_host_service_runs_in_the_calling_tasklet_nested_calls_too",
         os.path.join(here, "test_tasklets_io.py") +
         "::test_wait_readable_suspends_only_the_tasklet"],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
