"""Fixtures of the Python tests: a shoald process of this build, and stopping one."""
import os
import signal
import subprocess
import time

import pytest

BINDIR = os.environ.get("SHOAL_TEST_BINDIR", "build/release")


@pytest.fixture
def shoald_proc(tmp_path):
    """A shoald process of this build (its Popen, with .sock)."""
    sock = str(tmp_path / "shoald.sock")
    p = subprocess.Popen([os.path.join(BINDIR, "tools", "shoald"), "--socket", sock,
                          "--size", "1G"], stderr=subprocess.PIPE)
    p.sock = sock
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    yield p
    p.send_signal(signal.SIGCONT)
    p.send_signal(signal.SIGTERM)
    p.wait(10)


@pytest.fixture
def shoald(shoald_proc):
    """A shoald process of this build; yields its socket."""
    yield shoald_proc.sock


def stop(proc):
    """SIGSTOP, and wait until the kernel has stopped it (the signal is asynchronous)."""
    proc.send_signal(signal.SIGSTOP)
    for _ in range(1000):
        with open("/proc/%d/status" % proc.pid) as f:
            if "\nState:\tT" in f.read():
                return
        time.sleep(0.005)
    raise AssertionError("shoald did not stop")
