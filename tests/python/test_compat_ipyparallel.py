"""shoal.compat.ipyparallel: a user's program written against ipyparallel (ipp_program.py)
runs with only its import lines changed and gives ipyparallel's answers, checked against
the answers themselves and, where ipyparallel is installed and its cluster starts, against
ipyparallel running the same program; then each part of the drop-in on its own."""
import difflib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import shoal.compat.ipyparallel as ipp
import shoal.tasks as st
from shoal.compat.ipyparallel.error import CompositeError, RemoteError

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "ipp_program.py")
IMPORTS = {
    "import ipyparallel as ipp": "import shoal.compat.ipyparallel as ipp",
    "from ipyparallel.error import RemoteError":
        "from shoal.compat.ipyparallel.error import RemoteError",
}

# What ipyparallel's documentation says the program gives (and ipyparallel 7.1 gave)
EXPECTED = {
    "ids": [0, 1], "targets": [0, 1], "block by default": False, "push is async": True,
    "push": [None, None], "pull": [3, 3], "pull names": [[3, "xy"], [3, "xy"]],
    "view[name]": [[1, 2], [1, 2]], "scattered": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]],
    "gather": list(range(10)), "gather after execute": list(range(0, 20, 2)),
    "apply": [8, 8], "apply on one engine": 17, "map": [x * x for x in range(7)],
    "map_sync of a lambda": [3, 4, 5, 6, 7], "targets keyword": [3],
    "targets keyword int": 3, "direct_view": [9], "slice": [1],
    "apply_async": [[16, 16], True, True, 2, 2], "apply without block": [True, [25, 25]],
    "remote error": ["ZeroDivisionError", "integer division or modulo by zero", True],
    "composite": [True, ["ZeroDivisionError", "ZeroDivisionError"]],
    "composite's first": "ZeroDivisionError",
    "execute error": ["ZeroDivisionError", "ZeroDivisionError"],
    "ready at once": False, "get timeout": "TimeoutError",
    "after wait_interactive": [True, True, None, True, 1], "wait": True,
    "lb block": False, "lb map_sync": [x * x for x in range(10)],
    "lb map_async": [x * x for x in range(5)], "lb apply_sync": 5,
    "lb error": ["ZeroDivisionError", False], "lb apply blocking": 36, "client wait": True,
}


def run_program(path, tmp_path, timeout=300):
    """Runs a program as a script (its functions are __main__'s, as a user's are) in a
    session of its own, all of which is ended if it overruns: (returncode, stdout,
    stderr)."""
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"))  # no profile of root's
    # the shoal package under test, wherever the program runs from
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(st.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    p = subprocess.Popen([sys.executable, path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path),
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError("%s ran past %d s:\n%s" % (path, timeout, err[-3000:]))
    return p.returncode, out, err


def answers(out):
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def shoal_answers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shoal-run")
    with open(PROGRAM) as f:
        text = f.read()
    changed = text
    for old, new in IMPORTS.items():
        assert changed.count(old + "\n") == 1, old
        changed = changed.replace(old + "\n", new + "\n")
    diff = [line for line in difflib.unified_diff(text.splitlines(), changed.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert sorted(diff) == sorted(["-" + k for k in IMPORTS] + ["+" + v for v in
                                                                 IMPORTS.values()])
    path = tmp / "program.py"
    path.write_text(changed)
    code, out, err = run_program(str(path), tmp)
    assert code == 0, err[-3000:]
    return answers(out), out


def test_the_program_with_shoal_gives_ipyparallels_answers(shoal_answers):
    got, out = shoal_answers
    assert got == EXPECTED
    assert "1/1 tasks" in out  # wait_interactive's bar, on stdout as ipyparallel's


def test_ipyparallel_gives_the_same_answers_to_the_same_program(shoal_answers, tmp_path):
    probe = subprocess.run([sys.executable, "-c", "import ipyparallel"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.skip("ipyparallel is not installed, so the program was not run against it "
                    "(Debian: python3-ipyparallel, which scripts/deps.sh installs): "
                    + probe.stderr.strip().splitlines()[-1])
    code, out, err = run_program(PROGRAM, tmp_path)
    if code != 0:
        frames = [line for line in err.splitlines() if PROGRAM in line]
        if frames and frames[-1].strip().endswith("line %d, in <module>" % cluster_line()):
            pytest.skip("ipyparallel's cluster did not start here: "
                        + err.strip().splitlines()[-1])
        raise AssertionError("the program failed against ipyparallel:\n" + err[-3000:])
    assert answers(out) == shoal_answers[0]


def cluster_line():
    with open(PROGRAM) as f:
        for i, line in enumerate(f, 1):
            if line.startswith("with ipp.Cluster("):
                return i
    raise AssertionError("the program starts no Cluster")


# ---- the drop-in's parts on their own ----------------------------------------------------

@pytest.fixture(scope="module")
def rc():
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = HERE + (os.pathsep + path if path else "")  # for engines
    try:
        with ipp.Cluster(n=2) as client:
            yield client
    finally:
        os.environ["PYTHONPATH"] = path


def test_with_cluster_gives_a_client_and_stops_everything():
    cluster = ipp.Cluster(n=1)
    with cluster as client:
        assert isinstance(client, ipp.Client) and isinstance(client, st.Client)
        assert client[:].apply_sync(os.getpid) == [cluster.engines[0].pid]
        pids = [p.pid for p in cluster.engines]
    assert cluster.controller is None and not cluster.engines
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped by the cluster's stop


def test_client_by_cluster_id_and_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # clusters of this test's only
    name = "ipp-test-%d" % os.getpid()
    with pytest.raises(FileNotFoundError, match="no running cluster named 'default'"):
        ipp.Client()
    cluster = ipp.Cluster(n=1, cluster_id=name)
    with cluster:
        with ipp.Client(cluster_id=name) as c:
            assert c.url == cluster.url and c[:].apply_sync(abs, -2) == [2]
    with pytest.raises(FileNotFoundError, match=name):
        ipp.Client(cluster_id=name)


def interactive(source, name):
    ns = {"__name__": "__main__"}
    exec(compile(source, "<interactive>", "exec"), ns)
    return ns[name]


def uses_np(k):
    return numpy.float64(k).item() * 2  # noqa: F821 (numpy: the engine's namespace's)


def test_interactive_require_and_sync_imports(rc, capsys):
    dv = rc.direct_view(block=True)
    dv.clear()
    f = ipp.interactive(uses_np)
    assert f.__module__ == "__main__"
    with pytest.raises(CompositeError) as e:
        dv.apply(f, 2)  # nothing named numpy there yet
    assert [x[0] for x in e.value.elist] == ["NameError", "NameError"]
    with dv.sync_imports():  # as ipyparallel's: "import numpy as np" defines numpy there
        import numpy  # noqa: F401
    assert "importing numpy on engine(s)" in capsys.readouterr().out
    assert dv.apply(f, 2) == [4.0, 4.0]
    dv.clear()
    g = ipp.require("math", helper=5)(interactive(
        "def g(x):\n    return math.floor(x) + helper\n", "g"))
    assert dv.apply(g, 2.5) == [7, 7]
    assert rc.load_balanced_view().apply_sync(g, 1.5) == 6
    assert dv["helper"] == [5, 5]  # require defines its objects in the namespace
    with pytest.raises(NotImplementedError, match="local=True"):
        with dv.sync_imports(local=False):
            from json import dumps  # noqa: F401
    with dv.sync_imports(local=False, quiet=True):
        import colorsys  # noqa: F401  (imported there, a stand-in here)
    assert dv.apply(interactive("def h():\n    return colorsys.rgb_to_hsv(0, 0, 0)\n",
                                "h")) == [(0.0, 0.0, 0.0)] * 2


def test_errors_are_both_remote_and_their_own_class(rc):
    boom = interactive("def boom(d):\n    return d['missing']\n", "boom")
    with pytest.raises(KeyError) as e:
        rc[rc.ids[0]].apply_sync(boom, {})
    assert isinstance(e.value, RemoteError) and isinstance(e.value, ipp.RemoteError)
    assert e.value.ename == "KeyError" and e.value.engine_info["engine_id"] == rc.ids[0]
    with pytest.raises(ipp.error.CompositeError) as c:
        rc[:].apply_sync(boom, {})
    with pytest.raises(KeyError):
        c.value.raise_exception(1)
    with pytest.raises(IndexError):
        c.value.raise_exception(2)
    ar = rc[:].apply_async(time.sleep, 1)
    with pytest.raises(ipp.error.TimeoutError):
        ar.get(0.01)
    assert ar.get(30) == [None, None]


def test_what_is_not_covered_says_what_to_use(rc):
    dv, lv = rc[:], rc.load_balanced_view()
    for call, use in [
            (lambda: rc.queue_status(), "shoal.tasks.Client.stat"),
            (lambda: rc.shutdown(), "Cluster.stop"),
            (lambda: dv.imap, "LoadBalancedView.map"),
            (lambda: dv.execute("x = 1", silent=False), "execute()"),
            (lambda: dv.scatter("x", [1], dist="r"), "dist='b'"),
            (lambda: dv.map(abs, [1], return_exceptions=True), "CompositeError.errors"),
            (lambda: lv.set_flags(targets=[0]), "DirectView"),
            (lambda: rc.load_balanced_view(targets=[0]), "DirectView"),
            (lambda: ipp.Client(profile="default"), "Client(cluster_id=NAME)"),
            (lambda: ipp.Client("ipcontroller-client.json"), "Client(url)"),
            (lambda: ipp.Cluster(n=1, engines="mpi"), "launcher="),
            (lambda: ipp.Cluster(n=1, profile="x"), "shoal.tasks.Cluster"),
            (lambda: ipp.Cluster(n=1).start_and_connect(), "_sync"),
            (lambda: ipp.depend(abs), "set_flags(after="),
            (lambda: rc.wait_for_engines(), "wait_for_engines(n)")]:
        with pytest.raises(NotImplementedError) as e:
            call()
        assert use in str(e.value), (use, str(e.value))
    with pytest.raises(AttributeError):
        rc.no_such_call_in_ipyparallel
    with pytest.raises(AttributeError):
        dv.no_such_call_in_ipyparallel


def test_load_balanced_view_blocks_as_asked(rc):
    lv = rc.load_balanced_view()
    ar = lv.apply(abs, -3)
    assert isinstance(ar, ipp.AsyncResult) and ar.get(30) == 3
    lv.set_flags(block=True, retries=1)
    assert lv.block is True and lv.apply(abs, -4) == 4
    assert lv.map(abs, [-1, -2], chunksize=2) == [1, 2]
    assert isinstance(lv.map(abs, [-1], block=False), ipp.AsyncMapResult)
    assert rc.wait([lv.apply_async(time.sleep, 0)], timeout=30) is True
