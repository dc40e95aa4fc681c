"""Tasklets inside the Python processes shoal starts (issue 34, section 3): an isolated
Python extension (shoal.isolate, basic and strict sandboxes) whose methods spawn tasklets,
call after call on the same thread's tasklet state, with store gets through the
extension's store client and async methods on the extension's loop; and a Python task
engine (python3 -m shoal.engine, through shoal.tasks.Cluster) whose tasks run tasklets,
many in a row, one leaving a tasklet blocked for ever. Real processes throughout."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import shoal
import shoal.isolate as si
import shoal.tasks as st

HERE = os.path.dirname(os.path.abspath(__file__))

# tasklet_app.py, copied where every uid reads it (a strict extension runs as a uid of
# its own, and this tree may be under a 0700 home), imported from there by the host,
# its extensions and its engines alike; removed when pytest exits (also when none of
# this file's tests was selected).
_APP_DIR = tempfile.mkdtemp(prefix="shoal-tasklet-app-")
atexit.register(shutil.rmtree, _APP_DIR, ignore_errors=True)
os.chmod(_APP_DIR, 0o755)
shutil.copy(os.path.join(HERE, "tasklet_app.py"), _APP_DIR)
os.chmod(os.path.join(_APP_DIR, "tasklet_app.py"), 0o644)
sys.path.insert(0, _APP_DIR)
import tasklet_app  # noqa: E402


def ext_module():
    p = os.path.join(_APP_DIR, "tasklet_ext_mod.py")
    if not os.path.exists(p):
        with open(p, "w") as f:
            f.write("x = 1\n")
        os.chmod(p, 0o644)
    return p


SANDBOXES = ["none", "basic"] + (["strict"] if os.geteuid() == 0 else [])


@pytest.fixture(scope="module", params=SANDBOXES)
def hosted(request):
    with si.ExtensionManager(tasklet_app.Hosted) as m:
        yield m.load_extension(si.ExtensionConfig(
            name="tasklets-" + request.param, module_path=ext_module(),
            sandbox=request.param, call_timeout=60))


# ---- in an isolated Python extension ---------------------------------------------------

def test_hackysack_in_an_extension(hosted):
    assert hosted.hackysack(100, 1000) == [1000, 100]


def test_ping_pong_sleep_and_join_in_an_extension(hosted):
    assert hosted.ping_pong(1000) == 1000
    assert hosted.sleepers([0.1, 0.05, 0.0]) == [[2, 1, 0], [0, 10, 20]]


def test_an_exception_in_a_tasklet_is_the_calls_error(hosted):
    with pytest.raises(ValueError, match="from a tasklet") as e:
        hosted.raise_in_tasklet("from a tasklet")
    assert isinstance(e.value, si.RemoteError)
    # and the extension serves the next call
    assert hosted.hackysack(10, 10) == [10, 10]


def test_sys_exit_in_a_tasklet_is_the_calls_error_not_the_extensions_end(hosted):
    pid = hosted.thread_state()[0]
    with pytest.raises(si.RemoteError, match="SystemExit: 3"):
        hosted.exit_in_a_tasklet(3)
    assert hosted.thread_state()[0] == pid and hosted.ping_pong(10) == 10


def test_many_calls_reuse_the_threads_tasklet_state(hosted):
    first = hosted.thread_state()
    for i in range(20):
        assert hosted.hackysack(100, 100 + i) == [100 + i, 100]
        assert hosted.ping_pong(10) == 10
    assert hosted.thread_state() == first  # the same process, the same main tasklet


def test_tasklets_in_an_extension_call_a_host_service(hosted):
    base = tasklet_app.Tally().n
    assert hosted.host_service_from_tasklets(20) == list(range(base + 1, base + 21))
    assert tasklet_app.Tally().n == base + 20


def test_calls_nested_in_tasklets_host_service_calls(hosted):
    # tasklet -> host service -> the extension again, whose method sleeps: the calls
    # nest one at a time, in order, whatever the tasklets do meanwhile
    tasklet_app.Tally().ext = hosted
    assert hosted.nested_from_tasklets(3) == [0.01, 0.02, 0.03]
    assert hosted.hackysack(10, 10) == [10, 10]


def test_a_call_returns_after_another_tasklets_nested_calls(hosted):
    # a tasklet left by one call calls the host during the next, and parks in the call
    # the host makes back; the next call's own return waits for that to end
    tasklet_app.Tally().ext = hosted
    assert hosted.leave_a_host_caller(0.1) == "left"
    t0 = time.monotonic()
    assert hosted.block_then_return(0.01) == [True, "returned"]  # alive when it returned
    assert time.monotonic() - t0 >= 0.09  # but its return waited for the nested nap
    assert hosted.joined_left() == 0.1
    assert hosted.hackysack(10, 10) == [10, 10]


def test_an_extension_that_dies_in_a_call_nested_in_a_host_service(tmp_path):
    # the host's service sees the nested call fail (the extension exited), and the host
    # must not answer the service's call on the rings of a process it reaped: it crashed
    # (SIGSEGV) doing so. A child process, so that a crash fails this test alone.
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import tasklet_app
        import shoal.isolate as si
        with si.ExtensionManager(tasklet_app.Hosted) as m:
            n = m.load_extension(si.ExtensionConfig(name="dies", module_path=%r,
                                                    call_timeout=30))
            tasklet_app.Tally().ext = n
            try:
                n.die_in_a_nested_call()
            except si.ExtensionCrashed as e:
                print("crashed:", e)
    """) % (_APP_DIR, ext_module())
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "crashed:" in r.stdout and "exited with status 3" in r.stdout


def test_tasklets_of_an_async_method_call_a_host_service(hosted):
    base = tasklet_app.Tally().n
    got, mine = hosted.async_host_service_from_tasklets(10)
    assert got == list(range(base + 1, base + 11)) and mine == base + 10


def test_host_tasklets_spawned_in_a_coroutine_call_the_extension(hosted):
    # in a coroutine a call gives an awaitable; in a tasklet it spawned, the result
    import asyncio
    from shoal import tasklets as T

    async def main():
        ts = [T.tasklet(hosted.hackysack)(10, 10 + i) for i in range(3)]
        got = [t.join(timeout=30) for t in ts]
        return got, await hosted.ping_pong(10)

    assert asyncio.run(main()) == ([[10 + i, 10] for i in range(3)], 10)


def test_run_timeout_in_an_extension_then_the_next_call(hosted):
    msg, alive = hosted.leave_blocked(0.05)
    assert "timeout passed" in msg and "channel.receive" in msg and alive is False
    assert hosted.hackysack(100, 100) == [100, 100]


def test_store_gets_from_tasklets_through_the_extensions_store_client(tmp_path):
    with shoal.Store(size=64 << 20, socket=str(tmp_path / "s.sock")) as store, \
            si.ExtensionManager(tasklet_app.Hosted, store=store) as m:
        ids = ["%x" % m.client.put(b"v%d" % i) for i in range(50)]
        # share_torch gives the extension a store client of its own (SHOAL_PY_STORE)
        n = m.load_extension(si.ExtensionConfig(name="shared", module_path=ext_module(),
                                                share_torch=True, call_timeout=60))
        want = [b"v%d" % i for i in range(50)]
        for _ in range(3):
            got, ticked = n.store_gets(ids)
            assert got == want and ticked
        # and a connection the extension makes itself
        b = m.load_extension(si.ExtensionConfig(name="own", module_path=ext_module(),
                                                sandbox="basic", call_timeout=60))
        got, ticked = b.store_gets_at(str(store.socket), ids)
        assert got == want and ticked


def test_async_methods_and_tasklets_on_the_extensions_loop(hosted):
    for i in range(3):
        r, same_loop = hosted.async_with_tasklets(20)
        assert r == [100, 20] and same_loop
    assert hosted.tasklets_around_the_loop(5) == [0, 1, 4, 9, 16]
    assert hosted.hackysack(10, 10) == [10, 10]


def test_async_hooks_run_tasklets(tmp_path):
    with si.ExtensionManager(tasklet_app.AsyncHooked) as m:
        n = m.load_extension(si.ExtensionConfig(name="hooked", module_path=ext_module(),
                                                sandbox="basic", call_timeout=60))
        assert n.what_the_hooks_got() == [100, [500, 50]]
        r, same_loop = n.async_with_tasklets(20)  # the hooks' loop, and tasklets again
        assert r == [100, 20] and same_loop


# ---- in a Python task engine -----------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = _APP_DIR + (os.pathsep + path if path else "")
    try:
        with st.Cluster(n=1, store=True) as c:
            yield c
    finally:
        os.environ["PYTHONPATH"] = path


@pytest.fixture(scope="module")
def view(cluster):
    client = cluster.client()
    yield client.load_balanced_view()
    client.close()


WANT_TASK = [[1000, 100], 1000, [[2, 1, 0], [0, 10, 20]]]


def test_a_task_runs_tasklets(view):
    assert view.apply_sync(tasklet_app.tasklets_in_a_task, 100) == WANT_TASK


def test_many_tasks_with_tasklets_in_a_row_on_one_engine(view):
    rs = [view.apply_async(tasklet_app.tasklets_in_a_task, 100) for _ in range(30)]
    assert [r.get(60) for r in rs] == [WANT_TASK] * 30
    assert len({tuple(view.apply_sync(tasklet_app.thread_state)) for _ in range(5)}) == 1


def test_an_exception_in_a_tasklet_fails_the_task(view):
    with pytest.raises(ValueError, match="in a task's tasklet"):
        view.apply_sync(tasklet_app.raise_in_tasklet, "in a task's tasklet")
    assert view.apply_sync(tasklet_app.ping_pong, 10) == 10


def test_a_task_whose_run_times_out_then_the_next_task(view):
    msg, alive = view.apply_sync(tasklet_app.leave_blocked, 0.05)
    assert "timeout passed" in msg and alive is False
    assert view.apply_sync(tasklet_app.tasklets_in_a_task, 100) == WANT_TASK


def test_a_task_that_leaves_a_tasklet_blocked_for_ever_then_the_next_tasks(view):
    msg = view.apply_sync(tasklet_app.leave_blocked_kept, 0.05)
    assert "timeout passed" in msg and "channel.receive" in msg
    # the engine serves the next tasks, tasklets and all
    assert view.apply_sync(tasklet_app.tasklets_in_a_task, 100) == WANT_TASK
    assert view.apply_sync(tasklet_app.ping_pong, 10) == 10


def test_tasklets_a_task_left_runnable_never_run_in_the_next(view):
    assert view.apply_sync(tasklet_app.leave_runnable, 5) == 5
    assert view.apply_sync(tasklet_app.what_ran_since) == []


def test_a_task_whose_tasklet_will_not_end_fails():
    # killed when the task ended, it catches TaskletExit and blocks again: the engine
    # waits 10 s for it (_END_TASKLETS_S), fails the task, and serves the next ones (an
    # engine of its own: a tasklet stuck there stalls a later task's run())
    with st.Cluster(n=1) as c:
        client = c.client()
        v = client.load_balanced_view()
        with pytest.raises(RuntimeError, match="1 did not end within"):
            v.apply_sync(tasklet_app.leave_a_stubborn_tasklet)
        assert v.apply_sync(tasklet_app.ping_pong, 10) == 10
        assert v.apply_sync(tasklet_app.hackysack, 10, 10) == [10, 10]
        client.close()


def test_sys_exit_in_a_tasks_tasklet_fails_the_task_not_the_engine(view):
    with pytest.raises(st.RemoteError, match="SystemExit: 3"):
        view.apply_sync(tasklet_app.exit_in_a_tasklet, 3)
    assert view.apply_sync(tasklet_app.tasklets_in_a_task, 10) == [
        [100, 10], 1000, [[2, 1, 0], [0, 10, 20]]]


def test_store_gets_from_a_tasks_tasklets_through_the_engines_store(cluster, view):
    c = shoal.connect(cluster.store_socket)
    ids = ["%x" % c.put(b"t%d" % i) for i in range(50)]
    got, ticked = view.apply_sync(tasklet_app.engine_store_gets, ids)
    assert got == [b"t%d" % i for i in range(50)] and ticked
