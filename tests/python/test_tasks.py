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
    with pytest.raises(st.RemoteError) as e:
        view.apply_sync(task_app.custom)
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
