"""Fixtures of the Python tests: a shoald process of this build, and stopping one."""
import os
import signal
import subprocess
import time

import pytest

BINDIR = os.environ.get("SHOAL_TEST_BINDIR", "build/release")
NOBODY = 65534


def as_nobody():
    """preexec_fn of a process that runs as uid/gid 65534 with no groups."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


@pytest.fixture(scope="session")
def nobody_can_run(tmp_path_factory):
    """A function: a program of this build -> a path uid 65534 can execute. The
    program itself where that uid reaches it, else (a build under a 0700 directory,
    as a clone into root's home is) a link to it, or a copy on another file system,
    in a 0755 directory made for this session and removed after it. The file stays
    root's: the other uid runs the same program with nothing of root's."""
    import shutil
    import tempfile
    made = []

    def reachable(path):
        r = subprocess.run(["/usr/bin/test", "-x", path], preexec_fn=as_nobody)
        if r.returncode == 0:
            return path
        if not made:
            d = tempfile.mkdtemp(prefix="shoal-test-bin-")
            os.chmod(d, 0o755)
            made.append(d)
        to = os.path.join(made[0], os.path.basename(path))
        if not os.path.exists(to):
            try:
                os.link(path, to)
            except OSError:
                shutil.copy2(path, to)
        return to

    yield reachable
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


def start_shoald(args, seconds=60, **popen):
    """shoald of this build with args: its Popen once it serves. It says so on a pipe
    (--ready-fd), which this waits on, not on connects; an end before that fails."""
    import select
    r, w = os.pipe()
    p = subprocess.Popen([os.path.join(BINDIR, "tools", "shoald"), *args,
                          "--ready-fd", str(w)], pass_fds=(w,), **popen)
    os.close(w)
    try:
        said = b""
        deadline = time.monotonic() + seconds
        while b"\n" not in said:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                p.kill()
                raise AssertionError("shoald did not serve within %s s" % seconds)
            more = os.read(r, 512)
            if not more:
                raise AssertionError("shoald exited at start (%s)" % p.wait(10))
            said += more
        assert said.startswith(b"ready "), said
        return p
    finally:
        os.close(r)


@pytest.fixture
def shoald_proc(tmp_path):
    """A shoald process of this build (its Popen, with .sock)."""
    sock = str(tmp_path / "shoald.sock")
    p = start_shoald(["--socket", sock, "--size", "1G"], stderr=subprocess.PIPE)
    p.sock = sock
    yield p
    p.send_signal(signal.SIGCONT)
    p.send_signal(signal.SIGTERM)
    p.wait(10)


@pytest.fixture
def shoald(shoald_proc):
    """A shoald process of this build; yields its socket."""
    yield shoald_proc.sock


def start_peer_store(tmp_path, name, secret, *extra):
    """A shoald serving other stores on a loopback port: its Popen, with .sock and
    .peer (HOST:PORT, read from what it says at start)."""
    sock = str(tmp_path / (name + ".sock"))
    log = open(tmp_path / (name + ".log"), "w+")
    env = dict(os.environ, SHOAL_SECRET=secret)
    env.pop("SHOAL_SECRET_FILE", None)
    try:
        p = start_shoald(["--socket", sock, "--size", "512M", "--peer", "127.0.0.1:0",
                          *extra], stderr=log, env=env)
    except AssertionError as e:
        log.seek(0)
        raise AssertionError("%s:\n%s" % (e, log.read())) from None
    p.sock = sock
    p.secret = secret
    # it says where its peers connect before it says it serves
    log.seek(0)
    text = log.read()
    assert "peers on " in text, text
    p.peer = text.split("peers on ", 1)[1].split()[0].rstrip(",")
    return p


@pytest.fixture
def two_stores(tmp_path):
    """Two shoalds that know the same secret, as on two hosts: (a, b)."""
    secret = "python-cluster-test-secret-0123"
    a = start_peer_store(tmp_path, "a", secret)
    b = start_peer_store(tmp_path, "b", secret)
    yield a, b
    for p in (a, b):
        p.send_signal(signal.SIGCONT)
        p.send_signal(signal.SIGTERM)
        p.wait(10)


def stop(proc):
    """SIGSTOP, and wait until the kernel has stopped it (the signal is asynchronous)."""
    proc.send_signal(signal.SIGSTOP)
    for _ in range(1000):
        with open("/proc/%d/status" % proc.pid) as f:
            if "\nState:\tT" in f.read():
                return
        time.sleep(0.005)
    raise AssertionError("shoald did not stop")


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


@pytest.fixture
def etcd_stores(tmp_path):
    """A real etcd on loopback ports and two shoalds that register with it (one
    cluster, one secret), as on two hosts: (a, b)."""
    import urllib.request
    if not os.path.exists("/usr/bin/etcd"):
        pytest.skip("etcd is not installed (Debian's etcd-server; make test installs it)")
    cport, pport = free_port(), free_port()
    client, peer = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    etcd = subprocess.Popen(["/usr/bin/etcd", "--data-dir", str(tmp_path / "etcd"),
                             "--listen-client-urls", client, "--advertise-client-urls", client,
                             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                             "--initial-cluster", "default=" + peer],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stores = []
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(client + "/health", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.05)
        secret = "python-etcd-test-secret-0123456789"
        meta = ("--meta", "etcd://127.0.0.1:%d" % cport, "--cluster", "pytest")
        stores = [start_peer_store(tmp_path, n, secret, *meta) for n in ("a", "b")]
        yield tuple(stores)
    finally:
        for p in stores:
            p.send_signal(signal.SIGTERM)
            p.wait(10)
        etcd.kill()
        etcd.wait()
