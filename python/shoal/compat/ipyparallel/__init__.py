"""ipyparallel's names on shoal's task farm: a program written against ipyparallel runs
with its import changed only::

    import shoal.compat.ipyparallel as ipp      # was: import ipyparallel as ipp
    from shoal.compat.ipyparallel.error import RemoteError

    with ipp.Cluster(n=4) as rc:                # a controller and 4 Python engines
        dview = rc[:]
        dview.push(dict(a=1))
        dview.scatter("x", range(16))
        dview.execute("y = [a + i for i in x]")
        print(dview.gather("y", block=True))
        print(rc.load_balanced_view().map_sync(lambda v: v * v, range(8)))

What it covers, each as ipyparallel documents it: ``Cluster`` (``n``,
``start_and_connect_sync``, ``start_cluster_sync``, ``connect_client_sync``,
``stop_cluster_sync``, ``with Cluster(n) as rc`` giving the client; engines on this host;
``cluster_id`` names a cluster that ``Client(cluster_id=...)`` finds), ``Client``
(``Client()``: the cluster ``shoal cluster start`` runs, see
:func:`shoal.tasks.default_cluster_url`; ``Client(cluster_id=NAME)``; ``ids``,
``rc[...]``, ``direct_view``, ``load_balanced_view``, ``wait_for_engines``, ``wait``,
``close``), ``DirectView`` (``targets``, ``block``, ``apply``/``apply_async``/``apply_sync``,
``map``/``map_async``/``map_sync``, ``push``, ``pull``, ``view[name]``, ``scatter``/``gather``
with ``dist='b'``, ``execute``, ``clear``, ``sync_imports``), ``LoadBalancedView``
(``block``, ``apply*``, ``map*`` with ``chunksize`` and ``ordered``, ``set_flags``/
``temp_flags`` of ``retries``, ``timeout``, ``after``, ``follow``), ``AsyncResult``
(``get``, ``ready``, ``wait``, ``successful``, ``elapsed``, ``progress``, ``len``,
``wait_interactive``, ``msg_ids``; a concurrent.futures.Future too), the errors
(``RemoteError``, ``CompositeError``, ``EngineError``, ``DependencyError``, ``TaskTimeout``,
``TimeoutError``, also as ``ipyparallel.error``), and the ``interactive`` and ``require``
decorators. Functions of ``__main__`` run with the engine's namespace as their globals,
in both views, as in ipyparallel.

Where it differs, on purpose: a remote exception is a ``RemoteError`` that is also of
its own class when that is a builtin or a class of a module imported here, so ``except
ZeroDivisionError`` catches it as well (ipyparallel raises a ``RemoteError`` only);
``str()`` of one is its message. ``scatter(block=True)`` raises an engine's failure
(ipyparallel's waits and drops it). ``require``'s modules are imported by whichever engine
runs the task: one that lacks them fails it with ``ImportError`` (ipyparallel's scheduler
passes it to another engine).

What it does not cover, each raising ``NotImplementedError`` that names shoal's call
instead: profiles, connection files and ssh tunnels (``Client(url_file=...json,
profile=...)``: ``shoal.tasks.Client(url)``), launchers other than this host's
(``Cluster(engines="mpi")``: ``shoal.tasks.Cluster(launcher=...)``), the async Cluster
calls, ``track``, ``return_exceptions``, ``silent=False``, ``dist='r'``, widget progress
bars, ``depend``, and the calls listed in ``_NOT_COVERED`` below (results' history,
aborting, queue status, magics, dask, ``imap``, ``BroadcastView``, ...). Any other name
ipyparallel has and this module lacks raises ``AttributeError``.
"""
from __future__ import annotations

import os
import sys

from ... import tasks as _st
from ...tasks import AsyncMapResult, AsyncResult, CompositeError, RemoteError
from . import error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional

__all__ = [
    "AsyncMapResult",
    "AsyncResult",
    "Client",
    "Cluster",
    "CompositeError",
    "DirectView",
    "LoadBalancedView",
    "RemoteError",
    "error",
    "interactive",
    "require",
]

__version__ = "7.1.0"  # the ipyparallel whose documented API this follows (Debian 12's)

# ipyparallel's calls this module does not cover, with what to use in shoal instead
_NOT_COVERED: Dict[str, str] = {
    "abort": "AsyncResult.cancel() (a task not yet sent to an engine)",
    "activate": "nothing: shoal has no IPython magics (call the view's methods)",
    "become_dask": "shoal.tasks.Client.executor() (a concurrent.futures.Executor)",
    "become_distributed": "shoal.tasks.Client.executor() (a concurrent.futures.Executor)",
    "broadcast_view": "shoal.tasks.Client.direct_view()",
    "db_query": "the AsyncResults themselves: shoal keeps no results' database",
    "get_result": "the AsyncResult the call returned",
    "history": "the AsyncResults themselves: shoal keeps no results' history",
    "hub_history": "the AsyncResults themselves: shoal keeps no results' history",
    "imap": "LoadBalancedView.map(...) and iterating over its AsyncMapResult",
    "metadata": "AsyncResult.elapsed (shoal keeps no per-task metadata)",
    "outstanding": "AsyncResult.ready() of the calls' results",
    "purge_everything": "nothing: shoal drops a result once it is taken",
    "purge_results": "nothing: shoal drops a result once it is taken",
    "queue_status": "shoal.tasks.Client.stat()",
    "result_status": "AsyncResult.ready()",
    "results": "the AsyncResults themselves: shoal keeps no results' dict",
    "resubmit": "set_flags(retries=N) before the call (shoal resends a task whose engine "
                "died)",
    "run": "DirectView.execute(open(path).read())",
    "send_signal": "shoal.tasks.Cluster.stop() (or signals to its engines' processes)",
    "shutdown": "shoal.tasks.Cluster.stop() (or `shoal cluster stop`)",
    "spin": "nothing: shoal's results come by themselves",
    "spin_thread": "nothing: shoal's results come by themselves",
    "track": "nothing: shoal copies arguments when a call is made",
    "use_cloudpickle": "nothing: shoal sends functions by cloudpickle when they cannot be "
                       "imported",
    "use_dill": "nothing: shoal sends functions by cloudpickle when they cannot be imported",
    "use_pickle": "nothing: shoal sends functions by reference when they can be imported",
    "wait_for_output": "nothing: an engine's output is not sent back",
}


def _not_covered(owner: str, name: str) -> Any:
    if name in _NOT_COVERED:
        raise NotImplementedError("ipyparallel's %s.%s is not covered by shoal.compat."
                                  "ipyparallel: use %s" % (owner, name, _NOT_COVERED[name]))
    raise AttributeError("%r object has no attribute %r" % (owner, name))


def _refuse(what: str, instead: str) -> None:
    raise NotImplementedError("ipyparallel's %s is not covered by shoal.compat.ipyparallel: "
                              "use %s" % (what, instead))


def _timeout(t: Optional[float]) -> Optional[float]:
    """ipyparallel's -1 (and any negative): no bound."""
    return None if t is None or t < 0 else t


class DirectView(_st.DirectView):
    __doc__ = _st.DirectView.__doc__

    def map(self, f: Callable[..., Any], *seqs: Iterable[Any], block: Optional[bool] = None,
            track: bool = False, return_exceptions: bool = False,
            targets: Any = None) -> Any:
        if track:
            _refuse("map(track=True)", "map() (shoal copies arguments when a call is made)")
        if return_exceptions:
            _refuse("map(return_exceptions=True)",
                    "map() and CompositeError.errors (each task's exception)")
        return super().map(f, *seqs, block=block, targets=targets)

    def map_async(self, f: Callable[..., Any], *seqs: Iterable[Any], **kw: Any) -> Any:
        if "block" in kw:
            raise TypeError("map_async doesn't take a `block` keyword argument.")
        return self.map(f, *seqs, block=False, **kw)

    def map_sync(self, f: Callable[..., Any], *seqs: Iterable[Any], **kw: Any) -> Any:
        if "block" in kw:
            raise TypeError("map_sync doesn't take a `block` keyword argument.")
        return self.map(f, *seqs, block=True, **kw)

    def execute(self, code: str, silent: bool = True, targets: Any = None,
                block: Optional[bool] = None) -> Any:
        if not silent:
            _refuse("execute(silent=False)", "execute() (an engine's output is not sent back)")
        return super().execute(code, targets=targets, block=block)

    def push(self, ns: Dict[str, Any], targets: Any = None, block: Optional[bool] = None,
             track: Optional[bool] = None) -> Any:
        if track:
            _refuse("push(track=True)", "push() (shoal copies arguments when a call is made)")
        return super().push(ns, targets=targets, block=block)

    def scatter(self, key: str, seq: Any, dist: str = "b", flatten: bool = False,
                targets: Any = None, block: Optional[bool] = None,
                track: Optional[bool] = None) -> Any:
        if track:
            _refuse("scatter(track=True)", "scatter() (shoal copies arguments when a call "
                    "is made)")
        return super().scatter(key, seq, dist, flatten, targets=targets, block=block)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _not_covered("DirectView", name)


class LoadBalancedView(_st.LoadBalancedView):
    """ipyparallel's LoadBalancedView: tasks to whichever engine the controller picks,
    ``block`` as a DirectView's, functions of ``__main__`` over the engine's namespace."""

    def __init__(self, client: _st.Client, *, block: bool = False) -> None:
        super().__init__(client, namespace=True)
        self.block = block

    def apply(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ar = self.apply_async(f, *args, **kwargs)
        return ar.get() if self.block else ar

    def map(self, f: Callable[..., Any], *seqs: Iterable[Any],  # type: ignore[override]
            block: Optional[bool] = None, chunksize: int = 1, ordered: bool = True,
            return_exceptions: bool = False) -> Any:
        if return_exceptions:
            _refuse("map(return_exceptions=True)",
                    "map() and each part's exception (AsyncMapResult._parts)")
        ar = self.map_async(f, *seqs, chunksize=chunksize, ordered=ordered)
        return ar.get() if (self.block if block is None else block) else ar

    def set_flags(self, **flags: Any) -> None:
        if "block" in flags:
            self.block = bool(flags.pop("block"))
        if flags.get("targets") is not None:
            _refuse("set_flags(targets=...)", "a DirectView (client[targets])")
        flags.pop("targets", None)
        super().set_flags(**flags)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _not_covered("LoadBalancedView", name)


class Client(_st.Client):
    """ipyparallel's Client: ``Client()`` connects to the running cluster named
    ``default`` (as ``shoal cluster start`` makes), ``Client(cluster_id=NAME)`` to another
    by name, ``Client(url)`` to a shoal controller's url."""

    def __init__(self, url_file: Optional[str] = None, profile: Optional[str] = None,
                 cluster_id: Optional[str] = None, timeout: float = 10, **kw: Any) -> None:
        if profile is not None or any(v is not None for v in kw.values()):
            what = ["profile"] if profile is not None else []
            what += [k for k, v in kw.items() if v is not None]
            _refuse("Client(%s=...)" % "=..., ".join(what),
                    "Client(), Client(cluster_id=NAME) or Client(url) of a shoal controller")
        if url_file is not None and url_file.endswith(".json"):
            _refuse("Client(url_file=connection file)", "Client(url) of a shoal controller "
                    "(shoal.tasks.Cluster(...).url, `shoal cluster status`)")
        super().__init__(url_file, timeout, cluster=cluster_id)

    def __getitem__(self, key: Any) -> DirectView:  # type: ignore[override]
        v = super().__getitem__(key)
        return DirectView(self, v.targets)

    def direct_view(self, targets: Any = "all", **kw: Any) -> DirectView:  # type: ignore
        return DirectView(self, targets, block=kw.pop("block", False))

    def load_balanced_view(self, targets: Any = None,  # type: ignore[override]
                           **kw: Any) -> LoadBalancedView:
        if targets is not None:
            _refuse("load_balanced_view(targets=...)", "a DirectView (client[targets])")
        return LoadBalancedView(self, block=kw.pop("block", False))

    def wait_for_engines(self, n: Optional[int] = None,  # type: ignore[override]
                         timeout: Optional[float] = -1, block: bool = True) -> None:
        if n is None:
            _refuse("wait_for_engines() without n", "wait_for_engines(n)")
        if not block:
            _refuse("wait_for_engines(block=False)", "wait_for_engines(n) in a thread")
        super().wait_for_engines(n, _timeout(timeout))

    def wait(self, jobs: Any = None, timeout: Optional[float] = -1) -> bool:
        """Waits until these AsyncResults (None: every one of this client not done) are
        done; whether they are, timeout seconds at most (-1: no bound)."""
        import concurrent.futures
        if jobs is None:
            with self._cv:
                jobs = list(self._pending.values())
        elif isinstance(jobs, AsyncResult):
            jobs = [jobs]
        for j in jobs:
            if not isinstance(j, AsyncResult):
                _refuse("Client.wait(msg ids)", "Client.wait(AsyncResults)")
        t = _timeout(timeout)
        done, left = concurrent.futures.wait(jobs, timeout=t)
        return not left

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _not_covered("Client", name)


class Cluster(_st.Cluster):
    """ipyparallel's Cluster: a controller and n Python engines of this host (n None: one
    per CPU). ``with Cluster(n=4) as rc`` gives a client, and stops everything at the
    end; ``cluster_id`` names it, for ``Client(cluster_id=...)`` of other processes (it
    then runs under a supervisor process, as ``shoal cluster start`` does)."""

    def __init__(self, n: Optional[int] = None, engines: Optional[str] = None,
                 cluster_id: Optional[str] = None, **kw: Any) -> None:
        if engines not in (None, "local", "Local"):
            _refuse("Cluster(engines=%r)" % (engines,), "shoal.tasks.Cluster(n, launcher="
                    "'mpi', 'ssh' or 'slurm', hosts=...)")
        if kw:
            _refuse("Cluster(%s=...)" % "=..., ".join(sorted(kw)),
                    "shoal.tasks.Cluster(n, scheme=..., launcher=..., tcp=..., store=...)")
        super().__init__((os.cpu_count() or 1) if n is None else n,
                         launcher="local" if cluster_id else None, name=cluster_id)
        self._context_client: Optional[Client] = None

    def client(self) -> Client:
        c = Client(self.url)
        self._clients.append(c)
        return c

    def start_and_connect_sync(self) -> Client:  # type: ignore[override]
        self.start()
        return self.client()

    def start_cluster_sync(self) -> "Cluster":
        return self.start()

    def connect_client_sync(self) -> Client:
        return self.client()

    def __enter__(self) -> Client:  # type: ignore[override]
        self._context_client = self.start_and_connect_sync()
        return self._context_client

    def __exit__(self, *exc: Any) -> None:
        self._context_client = None
        self.stop()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ("start_and_connect", "start_cluster", "stop_cluster", "connect_client",
                    "start_controller", "start_engines", "stop_engines"):
            _refuse("Cluster.%s (async)" % name, "the _sync calls, or shoal.tasks.Cluster's "
                    "start()/stop()")
        return _not_covered("Cluster", name)


def interactive(f: Callable[..., Any]) -> Callable[..., Any]:
    """Makes f run as if defined in ``__main__``: with the engine's namespace as its
    globals."""
    import types
    if isinstance(f, types.FunctionType):
        f.__module__ = "__main__"
    return f


class _Required:
    """f, with modules imported and objects defined in the engine's namespace first
    (what ``require`` makes; by reference, f inside by value when it must)."""

    def __init__(self, f: Callable[..., Any], modules: List[str],
                 objects: Dict[str, Any]) -> None:
        self.f = f
        self.modules = modules
        self.objects = objects
        self.__name__ = getattr(f, "__name__", "required")
        self.__qualname__ = getattr(f, "__qualname__", self.__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ... import _engine
        if not _engine._IN_ENGINE:  # called here: as itself
            return self.f(*args, **kwargs)
        import importlib
        ns = _engine._namespace()
        for m in self.modules:
            importlib.import_module(m)
            top = m.split(".")[0]
            ns[top] = sys.modules[top]
        for k, v in self.objects.items():
            ns[k] = _engine._in_namespace(v)
        return _engine._in_namespace(self.f)(*args, **kwargs)


def require(*objects: Any, **mapping: Any) -> Callable[[Callable[..., Any]], _Required]:
    """ipyparallel's require: modules (by name or as modules) are imported, functions
    (by their name) and keyword objects defined in the engine's namespace, before the
    decorated function runs there."""
    import types
    modules, defs = [], dict(mapping)
    for o in objects:
        if isinstance(o, str):
            modules.append(o)
        elif isinstance(o, types.ModuleType):
            modules.append(o.__name__)
        elif callable(o) and hasattr(o, "__name__"):
            defs[o.__name__] = o
        else:
            raise TypeError("require: expected module names, modules or functions, not %r"
                            % (o,))

    def deco(f: Callable[..., Any]) -> _Required:
        return _Required(f, modules, defs)
    return deco


def depend(*args: Any, **kwargs: Any) -> Any:
    _refuse("depend", "a function that checks for itself, or set_flags(after=..., "
            "follow=...) for dependencies on other tasks")


TimeoutError = error.TimeoutError
EngineError = error.EngineError
DependencyError = error.DependencyError
TaskTimeout = error.TaskTimeout
