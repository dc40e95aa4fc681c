"""shoal.tasks: the task farm from Python against real controllers and real engine
processes (python3 -m shoal.engine), used as ipyparallel's users use theirs."""
import asyncio
import concurrent.futures
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import shoal
import shoal.tasks as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task_app  # noqa: E402  (what the engines import by reference)

np = pytest.importorskip("numpy")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def engines_find_task_app(monkeypatch):
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", HERE + (os.pathsep + path if path else ""))


@pytest.fixture(scope="module")
def cluster():
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = HERE + (os.pathsep + path if path else "")
    try:
        with st.Cluster(n=2) as c:
            yield c
    finally:
        os.environ["PYTHONPATH"] = path


@pytest.fixture
def view(cluster):
    c = cluster.client()
    yield c.load_balanced_view()
    c.close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/status" % pid) as f:
        return "\nState:\tZ" not in f.read()


def test_functions_by_reference_and_by_cloudpickle(view):
    assert view.apply_sync(pow, 2, 10) == 1024
    assert view.apply_sync(task_app.add, 2, b=3) == 5
    k = 7
    assert view.apply_sync(lambda x: x * k, 6) == 42  # a closure: by cloudpickle

    def local(a, *rest, sep="-"):
        return sep.join([a, *rest])
    assert view.apply_sync(local, "a", "b", sep="+") == "a+b"
    ars = [view.apply_async(task_app.add, i, i) for i in range(200)]
    assert [ar.get(10) for ar in ars] == [2 * i for i in range(200)]
    assert all(ar.ready() and ar.successful() and ar.elapsed > 0 for ar in ars)


def test_values_and_arrays_both_ways(view):
    v = {"t": (1, 2.5, None), "s": {3, 4}, "b": b"\x00\xff", "l": [True, "x"]}
    assert view.apply_sync(task_app.add, v["l"], ["y"]) == [True, "x", "y"]
    assert view.apply_sync(lambda x: x, v) == v
    a = np.arange(100_000, dtype=np.float32).reshape(100, 1000)
    r = view.apply_sync(task_app.scale, a, 2)
    assert r.dtype == np.float32 and r.shape == (100, 1000) and np.array_equal(r, a * 2)
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    assert torch.equal(view.apply_sync(task_app.scale, t, 3), t * 3)


def test_arrays_by_reference_through_a_shared_store():
    torch = pytest.importorskip("torch")
    a = np.arange(1 << 20, dtype=np.float64)  # 8 MiB
    with st.Cluster(n=1) as copied:
        v = copied.client().load_balanced_view()
        assert v.apply_sync(task_app.view_info, a) == (True, float(a.sum()))
        assert v.apply_sync(task_app.scale, a, 1).flags.writeable  # a copy of its own
    with st.Cluster(n=1, store=True) as shared:
        v = shared.client().load_balanced_view()
        # the engine maps it read-only from the store, and so does the client its result
        assert v.apply_sync(task_app.view_info, a) == (False, float(a.sum()))
        r = v.apply_sync(task_app.add, a)  # returned as it came: the same store object
        assert not r.flags.writeable and np.array_equal(r, a)
        assert v.apply_sync(task_app.view_info, r) == (False, float(a.sum()))
        t = torch.arange(1 << 18, dtype=torch.float32)
        back = v.apply_sync(task_app.add, t)
        assert isinstance(back, torch.Tensor) and torch.equal(back, t)
        # a task writing into a torch argument that maps the store writes its own copy
        # of the pages: it lives, and the next task of the same object reads the original
        z = torch.zeros(1 << 18)
        assert v.apply_sync(task_app.add_one_in_place, z) == float(z.numel())
        assert v.apply_sync(task_app.total, z) == 0.0
        assert float(z.sum()) == 0.0
        small = v.apply_sync(task_app.scale, np.ones(4), 2)  # made there: comes back too
        assert np.array_equal(small, np.full(4, 2.0))


def test_other_objects_go_by_pickle(view):
    b = view.apply_sync(task_app.unbox, task_app.Box(41))
    assert b == task_app.Box(42)
    # a numpy array inside a pickled object: out of band, and back equal
    arr = np.arange(1 << 16, dtype=np.int64)
    got = view.apply_sync(lambda box: task_app.Box(box.v * 2), task_app.Box(arr))
    assert np.array_equal(got.v, arr * 2)


def test_map_ordered_and_not(view):
    assert view.map_sync(task_app.add, range(10), range(10)) == list(range(0, 20, 2))
    assert view.map(lambda x: x * x, range(50)).get(10) == [x * x for x in range(50)]
    naps = [0.3, 0.0, 0.1, 0.0]
    got = view.map(task_app.nap, naps, ordered=False).get(10)
    assert sorted(got) == sorted(naps) and got != naps  # the long nap comes last
    assert list(view.map(task_app.add, range(7), chunksize=3)) == list(range(7))
    assert view.map_sync(task_app.add, [], []) == []


def test_a_remote_exception_keeps_type_message_and_traceback(view):
    with pytest.raises(ZeroDivisionError) as e:
        view.apply_sync(lambda: 1 // 0)
    assert "remote traceback" in "".join(getattr(e.value, "__notes__", []))
    assert isinstance(e.value, st.RemoteError) and e.value.ename == "ZeroDivisionError"
    with pytest.raises(st.RemoteError) as e:
        view.apply_sync(task_app.custom)
    # its module is imported here: the exception is of its class too
    assert isinstance(e.value, task_app.Custom) and e.value.ename == "Custom"
    assert e.value.type_name == "task_app.Custom"
    assert e.value.message == "made on the engine"
    assert "task_app.py" in e.value.remote_traceback and "in custom" in e.value.remote_traceback
    ar = view.apply_async(task_app.custom)
    assert ar.wait(10) and not ar.successful()


def test_a_cancelled_result_is_dropped_and_the_others_come(view):
    slow = view.apply_async(task_app.nap, 0.3)
    assert slow.cancel() and slow.cancelled()
    rest = [view.apply_async(task_app.add, i, 1) for i in range(50)]
    assert [ar.get(10) for ar in rest] == list(range(1, 51))
    time.sleep(0.5)  # the cancelled one's result came meanwhile, and went
    # the result thread lives on: a future nobody drives comes all the same
    f = view.apply_async(task_app.add, 2, 2)
    done, _ = concurrent.futures.wait([f], timeout=10)
    assert f in done and f.result() == 4 and slow.cancelled()


def test_deadlines(view):
    t0 = time.monotonic()
    with view.temp_flags(timeout=0.2):
        ar = view.apply_async(task_app.nap, 5)
    with pytest.raises(st.TaskTimeout) as e:
        ar.get(10)
    assert isinstance(e.value, TimeoutError) and time.monotonic() - t0 < 4
    assert view.apply_sync(task_app.add, 1, 1) == 2  # the flags were temporary
    with pytest.raises(TimeoutError):
        view.apply_async(task_app.nap, 0.5).get(0.01)


def test_after_and_follow(view):
    first = view.apply_async(task_app.stamp, "first")
    with view.temp_flags(after=[first]):
        second = view.apply_async(task_app.stamp, "second")
    with view.temp_flags(follow=first):
        third = view.apply_async(task_app.stamp, "third")
    f, s, t = first.get(10), second.get(10), third.get(10)
    assert s[1] >= f[1] and t[2] == f[2]  # after: later; follow: the same engine
    failed = view.apply_async(task_app.custom)
    with view.temp_flags(after=failed):
        dep = view.apply_async(task_app.add, 1, 1)
    with pytest.raises(st.DependencyError):
        dep.get(10)


def test_executor_and_asyncio(view):
    ex = view.client.executor()
    assert ex.submit(task_app.add, 1, 2).result(10) == 3
    assert list(ex.map(task_app.add, range(5), range(5))) == [0, 2, 4, 6, 8]
    ex.shutdown()

    async def main():
        return await asyncio.gather(*(view.apply_async(task_app.add, i, 1) for i in range(100)))
    assert asyncio.run(main()) == list(range(1, 101))


def test_retries_after_an_engine_is_killed(tmp_path):
    with st.Cluster(n=2) as c:
        v = c.client().load_balanced_view()
        with v.temp_flags(retries=1):
            assert v.apply_async(task_app.die_once, str(tmp_path / "m1")).get(20) == "survived"
        c.add_engines(1)  # for the engine that died
        v.client.wait_for_engines(2, 20)
        with pytest.raises(st.EngineError):
            v.apply_async(task_app.die_once, str(tmp_path / "m2")).get(20)


def test_cluster_stops_every_process_also_when_the_block_raises():
    with pytest.raises(RuntimeError, match="the block failed"):
        with st.Cluster(n=2) as c:
            pids = [p.pid for p in c.engines]
            assert c.client().load_balanced_view().apply_sync(task_app.pid) in pids
            raise RuntimeError("the block failed")
    assert not any(alive(p) for p in pids)
    assert c.controller is None


def test_a_client_that_exits_with_100000_tasks_queued_leaves_none(cluster):
    code = textwrap.dedent("""
        import os, sys
        import shoal.tasks as st
        import task_app
        v = st.Client(sys.argv[1]).load_balanced_view()
        for _ in range(100000):
            v.apply_async(task_app.nap, 0.01)
        v.client._farm.flush()
        print("queued", flush=True)
        os._exit(0)
        """)
    r = subprocess.run([sys.executable, "-c", code, cluster.url], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "queued" in r.stdout, r.stderr
    with cluster.client() as c:
        for _ in range(400):
            s = c.stat()
            if s["queued"] == 0 and s["running"] == 0:
                break
            time.sleep(0.05)
        assert s["queued"] == 0 and s["running"] == 0, s
        assert c.load_balanced_view().apply_sync(task_app.add, 2, 2) == 4


def test_engines_over_tcp_with_the_right_and_a_wrong_secret(monkeypatch):
    secret = "a test secret of the cluster, 32+ bytes long"
    monkeypatch.setenv("SHOAL_SECRET", secret)
    ctl = shoal._shoal.Controller(tcp="127.0.0.1:0")
    procs = []
    try:
        url = "tcp://" + ctl.tcp
        procs.append(subprocess.Popen(st.engine_command(url) + ["--die-with-parent"]))
        with st.Client(url) as c:
            c.wait_for_engines(1, 20)
            assert c.load_balanced_view().apply_sync(task_app.add, 20, 22) == 42
        env = dict(os.environ, SHOAL_SECRET="not the secret, but as long as one")
        bad = subprocess.run(st.engine_command(url), env=env, capture_output=True, text=True,
                             timeout=30)
        assert bad.returncode == 1 and bad.stderr
        monkeypatch.setenv("SHOAL_SECRET", "not the secret, but as long as one")
        with pytest.raises(shoal.Error):
            st.Client(url)
        assert ctl.stat()["engines"] == 1
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(10)
        ctl.close()


def test_the_stubs_name_every_public_name():
    import ast
    import shoal.isolate as si
    for mod in (st, si):
        with open(mod.__file__[:-3] + ".pyi") as f:
            tree = ast.parse(f.read())
        names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        names |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                  for a in n.names}
        assert set(mod.__all__) <= names, set(mod.__all__) - names
        assert all(getattr(mod, n).__doc__ for n in mod.__all__)


def test_a_client_may_refuse_pickled_results(cluster, tmp_path):
    # A result that is not a plain value goes by pickle, which runs code of the sender's
    # choosing where it is read: here it would create a file. A client made with
    # accept_pickle=False refuses it unread; plain values still come.
    marker = str(tmp_path / "owned-by-a-pickle")
    strict = st.Client(cluster.url, accept_pickle=False)
    try:
        v = strict.load_balanced_view()
        with pytest.raises(st.TaskError, match="accept_pickle=False"):
            v.apply_sync(task_app.trap, marker)
        # nor is a class such an engine names taken, but a builtin: a RemoteError only
        with pytest.raises(st.RemoteError) as e:
            v.apply_sync(task_app.custom)
        assert not isinstance(e.value, task_app.Custom) and e.value.ename == "Custom"
        with pytest.raises(ZeroDivisionError):
            v.apply_sync(pow, 0, -1)  # 0 ** -1
        assert not os.path.exists(marker)
        assert v.apply_sync(task_app.add, 2, 3) == 5
        assert v.apply_sync(task_app.scale, np.arange(4), 2).tolist() == [0, 2, 4, 6]
    finally:
        strict.close()
    # the default takes it (and so runs its code: the price of pickle)
    c = cluster.client()
    try:
        c.load_balanced_view().apply_sync(task_app.trap, marker)
        assert os.path.exists(marker)
    finally:
        c.close()


def interactive(source, name):
    """A function defined as a script's or a notebook's are: in __main__ (its module
    cannot be imported elsewhere, so it goes by value)."""
    ns = {"__name__": "__main__"}
    exec(compile(source, "<interactive>", "exec"), ns)
    return ns[name]


@pytest.fixture
def rc(cluster):
    c = cluster.client()
    yield c
    c.close()


def test_direct_view_targets(rc):
    ids = rc.ids
    assert ids == sorted(ids) and len(ids) == 2
    assert rc[:].targets == ids and rc[1:].targets == ids[1:]
    assert rc[ids[0]].targets == ids[0] and rc[-1].targets == ids[-1]
    assert rc.direct_view().targets == "all"
    pids = rc[:].apply_sync(task_app.pid)
    assert len(set(pids)) == 2  # one task on each engine
    assert rc[ids[1]].apply_sync(task_app.pid) == pids[1]  # one engine: one result
    assert rc.direct_view(targets=[ids[1], ids[0]]).apply_sync(task_app.pid) == pids[::-1]
    assert rc[:].pull("__name__", targets=ids[0], block=True) == "__main__"
    with pytest.raises(IndexError, match="no such engine"):
        rc[max(ids) + 100]
    with pytest.raises(IndexError, match="no such engine"):
        rc.direct_view(targets=[max(ids) + 100]).apply_sync(task_app.pid)
    with pytest.raises(TypeError, match="expected engine numbers"):
        rc.direct_view(targets=["0"]).apply_sync(task_app.pid)


def test_direct_view_namespace_push_pull_execute(rc):
    dv = rc[:]
    assert dv.block is False
    ar = dv.push({"ns_a": 1, "ns_b": [1, 2]})
    assert isinstance(ar, st.AsyncResult) and ar.get(10) == [None, None]
    dv.block = True
    assert dv.pull("ns_a") == [1, 1]
    assert dv.pull(["ns_a", "ns_b"]) == [[1, [1, 2]], [1, [1, 2]]]
    dv["ns_c"] = np.arange(3)
    assert all(np.array_equal(x, np.arange(3)) for x in dv["ns_c"])
    ids = rc.ids
    dv.push({"ns_only0": "zero"}, targets=ids[0])
    assert dv.pull("ns_only0", targets=ids[0]) == "zero"
    with pytest.raises(st.CompositeError) as e:  # on one engine of two: still composite
        dv.pull("ns_only0")
    (err,) = e.value.errors
    assert isinstance(err, NameError) and err.engine_info["engine_id"] == ids[1]
    ar = dv.execute("import math\nns_d = math.sqrt(ns_a * 16)")
    assert isinstance(ar, st.AsyncResult) and ar.ready() and ar.successful()
    assert dv["ns_d"] == [4.0, 4.0]
    with pytest.raises(TypeError, match="expected a dict"):
        dv.push([("x", 1)])
    with pytest.raises(TypeError, match="expected a name or a list"):
        dv.pull(3)
    # a function of __main__ sees the namespace as its globals, and writes there
    f = interactive("def f(k):\n    global ns_e\n    ns_e = math.floor(ns_d) * k\n"
                    "    return ns_e\n", "f")
    assert dv.apply(f, 2) == [8, 8] and dv["ns_e"] == [8, 8]
    # a module's function keeps its module's globals
    assert dv.apply(task_app.read_global, "ns_e") == ["not in task_app"] * 2
    # a load-balanced view may run in the namespace too
    assert rc.load_balanced_view(namespace=True).apply_sync(f, 1) == 4
    with pytest.raises(NameError):
        rc.load_balanced_view().apply_sync(f, 1)  # cloudpickle's globals: no math there


def test_scatter_gather_and_map_split_contiguously(rc):
    dv = rc.direct_view(block=True)
    dv.scatter("sc", list(range(7)))
    assert dv["sc"] == [[0, 1, 2, 3], [4, 5, 6]]  # the first engine takes the extra one
    assert dv.gather("sc") == list(range(7))
    dv.scatter("sc", np.arange(5.0))
    got = dv.gather("sc")
    assert isinstance(got, np.ndarray) and got.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    dv.scatter("one", [7, 8], flatten=True)
    assert dv["one"] == [7, 8]
    ar = dv.scatter("sc", "abc", block=False)
    assert ar.get(10) == [None, None] and dv.gather("sc", block=False).get(10) == ["ab", "c"]
    with pytest.raises(NotImplementedError, match="dist='b'"):
        dv.scatter("sc", [1], dist="r")
    tagged = dv.map(task_app.tagged, range(9))
    assert [x for _, x in tagged] == list(range(9))
    pids = [p for p, _ in tagged]
    assert pids == [pids[0]] * 5 + [pids[5]] * 4 and pids[0] != pids[5]
    assert dv.map(task_app.add, [1, 2, 3], [10, 20, 30]) == [11, 22, 33]
    ar = dv.map_async(lambda x: x * 2, [5])  # one item: the other engine is not asked
    assert len(ar) == 1 and ar.get(10) == [10]
    assert dv.map_sync(task_app.add, []) == []


def test_direct_view_errors_and_results(rc, capsys):
    dv = rc[:]
    boom = interactive("def boom(x):\n    return 1 // x\n", "boom")
    ar = dv.apply_async(boom, 0)
    with pytest.raises(st.CompositeError) as e:
        ar.get(10)
    assert isinstance(e.value, st.RemoteError) and len(e.value.errors) == 2
    assert [x[0] for x in e.value.elist] == ["ZeroDivisionError"] * 2
    assert sorted(x[3]["engine_id"] for x in e.value.elist) == rc.ids
    with pytest.raises(ZeroDivisionError) as z:
        e.value.raise_exception(1)
    assert z.value.engine_info["engine_id"] == rc.ids[1] and "boom" in z.value.traceback
    assert ar.ready() and not ar.successful()
    with pytest.raises(st.RemoteError) as one:  # a single engine: its own exception
        rc[rc.ids[0]].apply_sync(boom, 0)
    assert isinstance(one.value, ZeroDivisionError) and one.value.evalue
    # progress, len, wait, elapsed, wait_interactive's bar (on stdout, as ipyparallel's)
    ar = dv.map(task_app.nap, [0.3] * 4)
    assert len(ar) == 2 and 0 <= ar.progress <= 2
    ar.wait_interactive(interval=0.05)
    assert ar.ready() and ar.progress == 2 and ar.successful() and ar.elapsed >= 0.3
    out = capsys.readouterr().out
    assert "2/2 tasks" in out and "[" + "#" * 30 + "]" in out
    slow = rc[rc.ids[0]].apply_async(task_app.nap, 3.0)
    t0 = time.monotonic()
    slow.wait_interactive(interval=0.05, timeout=0.2)  # returns, not done, without raising
    assert not slow.ready() and time.monotonic() - t0 < 2.5
    assert slow.get(20) == 3.0
    with pytest.raises(NotImplementedError, match="text progress bar"):
        slow.wait_interactive(widget=True)


def test_cluster_start_and_connect_sync():
    c = st.Cluster(n=1)
    client = c.start_and_connect_sync()
    try:
        assert client.direct_view(block=True).apply(task_app.add, 1, 2) == [3]
        pids = [p.pid for p in c.engines]
    finally:
        c.stop_cluster_sync()
    assert not any(alive(p) for p in pids) and c.controller is None


def test_client_finds_the_default_cluster(tmp_path, monkeypatch):
    # a socket directory of the test's own: another default cluster of this user (a
    # developer's) is neither found nor disturbed
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no running cluster named 'default'"):
        st.Client()
    with st.Cluster(1, launcher="local", name="default") as c:
        assert st.default_cluster_url() == c.url
        with st.Client() as client:
            assert client.url == c.url
            assert client[:].apply_sync(task_app.add, 2, 2) == [4]
        with pytest.raises(ValueError, match="not both"):
            st.Client(c.url, cluster="default")
    with pytest.raises(FileNotFoundError):
        st.default_cluster_url()


def test_a_direct_view_call_to_an_engine_that_died_fails():
    with st.Cluster(n=2) as c:
        rc = c.client()
        doomed = rc.ids[0]
        pid = rc[doomed].apply_sync(task_app.pid)
        busy = rc[doomed].apply_async(task_app.nap, 5)
        behind = rc[:].apply_async(task_app.add, 1, 1)  # one task for each engine
        time.sleep(0.2)  # the nap has begun (it does not matter if not: it fails alike)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(st.EngineError):
            busy.get(20)
        with pytest.raises(st.EngineError, match="which has gone"):
            behind.get(20)  # its other engine's result came; this one's task failed
        with pytest.raises(IndexError, match="no such engine"):
            rc[doomed].apply_sync(task_app.add, 1, 1)
        assert rc[:].apply_sync(task_app.add, 1, 1) == [2]  # the one left


def test_direct_view_clear_and_sync_imports(rc, capsys):
    dv = rc.direct_view(block=True)
    dv.push({"kept": 1})
    dv.clear()
    with pytest.raises(st.CompositeError) as e:
        dv.pull("kept")
    assert [x[0] for x in e.value.elist] == ["NameError", "NameError"]
    with dv.sync_imports():
        import colorsys  # noqa: F401
        from json import dumps  # noqa: F401
    out = capsys.readouterr().out
    assert "importing colorsys on engine(s)" in out and "from json import dumps" in out
    f = interactive("def f():\n    return [colorsys.__name__, dumps([1])]\n", "f")
    assert dv.apply(f) == [["colorsys", "[1]"]] * 2
    with pytest.raises(ModuleNotFoundError):  # here first: the engines are not asked
        with dv.sync_imports(quiet=True):
            import no_such_module_anywhere  # noqa: F401
    with pytest.raises(st.CompositeError) as e:  # there only: the engines' failure
        with dv.sync_imports(local=False, quiet=True):
            import no_such_module_anywhere  # noqa: F401,F811
    assert [x[0] for x in e.value.elist] == ["ModuleNotFoundError"] * 2
    assert "no_such_module_anywhere" not in sys.modules
