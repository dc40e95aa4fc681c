"""shoal.tasks: the task farm from Python, in ipyparallel's shapes.

    import shoal.tasks as st

    with st.Cluster(n=4) as cluster:           # a controller and 4 Python engines
        client = cluster.client()
        view = client.load_balanced_view()
        ar = view.apply_async(pow, 2, 10)      # an AsyncResult (a concurrent.futures.Future)
        ar.get(timeout=5)                      # 1024
        view.map(lambda x: x * x, range(10)).get()

Engines are ``python3 -m shoal.engine`` processes (the user's own, trusted): on this host
through the controller's unix socket and shared-memory rings, or on others over TCP with
the cluster's secret (``--connect HOST:PORT``, the secret in ``$SHOAL_SECRET_FILE`` or
``$SHOAL_SECRET``). A function importable by module and qualified name goes by reference;
a lambda, closure or a function of ``__main__`` goes by ``cloudpickle`` (Debian's
``python3-cloudpickle``, needed on both sides then). Arguments and results are the values
shoal.isolate passes (msgpack's kinds, tuples, sets, numpy arrays and torch tensors,
registered types); anything else goes by pickle (protocol 5, arrays out of band). Nothing
is unpickled from a peer that has not passed the controller's handshake: a client and
engines reach each other only through it.

A :class:`DirectView` (``client[:]``, ``client[0]``, ``client.direct_view(targets)``)
sends its calls to named engines, each of which keeps a namespace (``push``, ``pull``,
``scatter``, ``gather``, ``execute``; the globals of the functions of ``__main__`` it
runs), as ipyparallel's. ``Client()`` finds the running cluster named ``default`` (see
:func:`default_cluster_url`). ``shoal.compat.ipyparallel`` maps ipyparallel's own names
onto these.

An exception in a task is raised by ``get()`` as a :class:`RemoteError` that is also of the
task's exception class when that is a builtin or a class of a module imported in this
process (``except ZeroDivisionError`` catches it; the remote traceback in a note); a
DirectView call over several engines raises a :class:`CompositeError` of its tasks'. The
farm's own failures raise :class:`EngineError` (the engine died past the task's retries),
:class:`TaskTimeout` (past its deadline) and :class:`DependencyError` (a task of
``after``/``follow`` failed).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

from . import _shoal, _values
from ._engine import _function_of, _pickled, _plain
from ._remote import RemoteError, _envelope_for, _unwrap

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

__all__ = [
    "AsyncMapResult",
    "AsyncResult",
    "Client",
    "Cluster",
    "CompositeError",
    "DependencyError",
    "DirectView",
    "EngineError",
    "LoadBalancedView",
    "RemoteError",
    "TaskError",
    "TaskTimeout",
    "default_cluster_url",
]

# the C layer's codes of the farm's own failures, and of a function that raised
_ETIMEDOUT, _EENGINE, _EDEPFAIL = _shoal.ETIMEDOUT, _shoal.EENGINE, _shoal.EDEPFAIL
_ERAISED = _shoal.ERAISED
_EPERM = -1  # SHOAL_EPERM (errno-compatible)
_FN = "py"  # the one function of a Python engine


# ---- errors ---------------------------------------------------------------------------

class TaskError(Exception):
    """A task failed in the farm itself (not in its function): ``code`` is the C layer's
    (``SHOAL_E*``), ``message`` what it said."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class EngineError(TaskError):
    """The engine running the task died, and its retries were spent."""


class TaskTimeout(TaskError, TimeoutError):
    """The task was not done by its deadline (``timeout`` of its flags)."""


class DependencyError(TaskError):
    """A task it depended on (``after``, ``follow``) failed."""


class CompositeError(RemoteError):
    """Tasks of one DirectView call raised on several engines (or on one of several):
    ``errors`` holds each one's exception (a :class:`RemoteError`, whose ``engine_info``
    names its engine), ``elist`` the same as ipyparallel's (ename, evalue, traceback,
    engine_info) tuples; ``raise_exception(i)`` raises the i-th."""

    __slots__ = ()

    def __init__(self, message: str, errors: List[RemoteError]) -> None:
        tb = "\n".join("[engine %s] %s" % (e.engine_info.get("engine_id", "?"),
                                           e.remote_traceback) for e in errors)
        super().__init__("CompositeError", message, tb)
        self.errors = errors

    @property
    def elist(self) -> List[Tuple[str, str, str, Dict[str, Any]]]:
        return [(e.ename, e.evalue, e.remote_traceback, e.engine_info) for e in self.errors]

    def raise_exception(self, excid: int = 0) -> None:
        """Raises the excid-th task's exception (IndexError when there is none)."""
        if not -len(self.errors) <= excid < len(self.errors):
            raise IndexError("exception %d: expected 0 to %d" % (excid, len(self.errors) - 1))
        raise self.errors[excid]

    def __str__(self) -> str:
        return self.message + "".join(
            "\n[engine %s] %s: %s" % (e.engine_info.get("engine_id", "?"), e.ename, e.evalue)
            for e in self.errors)

    def __reduce__(self) -> Any:
        return (CompositeError, (self.message, self.errors))


def _raise_composite(parts: List["AsyncResult"], where: str) -> None:
    """Of a DirectView call's tasks, all done: a failure of the farm's own is raised as
    itself (the first); the tasks' exceptions as one CompositeError."""
    remote = []
    for p in parts:
        e = p.exception()
        if e is None:
            continue
        if not isinstance(e, RemoteError):
            raise e
        remote.append(e)
    if remote:
        raise CompositeError("one or more exceptions from call to method: %s" % where, remote)


def _farm_error(code: int, message: str) -> TaskError:
    cls = {_EENGINE: EngineError, _ETIMEDOUT: TaskTimeout, _EDEPFAIL: DependencyError}.get(
        code, TaskError)
    return cls(message, code)


# ---- what a task carries -------------------------------------------------------------

def _need_cloudpickle(what: str) -> Any:
    try:
        import cloudpickle
    except ImportError:
        raise ImportError("%s goes by cloudpickle, which is not installed (Debian: "
                          "python3-cloudpickle)" % what) from None
    return cloudpickle


# Functions already named: module:qualname strings (a function's pickle is made anew,
# as a closure's cells may have changed).
_REFS: Dict[Any, str] = {}


def _fn_ref(f: Callable[..., Any]) -> Any:
    """"module:qualname" of a function its engine can import, else its cloudpickle."""
    try:
        return _REFS[f]
    except (KeyError, TypeError):
        pass
    ref = _name_of(f)
    if ref is not None:
        try:
            if len(_REFS) > 4096:
                _REFS.clear()
            _REFS[f] = ref
        except TypeError:  # not hashable
            pass
        return ref
    if not callable(f):
        raise TypeError("a task runs a callable, not a %s" % type(f).__name__)
    return _need_cloudpickle("%r" % (f,)).dumps(f, protocol=5)


def _name_of(f: Callable[..., Any]) -> Optional[str]:
    mod = getattr(f, "__module__", None)
    qual = getattr(f, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qual, str) and mod != "__main__" and "<" not in qual:
        obj: Any = sys.modules.get(mod)
        for part in qual.split("."):
            obj = getattr(obj, part, None)
        if obj is f:
            return "%s:%s" % (mod, qual)
    return None


def _payload(ref: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> List[Any]:
    if (not args or _plain(args)) and (not kwargs or _plain(kwargs)):
        return [ref, list(args), kwargs]
    return [ref, None, None] + _pickled((args, kwargs))


def _raised(text: str, where: str, trusted: bool) -> Any:
    """The exception of a task that raised, from its JSON (data the engine chose: its
    class is a builtin, or for a trusted engine a class of a module imported here, never
    imported for it)."""
    import json
    try:
        err = json.loads(text)
    except ValueError:
        raise TaskError("%s raised, and said: %s" % (where, text), _ERAISED) from None
    return _unwrap([1, err], where, loaded=trusted)


def _result(env: Any, where: str, accept_pickle: bool = True) -> Any:
    """A task's value from its engine's envelope: [0, value], [1, error] or [2, pickle,
    buffers] (the engine is the user's, past the controller's handshake). A pickle runs
    code of the engine's choosing here: a client made with ``accept_pickle=False``
    refuses it, unread."""
    if isinstance(env, list) and len(env) == 3 and env[0] == 2:
        if not accept_pickle:
            raise TaskError("%s: its engine sent a pickled value, which this client refuses "
                            "(accept_pickle=False: only plain values, arrays, tensors, "
                            "registered types and store objects)" % where, _EPERM)
        return pickle.loads(env[1], buffers=env[2])
    return _unwrap(env, where, loaded=accept_pickle)


def _map_chunk(ref: Any, items: List[Any]) -> List[Any]:
    """A chunk of a map with chunksize > 1, run on one engine: f over each item's args."""
    f = _function_of(ref)
    return [f(*a) for a in items]


# ---- results ---------------------------------------------------------------------------

# A Future's condition, waiters and callbacks are made at their first use: most of a
# flood's results come before anyone waits on them, and a threading.Condition costs 8 us
# to make here (more than a task's round trip). One lock makes each once, and lets a
# result settle without waking anyone when nothing was made.
_LAZY = threading.Lock()
_FINISHED = concurrent.futures._base.FINISHED  # type: ignore[attr-defined]
_DONE_STATES = (concurrent.futures._base.CANCELLED,  # type: ignore[attr-defined]
                concurrent.futures._base.CANCELLED_AND_NOTIFIED,  # type: ignore[attr-defined]
                _FINISHED)


class _Lazy:
    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self
        with _LAZY:
            d = obj.__dict__
            v = d.get(self.name)
            if v is None:
                v = d[self.name] = self.make()
            return v


class AsyncResult(concurrent.futures.Future):  # type: ignore[type-arg]
    """A task's result to come: a :class:`concurrent.futures.Future` (``result()``,
    ``add_done_callback``, ``concurrent.futures.wait``), awaitable from asyncio, with
    ipyparallel's names: ``get(timeout)``, ``ready()``, ``wait(timeout)``,
    ``successful()``, ``elapsed`` and ``msg_ids``. A thread that waits on it takes the
    results from the controller itself; otherwise the client's result thread does."""

    _condition = _Lazy(threading.Condition)
    _waiters = _Lazy(list)
    _done_callbacks = _Lazy(list)
    _state = concurrent.futures._base.PENDING  # type: ignore[attr-defined]
    _result = None
    _exception = None
    _map: Optional["AsyncMapResult"] = None
    _done_at: Optional[float] = None
    _engine: Optional[int] = None  # the engine a DirectView sent it to

    def __init__(self, client: "Client", tid: int, where: Any) -> None:
        # not Future.__init__: what it makes is made when used (_Lazy)
        self._client = client
        self._tid = tid
        self._what = where
        self._submitted = time.monotonic()

    @property
    def msg_ids(self) -> List[int]:
        """The ids of its tasks at the controller (one; a map's: one per chunk)."""
        return [self._tid]

    @property
    def _where(self) -> str:
        w = self._what
        return w if isinstance(w, str) else getattr(w, "__qualname__", None) or repr(w)

    def done(self) -> bool:
        return self._state in _DONE_STATES

    def result(self, timeout: Optional[float] = None) -> Any:
        if self._state != _FINISHED:
            self._client._drive(self, timeout)
            return super().result(0 if timeout is not None else None)
        if self._exception is not None:  # finished: no condition to wait on
            raise self._exception
        return self._result

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        if self._state != _FINISHED:
            self._client._drive(self, timeout)
            return super().exception(0 if timeout is not None else None)
        return self._exception

    def get(self, timeout: Optional[float] = None) -> Any:
        """The result (blocks: at most timeout seconds, then ``TimeoutError``), or the
        task's exception raised."""
        return self.result(timeout)

    def ready(self) -> bool:
        return self.done()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until done (blocks: at most timeout seconds); whether it is."""
        if self._state != _FINISHED:
            self._client._drive(self, timeout)
        return self.done()

    def successful(self) -> bool:
        """Whether it is done without an exception (``AssertionError`` before it is done,
        as ipyparallel's)."""
        if not self.done():
            raise AssertionError("the task is not done")
        return self.exception() is None

    @property
    def elapsed(self) -> float:
        """Seconds since it was submitted, until it was done."""
        end = self._done_at if self._done_at is not None else time.monotonic()
        return end - self._submitted

    def __len__(self) -> int:
        """Its count of tasks (1; a map's or a DirectView call's: one per part)."""
        return 1

    def __bool__(self) -> bool:  # not len(): an empty map's result is still a result
        return True

    @property
    def progress(self) -> int:
        """How many of its tasks are done."""
        return 1 if self.done() else 0

    def wait_interactive(self, interval: float = 0.1, timeout: Optional[float] = -1,
                         widget: Optional[bool] = None) -> None:
        """Waits until done (timeout seconds at most; None or < 0: no bound), drawing a
        text progress bar on stdout every interval seconds (where ipyparallel draws its
        own outside a notebook; in one, the cell's output). Returns, without raising, when
        timeout passed (as ipyparallel's)."""
        if widget:
            raise NotImplementedError("wait_interactive(widget=True): shoal draws a text "
                                      "progress bar only (widget=None or False)")
        if timeout is not None and timeout < 0:
            timeout = None
        out = sys.stdout
        n, t0 = len(self), time.monotonic()
        while not self.done():
            left = None if timeout is None else timeout - (time.monotonic() - t0)
            if left is not None and left <= 0:
                break
            self.wait(interval if left is None else min(interval, left))
            _draw_progress(out, self.progress, n, time.monotonic() - t0, self._where)
        _draw_progress(out, self.progress, n, time.monotonic() - t0, self._where)
        out.write("\n")
        out.flush()

    def __await__(self) -> Any:
        import asyncio
        return asyncio.wrap_future(self).__await__()

    def _settle(self, status: int, value: Any) -> None:
        self._done_at = time.monotonic()
        ok = False
        try:
            if status == _ERAISED:
                _raised(value, self._where, self._client._accept_pickle)
            if status != 0:
                raise _farm_error(status, value)
            value, ok = _result(value, self._where, self._client._accept_pickle), True
        except BaseException as e:
            value = e
            if isinstance(e, RemoteError) and self._engine is not None:
                e.engine_info = {"engine_id": self._engine, "method": self._where}
        with _LAZY:
            d = self.__dict__
            quiet = "_condition" not in d  # nobody waits, and no callback
            if quiet:
                d["_result" if ok else "_exception"] = value
                d["_state"] = _FINISHED
        if not quiet:
            try:
                if ok:
                    self.set_result(value)
                else:
                    self.set_exception(value)
            except concurrent.futures.InvalidStateError:
                return  # cancelled by its owner while it ran: the result is dropped
        if self._map is not None:
            self._map._one(self)


def _draw_progress(out: Any, done: int, n: int, seconds: float, what: str) -> None:
    width = 30
    full = width * done // n if n else width
    out.write("\r%s [%s%s] %d/%d tasks, %.1f s" % (what, "#" * full, "." * (width - full),
                                                  done, n, seconds))
    out.flush()


class AsyncMapResult(AsyncResult):
    """Results of several tasks to come, as one: a map's, or a DirectView call's over
    several engines. ``get()`` gives the list (in order, or in the order they came with
    ``ordered=False``); iterating yields each as it is ready. A DirectView's raises a
    :class:`CompositeError` when some of its tasks raised."""

    def __init__(self, client: "Client", parts: List[AsyncResult], ordered: bool,
                 chunked: bool, *, composite: bool = False,
                 join: Optional[Callable[[List[Any]], Any]] = None,
                 where: Any = "map") -> None:
        super().__init__(client, 0, where)
        self._parts = parts
        self._ordered = ordered
        self._chunked = chunked
        self._composite = composite
        self._join = join
        self._lock = threading.Lock()
        with self._lock:
            for p in parts:
                p._map = self
            self._came = [p for p in parts if p.done()]
            self._seen = {id(p) for p in self._came}
            self._left = len(parts) - len(self._came)
        if self._left == 0:
            self._finish()

    def _one(self, p: AsyncResult) -> None:
        with self._lock:
            if id(p) in self._seen:  # counted as done already when the map was made
                return
            self._seen.add(id(p))
            self._came.append(p)
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        self._done_at = time.monotonic()
        parts = self._parts if self._ordered else self._came
        try:
            if self._composite:
                _raise_composite(parts, self._where)
            out: Any = [p.result() for p in parts]
            if self._chunked:
                out = [x for chunk in out for x in chunk]
            if self._join is not None:
                out = self._join(out)
            ok = True
        except BaseException as e:
            out, ok = e, False
        try:
            if ok:
                self.set_result(out)
            else:
                self.set_exception(out)
        except concurrent.futures.InvalidStateError:
            pass  # the map was cancelled by its owner

    def result(self, timeout: Optional[float] = None) -> Any:
        end = None if timeout is None else time.monotonic() + timeout
        for p in self._parts:
            if not p.done():
                p.wait(None if end is None else max(0.0, end - time.monotonic()))
        return concurrent.futures.Future.result(self, 0 if timeout is not None else None)

    @property
    def msg_ids(self) -> List[int]:
        return [p._tid for p in self._parts]

    def __len__(self) -> int:
        return len(self._parts)

    @property
    def progress(self) -> int:
        return sum(1 for p in self._parts if p.done())

    def __iter__(self) -> Iterator[Any]:
        if self._ordered:
            for p in self._parts:
                yield from (p.result() if self._chunked else [p.result()])
        else:
            for p in concurrent.futures.as_completed(self._parts):
                yield from (p.result() if self._chunked else [p.result()])


# ---- the client -------------------------------------------------------------------------

def default_cluster_url(name: str = "default") -> str:
    """The controller's url of the running cluster of that name on this host, as ``shoal
    cluster start`` (name ``default`` unless ``--name``) or ``Cluster(launcher=...,
    name=...)`` starts one: such a cluster lives in a directory of its own in this user's
    private socket directory (``$XDG_RUNTIME_DIR/shoal``, else ``/run/shoal`` for root,
    else ``/tmp/shoal-UID``), whose supervisor tells its controller. Blocks: a round trip
    to the supervisor. ``FileNotFoundError`` when no cluster of that name runs."""
    try:
        info = _shoal.cluster_status(name=name)
    except _shoal.NotFound:
        raise FileNotFoundError(
            "no running cluster named %r on this host: expected one started by `shoal "
            "cluster start N` (or shoal.tasks.Cluster(N, launcher='local', name=%r)), or "
            "a controller's url given to Client(url)" % (name, name)) from None
    return str(info["controller"])


class Client:
    """A client of a controller: ``Client(url)`` with its unix socket path or
    ``tcp://HOST:PORT`` (the secret from ``$SHOAL_SECRET_FILE`` or ``$SHOAL_SECRET``);
    ``Client()``: the running cluster named ``default`` (see
    :func:`default_cluster_url`), ``Client(cluster=NAME)`` another one by name.
    ``store``: the socket of a store this host's engines use too (``--store``): arrays
    and tensors then go by reference through it both ways, arriving as read-only views
    (an argument is put there once, at its submit, even a view of another object: the
    object made for a task goes once its result is taken). Blocks: the connects (at most
    ``timeout`` seconds). A context manager; ``close()`` drops its tasks not yet run.

    ``accept_pickle=False``: results an engine sends as a pickle (what is not a plain
    value, an array, a tensor, a registered type or a store object) are refused, unread,
    with a ``TaskError``: a pickle runs code of the sender's choosing, so an engine that
    holds the cluster's secret could run code in this process through one."""

    def __init__(self, url: Optional[str] = None, timeout: float = 10.0, *,
                 store: Optional[str] = None, accept_pickle: bool = True,
                 cluster: Optional[str] = None) -> None:
        if url is None:
            url = default_cluster_url(cluster or "default")
        elif cluster is not None:
            raise ValueError("Client(url, cluster=%r): expected a url or a cluster's name, "
                             "not both" % cluster)
        self.url = url
        self._accept_pickle = accept_pickle
        self._farm = _shoal.Farm(url, timeout)
        self._store: Any = None
        if store is not None:
            from . import connect
            self._farm.use_store(store)
            self._store = connect(store)
        self._pending: Dict[int, AsyncResult] = {}
        # results that came before their submit had registered them (the result thread
        # takes the farm as soon as the submit lets go of it)
        self._early: Dict[int, Tuple[int, Any]] = {}
        self._cv = threading.Condition()
        self._closed = False
        self._error: Optional[BaseException] = None
        self._pump = threading.Thread(target=self._pump_main, name="shoal-tasks-results",
                                      daemon=True)
        self._pump.start()

    # Results are taken from the farm by a thread that waits for one (_drive), else by
    # the result thread, which looks without waiting and sleeps between looks (20 us,
    # doubling to 2 ms while nothing comes): it never holds the farm while a submit
    # wants it.
    def _pump_main(self) -> None:
        farm, pending, cv = self._farm, self._pending, self._cv
        nap = 0.00002
        while True:
            with cv:
                while not pending and not self._closed:
                    cv.wait()
                    nap = 0.00002
                if self._closed:
                    return
            _values._CTX.client = self._store  # views of shared results, through it
            try:
                batch = farm.results(0.0)
            except BaseException as e:  # the controller went: every task fails
                self._fail_all(e)
                return
            finally:
                _values._CTX.client = None
            if batch:
                self._settle_batch(batch)
                nap = 0.00002
            else:
                time.sleep(nap)
                nap = min(nap * 2, 0.002)

    def _settle_batch(self, batch: List[Tuple[int, int, Any]]) -> None:
        pending, early = self._pending, self._early
        with self._cv:
            ars = []
            for tid, status, value in batch:
                ar = pending.pop(tid, None)
                if ar is None:
                    early[tid] = (status, value)
                else:
                    ars.append((ar, status, value))
        for ar, status, value in ars:
            ar._settle(status, value)

    def _drive(self, ar: AsyncResult, timeout: Optional[float]) -> None:
        """Takes results until ar's came (or timeout seconds passed): the thread that
        waits does the work, without handing off to the result thread."""
        end = None if timeout is None else time.monotonic() + timeout
        while not ar.done():
            left = 0.05 if end is None else min(0.05, end - time.monotonic())
            if left <= 0 or self._error is not None:
                return
            ctx = _values._CTX
            prev, ctx.client = ctx.client, self._store
            try:
                batch = self._farm.results(left)
            except _shoal.Closed:
                return  # closed meanwhile: its futures have failed
            finally:
                ctx.client = prev
            self._settle_batch(batch)

    def _fail_all(self, e: BaseException) -> None:
        with self._cv:
            self._error = e
            left = list(self._pending.values())
            self._pending.clear()
        for ar in left:
            if not ar.done():
                ar.set_exception(TaskError("the controller's connection: %s" % e))

    def _submit(self, payload: List[Any], flags: Optional[Dict[str, Any]],
                where: Any) -> AsyncResult:
        """A task of payload; flags None: the defaults. where: the function, or what
        names the task in its errors."""
        if self._error is not None:
            raise TaskError("the controller's connection: %s" % self._error)
        ctx = _values._CTX
        ctx.views = False  # arrays go as themselves: the farm shares them (see _values)
        try:
            if flags is None:
                tid = self._farm.submit(_FN, payload)
            else:
                tid = self._farm.submit(_FN, payload, flags["timeout"], flags["retries"],
                                        flags["engine"], flags["after"], flags["follow"])
        finally:
            ctx.views = True
        ar = AsyncResult(self, tid, where)
        with self._cv:
            early = self._early.pop(tid, None)
            if early is None:
                self._pending[tid] = ar
                if len(self._pending) == 1:
                    self._cv.notify()
        if early is not None:
            ar._settle(*early)
        return ar

    def load_balanced_view(self, *, namespace: bool = False) -> "LoadBalancedView":
        """A view that runs each task on whichever engine the controller's scheme picks.
        namespace: a function of ``__main__`` runs with the engine's namespace as its
        globals (see :class:`DirectView`), not with the globals cloudpickle took along."""
        return LoadBalancedView(self, namespace=namespace)

    def direct_view(self, targets: Any = "all", *, block: bool = False) -> "DirectView":
        """A view whose calls go to the named engines: ``"all"`` (those connected at each
        call), an engine's number, or a list of them."""
        return DirectView(self, targets, block=block)

    def __getitem__(self, key: Any) -> "DirectView":
        """``client[0]``: a DirectView of one engine (its calls give one result);
        ``client[:]``, ``client[1:3]``, ``client[[0, 2]]``: of those engines, as
        ipyparallel reads them: an int names an engine (a negative one counts from the end
        of :attr:`ids`), a slice takes positions in :attr:`ids`."""
        ids = self.ids
        if isinstance(key, slice):
            return DirectView(self, ids[key])
        if isinstance(key, (int, list, tuple)) and not isinstance(key, bool):
            return DirectView(self, _check_targets(key, ids))
        raise TypeError("client[...]: expected an int, a slice or a list of engines, not a %s"
                        % type(key).__name__)

    def executor(self) -> "_Executor":
        """A :class:`concurrent.futures.Executor` over a load-balanced view."""
        return _Executor(self.load_balanced_view())

    def stat(self, timeout: float = 10.0) -> Dict[str, Any]:
        """The controller's figures (engines, queued, running, done, ...) and its
        engines (``engine_list``). Blocks: at most timeout seconds."""
        return self._farm.stat(timeout)

    @property
    def ids(self) -> List[int]:
        """The numbers of the engines connected now, in order."""
        return sorted(e["num"] for e in self.stat()["engine_list"])

    def wait_for_engines(self, n: int, timeout: Optional[float] = None) -> None:
        """Blocks until n engines are connected (``TimeoutError`` after timeout
        seconds)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            have = self.stat()["engines"]
            if have >= n:
                return
            if end is not None and time.monotonic() >= end:
                raise TimeoutError("%d engines connected to %s, waited for %d" %
                                   (have, self.url, n))
            time.sleep(0.005)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._pump.join()
        self._farm.close()
        self._fail_all(TaskError("the client was closed"))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_DEFAULT_FLAGS = {"retries": 0, "timeout": None, "after": None, "follow": None,
                  "engine": -1}


def _task_ids(deps: Any, what: str) -> Optional[List[int]]:
    """AsyncResults (or task ids) as the ids the controller knows."""
    if deps is None:
        return None
    if isinstance(deps, (AsyncResult, int)):
        deps = [deps]
    out: List[int] = []
    for d in deps:
        if isinstance(d, AsyncResult):
            out.extend(d.msg_ids)
        elif isinstance(d, int):
            out.append(d)
        else:
            raise TypeError("%s: expected AsyncResults or task ids, not a %s" %
                            (what, type(d).__name__))
    return out


class LoadBalancedView:
    """Tasks to whichever engine the controller's scheme picks (ipyparallel's
    LoadBalancedView). Flags (``set_flags``, ``temp_flags``) apply to the tasks
    submitted after: ``retries`` (times a task is sent again when its engine dies),
    ``timeout`` (seconds from submission), ``after`` (run once these succeeded),
    ``follow`` (and on the engine that ran them)."""

    def __init__(self, client: Client, *, namespace: bool = False) -> None:
        self.client = client
        self._flags = dict(_DEFAULT_FLAGS)
        self._namespace = namespace

    def _task_flags(self) -> Optional[Dict[str, Any]]:
        return None if self._flags == _DEFAULT_FLAGS else self._flags

    def set_flags(self, **flags: Any) -> None:
        for k, v in flags.items():
            if k not in ("retries", "timeout", "after", "follow"):
                raise TypeError("no flag %r: expected retries, timeout, after or follow" % k)
            if k in ("after", "follow"):
                v = _task_ids(v, k)
            elif k == "retries":
                v = int(v)
                if v < 0:
                    raise ValueError("retries: expected a count >= 0")
            elif v is not None and not v > 0:
                raise ValueError("timeout: expected seconds > 0 or None")
            self._flags[k] = v

    @contextlib.contextmanager
    def temp_flags(self, **flags: Any) -> Iterator[None]:
        """Flags for the tasks submitted inside the block only."""
        saved = dict(self._flags)
        self.set_flags(**flags)
        try:
            yield
        finally:
            self._flags = saved

    def apply_async(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> AsyncResult:
        """Submits f(*args, **kwargs); does not wait for it."""
        if self._namespace:
            return self.client._submit(_payload(_NS_CALL, (_fn_ref(f), args, kwargs), {}),
                                       self._task_flags(), f)
        return self.client._submit(_payload(_fn_ref(f), args, kwargs), self._task_flags(), f)

    def apply_sync(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs f(*args, **kwargs) on an engine and returns its result (blocks)."""
        return self.apply_async(f, *args, **kwargs).get()

    apply = apply_sync

    def map_async(self, f: Callable[..., Any], *seqs: Iterable[Any], chunksize: int = 1,
                  ordered: bool = True) -> AsyncMapResult:
        """f over the items of seqs (zipped), one task per chunksize items; does not
        wait. The result's ``get()`` is the list of results."""
        if chunksize < 1:
            raise ValueError("chunksize: expected 1 or more")
        items = list(zip(*seqs))
        ref = _fn_ref(f)
        submit, flags = self.client._submit, self._task_flags()
        if self._namespace:
            if chunksize == 1:
                parts = [submit(_payload(_NS_CALL, (ref, a, {}), {}), flags, f) for a in items]
            else:
                parts = [submit(_payload(_NS_MAP, (ref, items[i:i + chunksize]), {}), flags, f)
                         for i in range(0, len(items), chunksize)]
        elif chunksize == 1:
            parts = [submit(_payload(ref, a, {}), flags, f) for a in items]
        else:
            chunk_ref = "%s:_map_chunk" % __name__
            parts = [submit(_payload(chunk_ref, (ref, items[i:i + chunksize]), {}), flags, f)
                     for i in range(0, len(items), chunksize)]
        return AsyncMapResult(self.client, parts, ordered, chunksize > 1)

    map = map_async

    def map_sync(self, f: Callable[..., Any], *seqs: Iterable[Any], chunksize: int = 1,
                 ordered: bool = True) -> List[Any]:
        """The list of f over seqs' items (blocks)."""
        return self.map_async(f, *seqs, chunksize=chunksize, ordered=ordered).get()


# the engine's side of a DirectView (shoal._engine): functions by reference
_NS_CALL, _NS_MAP = "shoal._engine:_ns_call", "shoal._engine:_ns_map"
_NS_PUSH, _NS_PULL = "shoal._engine:_ns_push", "shoal._engine:_ns_pull"
_NS_EXECUTE, _NS_CLEAR = "shoal._engine:_ns_execute", "shoal._engine:_ns_clear"


def _check_targets(targets: Any, ids: List[int]) -> Any:
    """targets (an engine's number, or a list of them) as numbers of engines in ids; a
    negative int counts from the end of ids."""
    def one(t: Any) -> int:
        if not isinstance(t, int) or isinstance(t, bool):
            raise TypeError("targets: expected engine numbers (ints), not a %s"
                            % type(t).__name__)
        if t < 0:
            if -t > len(ids):
                raise IndexError("engine %d: there are %d engines" % (t, len(ids)))
            return ids[t]
        if t not in ids:
            raise IndexError("engine %d: no such engine (connected now: %s)" % (t, ids))
        return t
    if isinstance(targets, int):
        return one(targets)
    return [one(t) for t in targets]


def _partition(seq: Any, p: int, q: int) -> Any:
    """The p-th of q contiguous parts of seq, the first ones one item longer when q does
    not divide its length (ipyparallel's partitioning, of its scatter and map)."""
    n = len(seq)
    base, extra = divmod(n, q)
    lo = p * (base + 1) if p < extra else p * base + extra
    hi = lo + base + (1 if p < extra else 0)
    try:
        return seq[lo:hi]
    except TypeError:  # not sliceable
        import itertools
        return list(itertools.islice(seq, lo, hi))


def _concatenate(parts: List[Any]) -> Any:
    """gather's join (ipyparallel's): arrays into one array, lists and tuples into one
    list, anything else the list of the parts."""
    if not parts:
        return []
    first = parts[0]
    if _values._is_numpy(first):
        import numpy
        return numpy.concatenate(parts)
    if isinstance(first, (list, tuple)):
        return [x for part in parts for x in part]
    return parts


class DirectView:
    """Calls to named engines, each of which keeps a namespace of its own (ipyparallel's
    DirectView): what ``push`` and ``execute`` define there, what ``pull`` reads, and
    the globals of each function of ``__main__`` it runs (lambdas, a script's functions);
    a function of a module runs with its module's globals, as anywhere.

    ``targets``: ``"all"`` (the engines connected at each call), an engine's number (its
    calls give one result, not a list of one) or a list of them; ``block``: whether calls
    wait and return results (True) or return an :class:`AsyncResult` (False, the
    default). Each call takes ``targets=`` and ``block=`` too (but ``apply``, whose keyword
    arguments are the function's). Calls to one engine run in the order they were made.
    A call over several engines raises a :class:`CompositeError` when some of its tasks
    raised."""

    def __init__(self, client: Client, targets: Any = "all", *, block: bool = False) -> None:
        self.client = client
        self.targets = targets
        self.block = block

    def __repr__(self) -> str:
        return "<DirectView %r>" % (self.targets,)

    def _ids(self, targets: Any) -> Tuple[List[int], bool]:
        """The engines of a call, and whether it gives a single result."""
        t = self.targets if targets is None else targets
        if t == "all":
            ids = self.client.ids
            if not ids:
                raise EngineError("no engine is connected to %s" % self.client.url)
            return ids, False
        if isinstance(t, range):
            t = list(t)
        got = _check_targets(t, self.client.ids)
        return ([got], True) if isinstance(got, int) else (got, False)

    def _each(self, payloads: List[Tuple[int, List[Any]]], single: bool, block: Any,
              where: Any, chunked: bool = False,
              join: Optional[Callable[[List[Any]], Any]] = None) -> Any:
        """One task per (engine, payload), as one result."""
        parts = []
        for eng, payload in payloads:
            flags = dict(_DEFAULT_FLAGS)
            flags["engine"] = eng
            ar = self.client._submit(payload, flags, where)
            ar._engine = eng
            parts.append(ar)
        if single:
            ar = parts[0]
        else:
            ar = AsyncMapResult(self.client, parts, True, chunked, composite=True, join=join,
                                where=where)
        if self.block if block is None else block:
            return ar.get()
        return ar

    def apply_async(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> AsyncResult:
        """f(*args, **kwargs) on each engine; does not wait."""
        ids, single = self._ids(None)
        payload = _payload(_NS_CALL, (_fn_ref(f), args, kwargs), {})
        return self._each([(e, payload) for e in ids], single, False, f)  # type: ignore

    def apply_sync(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """f(*args, **kwargs) on each engine: the list of results, in the order of the
        engines (one result for a view of one engine number). Blocks."""
        return self.apply_async(f, *args, **kwargs).get()

    def apply(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """apply_sync when the view's block is True, else apply_async."""
        ar = self.apply_async(f, *args, **kwargs)
        return ar.get() if self.block else ar

    def map(self, f: Callable[..., Any], *seqs: Iterable[Any], block: Optional[bool] = None,
            targets: Any = None) -> Any:
        """f over the items of seqs (zipped), split into one contiguous part per engine
        (the first engines take one more when the count does not divide): the list of
        results in order, or an :class:`AsyncMapResult` of it."""
        ids, _ = self._ids(targets)
        items = list(zip(*seqs))
        ref = _fn_ref(f)
        payloads = []
        for i, e in enumerate(ids):
            part = _partition(items, i, len(ids))
            if part:  # an engine with nothing to do is not asked
                payloads.append((e, _payload(_NS_MAP, (ref, part), {})))
        return self._each(payloads, False, block, f, chunked=True)

    def map_async(self, f: Callable[..., Any], *seqs: Iterable[Any],
                  targets: Any = None) -> AsyncMapResult:
        return self.map(f, *seqs, block=False, targets=targets)  # type: ignore[no-any-return]

    def map_sync(self, f: Callable[..., Any], *seqs: Iterable[Any],
                 targets: Any = None) -> List[Any]:
        return self.map(f, *seqs, block=True, targets=targets)  # type: ignore[no-any-return]

    def execute(self, code: str, targets: Any = None, block: Optional[bool] = None) -> Any:
        """Runs Python source code in each engine's namespace: an AsyncResult (with block,
        once it is done; its exception raised)."""
        if not isinstance(code, str):
            raise TypeError("execute: expected source code (a str), not a %s"
                            % type(code).__name__)
        ids, single = self._ids(targets)
        payload = _payload(_NS_EXECUTE, (code,), {})
        ar = self._each([(e, payload) for e in ids], single, False, "execute")
        if self.block if block is None else block:
            ar.get()
        return ar

    def push(self, ns: Dict[str, Any], targets: Any = None,
             block: Optional[bool] = None) -> Any:
        """Defines ns's names in each engine's namespace."""
        if not isinstance(ns, dict):
            raise TypeError("push: expected a dict of names and values, not a %s"
                            % type(ns).__name__)
        ids, single = self._ids(targets)
        payload = _payload(_NS_PUSH, (ns,), {})
        return self._each([(e, payload) for e in ids], single, block, "push")

    def pull(self, names: Any, targets: Any = None, block: Optional[bool] = None) -> Any:
        """A name's value on each engine (a list of names: the list of their values)."""
        if not isinstance(names, str):
            if not isinstance(names, (list, tuple, set)) or not all(
                    isinstance(n, str) for n in names):
                raise TypeError("pull: expected a name or a list of names (str), not %r"
                                % (names,))
            names = list(names)
        ids, single = self._ids(targets)
        payload = _payload(_NS_PULL, (names,), {})
        return self._each([(e, payload) for e in ids], single, block, "pull")

    def scatter(self, key: str, seq: Any, dist: str = "b", flatten: bool = False,
                targets: Any = None, block: Optional[bool] = None) -> Any:
        """Splits seq into one contiguous part per engine (the first engines take one
        more item when the count does not divide) and defines key as its part on each;
        flatten: a part of one item is that item."""
        if dist != "b":
            raise NotImplementedError("scatter(dist=%r): shoal splits into contiguous parts "
                                      "only (dist='b')" % (dist,))
        ids, _ = self._ids(targets)
        payloads = []
        for i, e in enumerate(ids):
            part = _partition(seq, i, len(ids))
            if flatten and len(part) == 1:
                part = part[0]
            payloads.append((e, _payload(_NS_PUSH, ({key: part},), {})))
        ar = self._each(payloads, False, False, "scatter")
        if self.block if block is None else block:
            ar.get()
            return None
        return ar

    def gather(self, key: str, dist: str = "b", targets: Any = None,
               block: Optional[bool] = None) -> Any:
        """key's parts on each engine, joined: arrays into one, lists and tuples into one
        list (scatter's inverse)."""
        if dist != "b":
            raise NotImplementedError("gather(dist=%r): shoal joins contiguous parts only "
                                      "(dist='b')" % (dist,))
        ids, _ = self._ids(targets)
        payload = _payload(_NS_PULL, (key,), {})
        return self._each([(e, payload) for e in ids], False, block, "gather",
                          join=_concatenate)

    def clear(self, targets: Any = None, block: Optional[bool] = None) -> Any:
        """Empties each engine's namespace."""
        ids, single = self._ids(targets)
        payload = _payload(_NS_CLEAR, (), {})
        return self._each([(e, payload) for e in ids], single, block, "clear")

    @contextlib.contextmanager
    def sync_imports(self, local: bool = True, quiet: bool = False) -> Iterator[None]:
        """The imports written in the block (``with view.sync_imports(): import numpy``)
        are made on each engine too, into its namespace, once the block ends (blocks,
        raising what an engine's import raised); local=False: not here."""
        import builtins
        caller = sys._getframe(2)  # the with statement's frame (1 is contextmanager's)
        real = builtins.__import__
        seen: List[str] = []

        def hook(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                 level: int = 0) -> Any:
            if sys._getframe(1) is caller and level == 0:  # the block's own imports
                if fromlist:
                    seen.append("from %s import %s" % (name, ", ".join(fromlist)))
                else:
                    seen.append("import %s" % name)
                if not local:
                    if fromlist:
                        raise NotImplementedError(
                            "sync_imports(local=False) with 'from %s import ...': names "
                            "cannot be bound here to what is not imported here; expected "
                            "local=True, or view.execute(%r)" % (name, seen[-1]))
                    import types
                    return types.ModuleType(name, "imported on the engines only")
            return real(name, globals, locals, fromlist, level)
        builtins.__import__ = hook
        try:
            yield
        finally:
            builtins.__import__ = real
        for stmt in seen:
            if not quiet:
                print("%s on engine(s)" % stmt.replace("import", "importing", 1)
                      if stmt.startswith("import") else stmt + " on engine(s)")
            self.execute(stmt, block=True)

    def update(self, ns: Dict[str, Any]) -> Any:
        """push(ns) with the view's block."""
        return self.push(ns)

    def get(self, key_s: Any) -> Any:
        """pull(key_s), blocking."""
        return self.pull(key_s, block=True)

    def __getitem__(self, key: Any) -> Any:
        return self.pull(key, block=True)

    def __setitem__(self, key: str, value: Any) -> None:
        self.push({key: value})


class _Executor(concurrent.futures.Executor):
    """concurrent.futures' Executor over a view: ``submit`` returns an AsyncResult."""

    def __init__(self, view: LoadBalancedView) -> None:
        self.view = view
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> AsyncResult:
        if self._shut:
            raise RuntimeError("cannot submit after shutdown")
        return self.view.apply_async(fn, *args, **kwargs)

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],  # type: ignore[override]
            timeout: Optional[float] = None, chunksize: int = 1) -> Iterator[Any]:
        ar = self.view.map_async(fn, *iterables, chunksize=chunksize)
        end = None if timeout is None else time.monotonic() + timeout
        for p in ar._parts:
            left = None if end is None else max(0.0, end - time.monotonic())
            r = p.result(left)
            yield from (r if ar._chunked else [r])

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shut = True
        if wait:
            with self.view.client._cv:
                left = list(self.view.client._pending.values())
            concurrent.futures.wait(left)


# ---- a cluster on this host ---------------------------------------------------------

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A cluster's supervisor in a python3 process (Cluster with a launcher), so that its Python
# engines are of this interpreter and this package
_CLUSTER_BOOT = ("import sys; sys.path.insert(0, %r); from shoal import _shoal; "
                 "sys.exit(_shoal._cluster_supervise(sys.argv[1:]))" % _PKG_PARENT)


def engine_command(url: str, *, store: Optional[str] = None, name: Optional[str] = None,
                   python: Optional[str] = None) -> List[str]:
    """The command line of a Python engine for the controller at url (a unix socket or
    tcp://HOST:PORT), as Cluster runs it: ``python3 -m shoal.engine --socket URL``."""
    cmd = [python or sys.executable, "-m", "shoal.engine", "--socket", url]
    if store:
        cmd += ["--store", store]
    if name:
        cmd += ["--name", name]
    return cmd


def _launched(call: Any, *args: Any, **kw: Any) -> Any:
    """A call of shoal's clusters (shoal/cluster.h), its failure an EngineError that says
    what the launchers and the engines said."""
    try:
        return call(*args, **kw)
    except _shoal.NotFound:
        raise
    except _shoal.Error as e:
        raise EngineError(str(e)) from None


class Cluster:
    """A controller and n Python engines, started on entry (or ``start()``) and all stopped
    on exit (or ``stop()``), also when the block raises. scheme: pure, lru, leastload,
    weighted or twobin. store: True for a store in this process (half the memory at most),
    or a store's socket (or shoal.Store): engines and the cluster's clients then pass arrays
    and tensors by reference through it.

    launcher: None (the default) runs the controller in this process and the engines as
    its children; "local", "mpi", "ssh" or "slurm" start them as ``shoal cluster start``
    does: a supervisor process keeps the controller, the engines come through mpiexec, ssh
    to each host of ``hosts`` (a file: a host a line, optionally its count of engines), or
    one Slurm job, and ``stop`` ends them wherever they run. ``tcp`` ("HOST:PORT", port 0:
    any) serves engines of other hosts (needed by ssh); their secret is
    ``$SHOAL_SECRET_FILE``/``$SHOAL_SECRET`` when set, else a fresh one. ``name`` names
    the cluster (default: one of this process's own)."""

    def __init__(self, n: int = 4, scheme: str = "leastload", *,
                 engine_timeout: float = 30.0, store: Any = None,
                 launcher: Optional[str] = None, hosts: Optional[str] = None,
                 tcp: Optional[str] = None, name: Optional[str] = None) -> None:
        if n < 0:
            raise ValueError("n: expected a count of engines >= 0")
        if launcher not in (None, "local", "mpi", "ssh", "slurm"):
            raise ValueError("launcher %r: expected None, 'local', 'mpi', 'ssh' or 'slurm'"
                             % (launcher,))
        if launcher is not None and store is not None:
            raise ValueError("store= goes with launcher=None (engines of this host)")
        self.n = n
        self.scheme = scheme
        self.engine_timeout = engine_timeout
        self.launcher = launcher
        self.hosts = hosts
        self.tcp = tcp
        self.name = name or "py%d-%x" % (os.getpid(), id(self) & 0xffffff)
        self._store_arg = store
        self.store_socket: Optional[str] = None
        self._own_store: Any = None
        self.controller: Any = None
        self._url: Optional[str] = None
        self.engines: List[subprocess.Popen] = []  # type: ignore[type-arg]
        self._clients: List[Client] = []

    @property
    def url(self) -> str:
        if self._url is not None:
            return self._url
        if self.controller is None:
            raise RuntimeError("the cluster is not started")
        return str(self.controller.socket)

    def status(self) -> Dict[str, Any]:
        """With a launcher, what the cluster's supervisor says of it (blocks: a round trip):
        ``controller``, ``tcp``, ``secret_file``, ``store``, ``engines`` (registered),
        ``asked``, ``supervisor_pid`` and ``text`` (all of it, for people)."""
        if self.launcher is None:
            raise RuntimeError("status() is for a cluster with a launcher")
        return _launched(_shoal.cluster_status, name=self.name)

    def start(self) -> "Cluster":
        """Starts the controller and the engines; returns once every engine is connected
        (blocks: at most engine_timeout seconds, then ``TimeoutError`` (launcher None) or
        ``EngineError`` naming the engines that did not come and why, everything
        stopped)."""
        if self.launcher is not None:
            info = _launched(
                _shoal.cluster_start, self.n, name=self.name, launcher=self.launcher,
                hosts=os.path.abspath(self.hosts) if self.hosts else None, tcp=self.tcp,
                scheme=self.scheme, timeout=self.engine_timeout, python=sys.executable,
                pythonpath=_PKG_PARENT, supervisor=[sys.executable, "-c", _CLUSTER_BOOT])
            self._url = info["controller"]
            return self
        self.controller = _shoal.Controller(scheme=self.scheme)
        s = self._store_arg
        if s is True:
            from . import Store
            half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
            self._own_store = Store(size=half)
            self.store_socket = str(self._own_store.socket)
        elif s:
            self.store_socket = str(getattr(s, "socket", s))
        try:
            self.add_engines(self.n)
            with Client(self.url) as c:
                c.wait_for_engines(self.n, self.engine_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def add_engines(self, n: int) -> None:
        """Starts n more engines (they connect on their own: see wait_for_engines). With a
        launcher, through it, and returns once they registered (blocks)."""
        if self.launcher is not None:
            _launched(_shoal.cluster_add, n, name=self.name, launcher=self.launcher,
                      hosts=os.path.abspath(self.hosts) if self.hosts else None,
                      timeout=self.engine_timeout)
            self.n += n
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [_PKG_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        for _ in range(n):
            self.engines.append(subprocess.Popen(
                engine_command(self.url, store=self.store_socket) + ["--die-with-parent"],
                env=env, stdin=subprocess.DEVNULL))

    def client(self) -> Client:
        """A client of this cluster's controller (closed when the cluster stops)."""
        c = Client(self.url, store=self.store_socket)
        self._clients.append(c)
        return c

    def start_and_connect_sync(self) -> Client:
        """start(), then a client of it (ipyparallel's name)."""
        self.start()
        return self.client()

    def stop_cluster_sync(self) -> None:
        """stop() (ipyparallel's name)."""
        self.stop()

    def stop(self) -> None:
        """Closes its clients, ends its engines (SIGTERM, then SIGKILL after 5 s) and
        its controller."""
        for c in self._clients:
            c.close()
        self._clients = []
        if self._url is not None:
            self._url = None
            try:
                _launched(_shoal.cluster_stop, name=self.name)
            except _shoal.NotFound:  # no such cluster: it ended already
                pass
        for p in self.engines:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.engines:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.engines = []
        if self.controller is not None:
            self.controller.close()
            self.controller = None
        if self._own_store is not None:
            self._own_store.close()
            self._own_store = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
