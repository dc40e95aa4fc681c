"""shoal cluster start|status|add|stop through each launcher, with real launchers on this
machine: local processes, Debian's Open MPI (mpiexec), an sshd on a loopback port with
generated keys (scripts/testhosts/sshd.sh), and an offline single-node Slurm started here
(scripts/testhosts/slurm.sh). Every test ends with no process of its cluster left."""
import itertools
import operator
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from shoal import NotFound, _shoal, tasks

import task_app  # tests/python: engines import it by name
from conftest import as_nobody

BINDIR = os.environ.get("SHOAL_TEST_BINDIR", "build/release")
SRCDIR = os.environ.get("SHOAL_SRCDIR", ".")
SHOAL = os.path.join(BINDIR, "tools", "shoal")
_count = itertools.count()

needs_mpi = pytest.mark.skipif(not shutil.which("mpiexec"), reason="needs openmpi-bin")
needs_ssh = pytest.mark.skipif(not (shutil.which("ssh") and os.path.exists("/usr/sbin/sshd")),
                               reason="needs openssh-client and openssh-server")
needs_slurm = pytest.mark.skipif(not (shutil.which("slurmctld") and shutil.which("sbatch")),
                                 reason="needs slurmctld, slurmd and slurm-client")


HERE = os.path.dirname(os.path.abspath(__file__))


def env(**extra):
    """The CLI's: engines find tests/python/task_app.py; no secret of the caller's."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_SECRET")}
    e["PYTHONPATH"] = HERE + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(extra)
    return e


def host_env():
    """For the test hosts' own daemons: not the sanitizer's preload of an ASan run."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}


def shoal(*args, check=True, timeout=120, **extra):
    r = subprocess.run([SHOAL, "cluster", *args], env=env(**extra), capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and r.returncode:
        raise AssertionError("shoal cluster %s exited %d:\n%s%s"
                             % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def processes_of(name):
    """Processes whose command line names the cluster (its supervisor, its engines,
    mpiexec and the shells of ssh and Slurm that run them)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if re.search(r"cluster-%s[/-]|--name '?%s(\.|\s|$)" % (re.escape(name), re.escape(name)),
                     cmd):
            found.append((int(pid), cmd[:200]))
    return found


def assert_none_left(name, within=10.0):
    deadline = time.monotonic() + within
    while processes_of(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(name) == []


def controller_of(out):
    for line in out.splitlines():
        if line.startswith("controller: "):
            return line[len("controller: "):].split(" and ")[0]
    raise AssertionError("no controller in:\n" + out)


def run_tasks(url, n=20):
    with tasks.Client(url) as c:
        v = c.load_balanced_view()
        assert v.map_sync(operator.neg, range(n)) == [-i for i in range(n)]


@pytest.fixture
def name():
    n = "t%d-%d" % (os.getpid(), next(_count))
    yield n
    shoal("stop", "--name", n, check=False)
    assert_none_left(n)


# ---- local -----------------------------------------------------------------------------

def test_local_start_status_tasks_stop(name):
    r = shoal("start", "-n", "3", "--name", name)
    assert "3 engines in" in r.stdout
    url = controller_of(r.stdout)
    st = shoal("status", "--name", name).stdout
    assert "engines: 3 registered, 3 asked for" in st
    assert "engines %s.0.0..2 (forked from one python3): running (pid " % name in st
    run_tasks(url)
    # the supervisor, the python3 the engines were forked from, and the 3 engines
    assert len(processes_of(name)) == 5
    r = shoal("stop", "--name", name)
    assert "stopped" in r.stdout
    assert_none_left(name)
    assert shoal("status", "--name", name, check=False).returncode == 3


def test_c_engines_and_add(name):
    so = os.path.join(BINDIR, "examples", "farm_funcs.so")
    url = controller_of(shoal("start", "-n", "2", "--so", so, "--name", name).stdout)
    assert "added 2 engines" in shoal("add", "-n", "2", "--name", name).stdout
    assert "engines: 4 registered, 4 asked for" in shoal("status", "--name", name).stdout
    assert url.endswith("controller.sock")


def test_engines_that_never_come_are_named_with_what_they_said(name, tmp_path):
    bad = tmp_path / "python3"
    bad.write_text("#!/bin/sh\necho 'no module named shoal.engine here' >&2\nexit 3\n")
    bad.chmod(0o755)
    r = shoal("start", "-n", "2", "--name", name, "--python", str(bad), "--timeout", "20",
              check=False)
    assert r.returncode == 1
    assert "0 of 2 engines registered when a launcher failed" in r.stderr
    assert "exited 3" in r.stderr and "no module named shoal.engine here" in r.stderr
    assert "engines %s.0.0..1 (forked from one python3): exited 3" % name in r.stderr
    assert_none_left(name)


def test_local_store_takes_arrays_by_reference(name):
    np = pytest.importorskip("numpy")
    r = shoal("start", "-n", "2", "--stores", "--store-size", "256M", "--name", name)
    url = controller_of(r.stdout)
    store = [l.split(": ", 1)[1] for l in r.stdout.splitlines() if l.startswith("store: ")][0]
    assert "store: %s (pid " % store in shoal("status", "--name", name).stdout
    with tasks.Client(url, store=store) as c:
        a = np.arange(1 << 18, dtype=np.float64)
        # the engine's argument is a read-only view of the store's copy
        assert c.load_balanced_view().apply_sync(task_app.view_info, a)[0] is False
        assert c.load_balanced_view().apply_sync(np.sum, a) == a.sum()
    shoal("stop", "--name", name)
    assert_none_left(name)


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


@pytest.mark.skipif(not os.path.exists("/usr/bin/etcd"), reason="needs etcd-server")
def test_stores_register_with_the_registry(name, tmp_path):
    import base64
    import json
    import urllib.request
    cport, pport = free_port(), free_port()
    client, peer = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    etcd = subprocess.Popen(["/usr/bin/etcd", "--data-dir", str(tmp_path / "etcd"),
                             "--listen-client-urls", client, "--advertise-client-urls", client,
                             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                             "--initial-cluster", "default=" + peer],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=host_env())

    def peers():
        key = "/shoal/%s/peers/" % name
        body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                           "range_end": base64.b64encode(key[:-1].encode() + b"0").decode()})
        req = urllib.request.Request(client + "/v3/kv/range", body.encode())
        return json.load(urllib.request.urlopen(req, timeout=5)).get("kvs", [])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                peers()
                break
            except OSError:
                assert time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.05)
        shoal("start", "-n", "1", "--stores", "--store-size", "128M", "--name", name,
              "--store-args", "--meta etcd://127.0.0.1:%d --cluster %s --peer 127.0.0.1:0"
              % (cport, name), SHOAL_SECRET="a cluster secret of 32 bytes, or so")
        assert len(peers()) == 1  # the store's lease, under the cluster's name
        shoal("stop", "--name", name)
        deadline = time.monotonic() + 10
        while peers():  # gone with its store, which let its lease go
            assert time.monotonic() < deadline, "the store's registration outlived it"
            time.sleep(0.1)
    finally:
        etcd.kill()
        etcd.wait()


def test_a_second_cluster_of_the_same_name_is_refused(name):
    shoal("start", "-n", "1", "--name", name)
    r = shoal("start", "-n", "1", "--name", name, check=False)
    assert r.returncode == 1 and "is running" in r.stderr


def test_bad_arguments():
    for args, what in ((["start"], "-n N is required"),
                       (["start", "-n", "0"], "expected 1 to"),
                       (["start", "-n", "1", "--launcher", "pbs"], "expected local, mpi"),
                       (["start", "-n", "1", "--launcher", "ssh"], "needs --hosts"),
                       (["start", "-n", "1", "--name", "../x"], "--name"),
                       (["launch"], "unknown subcommand")):
        r = shoal(*args, check=False)
        assert r.returncode == 2, (args, r.stderr)
        assert what in r.stderr, (args, r.stderr)
    assert shoal("status", "--name", "never-started", check=False).returncode == 3


def test_python_cluster_with_a_launcher():
    c = tasks.Cluster(2, launcher="local", name="py-%d" % os.getpid())
    with c:
        run_tasks(c.url)
        assert len(processes_of(c.name)) == 4
        c.add_engines(1)
        assert "engines: 3 registered" in shoal("status", "--name", c.name).stdout
        st = c.status()
        assert (st["engines"], st["asked"], st["controller"]) == (3, 3, c.url)
        assert os.path.exists("/proc/%d" % st["supervisor_pid"])
        # the supervisor is no child of this process: nothing is left to reap
        with pytest.raises(ChildProcessError):
            os.waitpid(st["supervisor_pid"], os.WNOHANG)
        # a second cluster of the same name is refused, saying so
        with pytest.raises(tasks.EngineError, match="is running"):
            tasks.Cluster(1, launcher="local", name=c.name).start()
    assert_none_left(c.name)
    with pytest.raises(NotFound):
        _shoal.cluster_status(name=c.name)
    # a cluster stopped from outside stops again quietly
    c = tasks.Cluster(1, launcher="local", name="py2-%d" % os.getpid())
    with c:
        shoal("stop", "--name", c.name)
    assert_none_left(c.name)


@needs_mpi
def test_python_cluster_through_mpi():
    c = tasks.Cluster(2, launcher="mpi", name="pympi-%d" % os.getpid())
    with c:
        run_tasks(c.url)
    assert_none_left(c.name)


# ---- mpi -------------------------------------------------------------------------------

@needs_mpi
def test_mpi(name):
    url = controller_of(shoal("start", "-n", "2", "--launcher", "mpi", "--name",
                              name).stdout)
    st = shoal("status", "--name", name).stdout
    assert "mpiexec -n 2: running" in st and "engines: 2 registered" in st
    run_tasks(url)
    shoal("stop", "--name", name)
    assert_none_left(name)


@needs_mpi
def test_mpi_over_tcp_keeps_the_secret_off_command_lines(name):
    r = shoal("start", "-n", "2", "--launcher", "mpi", "--tcp", "127.0.0.1:0", "--name", name)
    secret_file = [l.split(": ", 1)[1] for l in r.stdout.splitlines()
                   if l.startswith("secret: ")][0]
    assert os.stat(secret_file).st_mode & 0o777 == 0o600
    secret = open(secret_file).read().strip()
    assert len(secret) == 64
    assert all(secret not in cmd for _, cmd in processes_of(name))
    assert "--connect" in " ".join(cmd for _, cmd in processes_of(name))


@needs_mpi
def test_mpi_with_a_store_on_each_node(name):
    r = shoal("start", "-n", "2", "--launcher", "mpi", "--stores", "--name", name)
    st = shoal("status", "--name", name).stdout
    assert "mpiexec: a store on each node: running" in st, st
    run_tasks(controller_of(r.stdout))
    shoal("stop", "--name", name)
    assert_none_left(name)


@needs_mpi
def test_mpi_failure_says_what_mpiexec_said(name, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("no-such-host.invalid slots=2\n")
    r = shoal("start", "-n", "2", "--launcher", "mpi", "--hosts", str(hosts), "--name", name,
              "--timeout", "30", check=False)
    assert r.returncode == 1
    assert "mpiexec -n 2: exited" in r.stderr, r.stderr


# ---- ssh -------------------------------------------------------------------------------

def start_test_host(tmp_path_factory, kind):
    """A private test host of scripts/testhosts (sshd.sh or slurm.sh), started for the
    module: its variable's value (SSH_CONFIG, SLURM_CONF); stopped after."""
    d = tmp_path_factory.mktemp(kind)
    script = os.path.join(SRCDIR, "scripts", "testhosts", kind + ".sh")
    out = subprocess.run([script, "start", str(d)], env=host_env(), capture_output=True,
                         text=True, timeout=60)
    if out.returncode:
        pytest.fail("%s.sh start: %s" % (kind, out.stderr))
    yield out.stdout.strip().split("=", 1)[1]
    subprocess.run([script, "stop", str(d)], env=host_env(), timeout=60)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    yield from start_test_host(tmp_path_factory, "sshd")


@needs_ssh
def test_ssh(name, sshd, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# two hosts\nnode1 2\nnode2\n")
    r = shoal("start", "-n", "3", "--launcher", "ssh", "--hosts", str(hosts),
              "--tcp", "127.0.0.1:0", "--ssh", "ssh -F " + sshd, "--name", name)
    url = controller_of(r.stdout)
    st = shoal("status", "--name", name).stdout
    assert "ssh node1 (2 engines): running" in st and "ssh node2 (1 engine): running" in st
    run_tasks(url)
    secret = open([l.split(": ", 1)[1] for l in r.stdout.splitlines()
                   if l.startswith("secret: ")][0]).read().strip()
    mine = processes_of(name)
    assert len([c for _, c in mine if "shoal.engine" in c and "sh -c" not in c]) == 3
    assert all(secret not in cmd for _, cmd in mine)
    shoal("stop", "--name", name)
    assert_none_left(name)


@needs_ssh
def test_ssh_with_a_store_on_each_host(name, sshd, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1\nnode2\n")
    r = shoal("start", "-n", "2", "--launcher", "ssh", "--hosts", str(hosts), "--stores",
              "--tcp", "127.0.0.1:0", "--ssh", "ssh -F " + sshd, "--name", name)
    dirs = ["/tmp/shoal-%d-cluster-%s-node%d" % (os.geteuid(), name, i) for i in (1, 2)]
    assert all(os.path.exists(d + "/store.sock") for d in dirs)
    stores = [c for _, c in processes_of(name) if "shoald" in c and "sh -c" not in c]
    assert len(stores) == 2, stores
    run_tasks(controller_of(r.stdout))
    shoal("stop", "--name", name)
    assert_none_left(name)
    assert not any(os.path.exists(d) for d in dirs)


@needs_ssh
def test_an_unreachable_host_is_named(name, sshd, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1\nunreachable\n")
    r = shoal("start", "-n", "2", "--launcher", "ssh", "--hosts", str(hosts),
              "--tcp", "127.0.0.1:0", "--ssh", "ssh -F " + sshd, "--name", name,
              "--timeout", "30", check=False)
    assert r.returncode == 1
    assert "ssh unreachable (1 engine): exited 255" in r.stderr, r.stderr
    assert "Connection refused" in r.stderr
    assert_none_left(name)


@needs_ssh
def test_engines_failing_on_a_host_end_its_session_with_their_words(name, sshd, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1 2\n")
    bad = tmp_path / "python3"
    bad.write_text("#!/bin/sh\necho 'this host has no shoal' >&2\nexit 4\n")
    bad.chmod(0o755)
    r = shoal("start", "-n", "2", "--launcher", "ssh", "--hosts", str(hosts),
              "--tcp", "127.0.0.1:0", "--ssh", "ssh -F " + sshd, "--name", name,
              "--python", str(bad), "--timeout", "30", check=False)
    assert r.returncode == 1
    assert "ssh node1 (2 engines): exited 4" in r.stderr, r.stderr
    assert "this host has no shoal" in r.stderr
    assert_none_left(name)


@needs_ssh
@pytest.mark.skipif(os.geteuid() != 0, reason="squats as uid 65534: needs root")
def test_a_store_directory_squatted_by_another_user_is_refused(name, sshd, tmp_path):
    squat = "/tmp/shoal-0-cluster-%s-node1" % name
    subprocess.run(["mkdir", "-m", "777", squat], preexec_fn=as_nobody, check=True)
    try:
        hosts = tmp_path / "hosts"
        hosts.write_text("node1\n")
        r = shoal("start", "-n", "1", "--launcher", "ssh", "--hosts", str(hosts), "--stores",
                  "--tcp", "127.0.0.1:0", "--ssh", "ssh -F " + sshd, "--name", name,
                  "--timeout", "30", check=False)
        assert r.returncode == 1
        assert "is not a directory of ours" in r.stderr and "exited 98" in r.stderr, r.stderr
        assert os.listdir(squat) == []  # no socket of ours in it
    finally:
        os.rmdir(squat)
    assert_none_left(name)


def test_a_host_name_is_never_an_ssh_option(name, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("-oProxyCommand=touch%s/owned\n" % tmp_path)
    r = shoal("start", "-n", "1", "--launcher", "ssh", "--hosts", str(hosts),
              "--tcp", "127.0.0.1:0", "--name", name, check=False)
    assert r.returncode == 1 and "is not a host name" in r.stderr, r.stderr
    assert not (tmp_path / "owned").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="asks as uid 65534: needs root")
def test_another_user_cannot_reach_the_control_socket(name, nobody_can_run):
    url = controller_of(shoal("start", "-n", "1", "--name", name).stdout)
    for what in ("status", "stop"):
        r = subprocess.run([nobody_can_run(SHOAL), "cluster", what, "--name", name], env=env(),
                           capture_output=True, text=True, preexec_fn=as_nobody, timeout=60)
        assert r.returncode != 0, r.stdout
    # the cluster is untouched, and still its own
    assert "engines: 1 registered" in shoal("status", "--name", name).stdout
    ctl = os.path.join(os.path.dirname(url), "control.sock")
    assert os.stat(ctl).st_mode & 0o777 == 0o600  # as every socket of shoal's
    assert os.stat(os.path.dirname(ctl)).st_mode & 0o777 == 0o700
    r = subprocess.run(["/usr/bin/python3", "-c", "import socket,sys; s=socket.socket("
                        "socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(sys.argv[1])", ctl],
                       capture_output=True, text=True, preexec_fn=as_nobody, timeout=60)
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr


@needs_ssh
def test_ssh_needs_tcp(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1\n")
    r = shoal("start", "-n", "1", "--launcher", "ssh", "--hosts", str(hosts), check=False)
    assert r.returncode == 2 and "--tcp" in r.stderr


# ---- slurm -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from start_test_host(tmp_path_factory, "slurm")


def job_state(conf, job):
    out = subprocess.run(["scontrol", "-o", "show", "job", job], env=dict(host_env(),
                         SLURM_CONF=conf), capture_output=True, text=True).stdout
    return out.split("JobState=", 1)[1].split()[0] if "JobState=" in out else "?"


@needs_slurm
def test_slurm_job_cancelled_mid_flood_tasks_retried_then_stop(name, slurm):
    r = shoal("start", "-n", "2", "--launcher", "slurm", "--name", name, SLURM_CONF=slurm)
    url = controller_of(r.stdout)
    st = shoal("status", "--name", name, SLURM_CONF=slurm).stdout
    job = st.split("slurm job ", 1)[1].split()[0]
    assert "slurm job %s (2 tasks): RUNNING" % job in st
    with tasks.Client(url) as c:
        v = c.load_balanced_view()
        v.set_flags(retries=3)
        ars = [v.apply_async(task_app.add, i) for i in range(200)]
        naps = [v.apply_async(task_app.nap, 0.05) for _ in range(100)]
        while sum(a.done() for a in naps) < 10:
            time.sleep(0.01)
        subprocess.run(["scancel", job], env=dict(host_env(), SLURM_CONF=slurm), check=True)
        deadline = time.monotonic() + 20
        while "CANCELLED" not in shoal("status", "--name", name, SLURM_CONF=slurm).stdout:
            assert time.monotonic() < deadline, "the cancel was not reported"
            time.sleep(0.2)
        st = shoal("status", "--name", name, SLURM_CONF=slurm).stdout
        assert "slurm job %s (2 tasks): CANCELLED" % job in st
        # new engines take the tasks the cancelled ones held
        shoal("add", "-n", "2", "--launcher", "slurm", "--name", name, SLURM_CONF=slurm)
        assert [a.get(60) for a in ars] == list(range(200))
        for a in naps:
            a.get(60)
    st = shoal("status", "--name", name, SLURM_CONF=slurm).stdout
    retried = int(st.split(" retried")[0].rsplit(" ", 1)[1])
    assert retried >= 1, st
    job2 = st.split("slurm job ")[2].split()[0]
    shoal("stop", "--name", name, SLURM_CONF=slurm)
    assert job_state(slurm, job2) in ("CANCELLED", "COMPLETED"), job_state(slurm, job2)
    assert_none_left(name)


@needs_slurm
def test_slurm_with_a_store_on_each_node(name, slurm):
    r = shoal("start", "-n", "2", "--launcher", "slurm", "--stores", "--name", name,
              SLURM_CONF=slurm)
    assert "stores: /tmp/shoal-%d-cluster-%s-NODE/store.sock" % (os.geteuid(), name) in r.stdout
    assert [c for _, c in processes_of(name) if "shoald" in c and "sh -c" not in c]
    run_tasks(controller_of(r.stdout))
    shoal("stop", "--name", name, SLURM_CONF=slurm)
    assert_none_left(name)


@needs_slurm
def test_slurm_refusal_is_sbatchs_own_words(name, slurm):
    r = shoal("start", "-n", "2", "--launcher", "slurm", "--name", name, check=False,
              SLURM_CONF=slurm, SBATCH_PARTITION="no-such-partition")
    assert r.returncode == 1
    assert "sbatch refused the job" in r.stderr and "invalid partition" in r.stderr, r.stderr
    assert_none_left(name)
