"""A user's program written against ipyparallel's documented API (its tutorial's first
page: a Cluster, rc[:], push/pull, scatter/gather, execute, apply, map, block, targets,
errors, AsyncResult's methods). test_compat_ipyparallel.py runs it as it is, against
ipyparallel, and with its two import lines changed to shoal.compat.ipyparallel, and
compares what it prints: one JSON object of what each step gave."""
import json
import time

import ipyparallel as ipp
from ipyparallel.error import RemoteError

out = {}


def record(key, value):
    out[key] = value


def square(x):
    return x * x


def uses_namespace(k):
    return a * k + len(b)  # noqa: F821 (a and b are pushed to the engines)


def fails(x):
    return 1 // x


with ipp.Cluster(n=2) as rc:
    record("ids", rc.ids)
    dview = rc[:]
    record("targets", dview.targets)
    record("block by default", dview.block)
    ar = dview.push(dict(a=3, b="xy"))
    record("push is async", isinstance(ar, ipp.AsyncResult))
    record("push", ar.get(60))
    dview.block = True
    record("pull", dview.pull("a"))
    record("pull names", dview.pull(["a", "b"]))
    dview["c"] = [1, 2]
    record("view[name]", dview["c"])
    dview.scatter("x", list(range(10)))
    record("scattered", dview["x"])
    record("gather", dview.gather("x"))
    dview.execute("y = [v * 2 for v in x]")
    record("gather after execute", dview.gather("y"))
    record("apply", dview.apply(uses_namespace, 2))
    record("apply on one engine", rc[0].apply_sync(uses_namespace, 5))
    record("map", dview.map(square, range(7)))
    record("map_sync of a lambda", dview.map_sync(lambda v: v + a, range(5)))  # noqa: F821
    record("targets keyword", dview.pull("a", targets=[1]))
    record("targets keyword int", dview.pull("a", targets=1))
    record("direct_view", rc.direct_view(targets=[0]).apply_sync(square, 3))
    record("slice", rc[1:].targets)

    dview.block = False
    ar = dview.apply_async(square, 4)
    record("apply_async", [ar.get(60), ar.ready(), ar.successful(), len(ar), ar.progress])
    ar = dview.apply(square, 5)
    record("apply without block", [isinstance(ar, ipp.AsyncResult), ar.get(60)])

    try:
        rc[0].apply_sync(fails, 0)
    except RemoteError as e:
        record("remote error", [e.ename, e.evalue, "fails" in str(e.traceback)])
    try:
        dview.apply_sync(fails, 0)
    except ipp.error.CompositeError as e:
        record("composite", [isinstance(e, RemoteError), sorted(x[0] for x in e.elist)])
        try:
            e.raise_exception()
        except RemoteError as r:
            record("composite's first", r.ename)
    try:
        dview.execute("1/0", block=True)
    except ipp.error.CompositeError as e:
        record("execute error", [x[0] for x in e.elist])

    ar = rc[1].apply_async(time.sleep, 2)
    record("ready at once", ar.ready())
    try:
        ar.get(0.01)
        record("get timeout", "no timeout")
    except ipp.error.TimeoutError:
        record("get timeout", "TimeoutError")
    ar.wait_interactive(interval=0.1)
    record("after wait_interactive",
           [ar.ready(), ar.successful(), ar.get(), ar.elapsed >= 1.5, ar.progress])
    ar = dview.apply_async(time.sleep, 0)
    record("wait", ar.wait(60))

    lview = rc.load_balanced_view()
    record("lb block", lview.block)
    record("lb map_sync", lview.map_sync(square, range(10)))
    record("lb map_async", lview.map_async(square, range(5)).get(60))
    record("lb apply_sync", lview.apply_sync(uses_namespace, 1))
    ar = lview.apply_async(fails, 0)
    try:
        ar.get(60)
    except RemoteError as e:
        record("lb error", [e.ename, ar.successful()])
    lview.block = True
    record("lb apply blocking", lview.apply(square, 6))
    record("client wait", rc.wait(timeout=60))

print("\n" + json.dumps(out, sort_keys=True))  # a line of its own, after progress bars
