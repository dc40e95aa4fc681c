"""Task farm calls from tasklets (issue 34): ``result.get()`` / ``wait`` in a tasklet
suspends only that tasklet (the farm client's ring wait switches in the thread's poller)
while the thread's others run; many tasklets wait on their results through one client;
a kill interrupts a tasklet waiting for a result and the client keeps serving. Against a
real controller and engines (shoal.tasks.Cluster)."""
import os
import sys
import time

import pytest

import shoal.tasks as st
from shoal import tasklets as T

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import task_app  # noqa: E402  (what the engines import by reference)


@pytest.fixture(autouse=True)
def no_tasklet_left():
    yield
    T.run(timeout=10)


@pytest.fixture(scope="module")
def view():
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = HERE + (os.pathsep + path if path else "")
    try:
        with st.Cluster(n=2) as c:
            client = c.client()
            yield client.load_balanced_view()
            client.close()
    finally:
        os.environ["PYTHONPATH"] = path


def ticking():
    ticks, stop = [], []

    def ticker():
        while not stop:
            ticks.append(1)
            T.sleep(0.001)

    T.tasklet(ticker)()
    return ticks, stop


def test_a_result_get_in_a_tasklet_lets_the_others_run(view):
    ticks, stop = ticking()
    out = []

    def waiter():
        out.append(view.apply_async(task_app.nap, 0.3).get(10))
        stop.append(1)

    T.tasklet(waiter)()
    T.run(timeout=30)
    assert out == [0.3]
    assert len(ticks) >= 100  # ~1 ms each while the result was on its way


def test_many_tasklets_wait_on_their_results(view):
    out = {}

    def waiter(i):
        out[i] = view.apply_async(task_app.add, i, i).get(10)

    for i in range(200):
        T.tasklet(waiter)(i)
    T.run(timeout=60)
    assert out == {i: 2 * i for i in range(200)}


def test_kill_of_a_tasklet_waiting_for_a_result(view):
    seen = []

    def waiter():
        try:
            seen.append(view.apply_async(task_app.nap, 0.5).get(10))
        except T.TaskletExit:
            seen.append("killed")
            raise

    t = T.tasklet(waiter)()
    T.sleep(0.1)
    t0 = time.monotonic()
    t.kill()
    with pytest.raises(T.TaskletExit):
        t.join(timeout=5)
    assert time.monotonic() - t0 < 0.3 and seen == ["killed"]
    # the client still serves, from a tasklet and outside one
    got = []
    T.tasklet(lambda: got.append(view.apply_async(task_app.add, 1, 2).get(10)))()
    T.run(timeout=30)
    assert got == [3]
    assert view.apply_sync(task_app.add, 2, 2) == 4
