"""The Python engine's side of shoal.tasks (``python3 -m shoal.engine``): how a task's
function is found and its result sent back, and the fork of N engines from one interpreter
that ``shoal cluster``'s local launcher runs for Python engines (src/cluster/supervisor.c).
Apart from shoal.tasks so that an engine starts without the client's imports
(concurrent.futures and logging: about 17 ms here), which counts when a launcher starts
many at once."""
from __future__ import annotations

MYPY = False
if MYPY:  # typing's import costs an engine's start 11 ms here; the annotations are strings
    from typing import Any, Callable, Dict, List, Optional

from . import _shoal, _values
from ._remote import _envelope_for

_ENGINE_STORE: Optional[str] = None  # the engine's --store (set by shoal.engine)
_IN_ENGINE = False  # this process runs tasks (set by _engine_start)


def _note_store(args: List[str]) -> None:
    """The engine's --store, which its Python side connects to as well."""
    global _ENGINE_STORE
    for i, a in enumerate(args):
        if a == "--store" and i + 1 < len(args):
            _ENGINE_STORE = args[i + 1]
        elif a.startswith("--store="):
            _ENGINE_STORE = a.split("=", 1)[1]


def _fork_engines(argv: List[str]) -> int:
    """``shoal cluster``'s local launcher for Python engines: argv is N, a name prefix and
    the engine's options; this interpreter, with the engine imported once, forks the N
    engines (named PREFIX0, PREFIX1, ...) and waits for them. Its exit code: 0 when every
    engine ended well, else the first failure's (a signal's: 128 + its number)."""
    import os
    from . import _shoal
    n, prefix, args = int(argv[0]), argv[1], list(argv[2:])
    _note_store(args)
    pids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = int(_shoal._run_engine(args + ["--name", "%s%d" % (prefix, i)]))
            finally:
                os._exit(code)
        pids.append(pid)
    worst = 0
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(st)
        if code and not worst:
            worst = 128 - code if code < 0 else code
    return worst


def _function_of(ref: Any) -> Callable[..., Any]:
    """The function a task names: module:qualname (imported), or its pickle."""
    if isinstance(ref, str):
        import importlib
        mod, _, qual = ref.partition(":")
        f: Any = importlib.import_module(mod)
        for part in qual.split("."):
            f = getattr(f, part)
        return f  # type: ignore[no-any-return]
    if isinstance(ref, (bytes, bytearray)):
        import pickle  # here: an engine of functions by name never pays its import
        return pickle.loads(ref)  # type: ignore[no-any-return]
    raise TypeError("a task's function: expected module:qualname or a pickle, not a %s"
                    % type(ref).__name__)


def _engine_start() -> Callable[[Any], Any]:
    """In a Python engine (python3 -m shoal.engine, called by its C side): the dispatcher
    of its tasks."""
    global _IN_ENGINE
    _IN_ENGINE = True
    fns: Dict[Any, Callable[..., Any]] = {}
    if _ENGINE_STORE:
        # arrays and tensors shared through the store arrive as views through this
        # connection (else as copies)
        from . import connect
        _values._CHILD_CLIENT = connect(_ENGINE_STORE)

    def resolve(ref: Any) -> Callable[..., Any]:
        f = _function_of(ref)
        if len(fns) > 4096:
            fns.clear()
        fns[bytes(ref) if isinstance(ref, bytearray) else ref] = f
        return f

    def dispatch(call: Any) -> List[Any]:
        try:
            if not isinstance(call, list) or len(call) not in (3, 5):
                raise ValueError("a task: expected [function, args, kwargs]")
            ref = call[0]
            f = fns.get(ref) if isinstance(ref, (str, bytes)) else None
            if f is None:
                f = resolve(ref)
            if len(call) == 5:
                import pickle
                args, kwargs = pickle.loads(call[3], buffers=call[4])
            else:
                args, kwargs = call[1], call[2]
            r = f(*args, **kwargs)
            _end_tasklets()
            return [0, r] if _plain(r) else [2] + _pickled(r)
        except BaseException as e:  # everything goes back to the client, as a failure
            try:
                _end_tasklets()
            except BaseException:
                pass  # the task's own exception is the one to report
            return [1, _raised_json(e)]
    return dispatch


# How long the tasklets a task left have to end once killed (a store get or a result
# wait ends at once, an extension call at its end, a finally may still do some work).
_END_TASKLETS_S = 10.0
# Tasklets that did not end when killed: left blocked, never waited for again.
_STUCK: List[Any] = []


def _end_tasklets() -> None:
    """Kills the tasklets the task that just ended left (blocked, or never run) and waits
    for them to end: a task's tasklets go with it, as asyncio.run's tasks do, so that none
    runs during a later task nor stalls its run() for ever. RuntimeError when some do not
    end (one that catches TaskletExit and blocks again): the task fails then, and they stay
    blocked, never waited for again."""
    left = _shoal._tasklets_alive()  # at every task: a list, most often empty
    if left and _STUCK:
        left = [t for t in left if not any(t is s for s in _STUCK)]
    if not left:
        return
    import time
    for t in left:
        t.kill()
    deadline = time.monotonic() + _END_TASKLETS_S
    for t in left:
        try:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        except BaseException:
            pass  # TaskletExit, what it raised on its way out, or the timeout: see alive
    stuck = [t for t in left if t.alive]
    if stuck:
        _STUCK.extend(stuck)
        raise RuntimeError(
            "the task left %d tasklets, killed when it ended, and %d did not end within %g s "
            "(%s): they stay blocked in this engine" % (
                len(left), len(stuck), _END_TASKLETS_S, ", ".join(repr(t) for t in stuck)))


def _plain(v: Any, depth: int = 0) -> bool:
    """Whether v crosses as a call value (else it goes by pickle)."""
    t = type(v)
    if v is None or t in (bool, int, float, str, bytes):
        return True
    if depth > 64:
        return False
    if t in (list, tuple, set, frozenset):
        return all(_plain(x, depth + 1) for x in v)
    if t is dict:
        return all(_plain(k, depth + 1) and _plain(x, depth + 1) for k, x in v.items())
    if t is bytearray or t is memoryview:
        return True
    if _values._is_torch(v) or _values._is_numpy(v):
        return True
    return any(c in _values._TYPES_BY_CLASS for c in t.__mro__)


def _pickled(obj: Any) -> List[Any]:
    """obj by pickle protocol 5, its buffers (arrays' memory) out of band."""
    import pickle
    bufs: List[Any] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    return [data, [b.raw() for b in bufs]]


def _raised_json(e: BaseException) -> str:
    """An exception as the JSON of a failed task (type, message, traceback): what the
    engine's C side sends as the failure's message, which holds a kilobyte, so the
    message is cut and the traceback keeps its end (the frames nearest the raise)."""
    import json
    err = _envelope_for(e)[1]
    err["message"] = err["message"][:300]
    tb = err["traceback"]
    while True:
        text = json.dumps(err)
        if len(text.encode()) <= 1000 or not tb:
            return text
        tb = tb[len(tb) // 8 + 16:]
        err["traceback"] = "...\n" + tb


# ---- the engine's namespace (shoal.tasks' DirectView) ---------------------------------
# What push and execute define on this engine, and what a function of the client's
# __main__ sees as its globals: ipyparallel's user namespace, under the same rule (a
# function of a module runs with its module's globals).

_NS: Optional[Dict[str, Any]] = None


def _namespace() -> Dict[str, Any]:
    global _NS
    if _NS is None:
        import builtins
        _NS = {"__name__": "__main__", "__builtins__": builtins}
    return _NS


def _in_namespace(f: Any) -> Any:
    """f, made anew over the engine's namespace when it is a function of __main__ (a
    cloudpickle of it carries the globals it used on the client, which ipyparallel's rule
    replaces by the engine's)."""
    import types
    if not isinstance(f, types.FunctionType) or f.__module__ != "__main__":
        return f
    g = types.FunctionType(f.__code__, _namespace(), f.__name__, f.__defaults__,
                           f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    g.__qualname__ = f.__qualname__
    g.__dict__.update(f.__dict__)
    return g


def _ns_call(ref: Any, args: Any, kwargs: Any) -> Any:
    """A task of a DirectView's apply: the function over the engine's namespace."""
    return _in_namespace(_function_of(ref))(*args, **kwargs)


def _ns_map(ref: Any, items: Any) -> List[Any]:
    """A DirectView map's part on this engine: the function over each item's args."""
    f = _in_namespace(_function_of(ref))
    return [f(*a) for a in items]


def _ns_push(ns: Dict[str, Any]) -> None:
    _namespace().update(ns)


def _ns_pull(names: Any) -> Any:
    """The value of a name, or the list of several names' (NameError for a name the
    namespace lacks, as Python's own)."""
    ns = _namespace()

    def one(n: str) -> Any:
        try:
            return ns[n]
        except KeyError:
            raise NameError("name %r is not defined on this engine" % n) from None
    return one(names) if isinstance(names, str) else [one(n) for n in names]


def _ns_execute(code: str) -> None:
    exec(compile(code, "<execute>", "exec"), _namespace())


def _ns_clear() -> None:
    global _NS
    _NS = None
