"""shoal from Python: a shared-memory object store that many processes read without
copying, over the C library libshoal (the ``_shoal`` extension module).

    import shoal
    with shoal.connect() as client:              # shoald's default socket
        client.put(model.state_dict(), name="sd15", persist=True)
        weights = client.get("sd15", framework="torch")   # tensors mapping the store

Objects are immutable once put: a get maps the store's pages read-only, in one round
trip, and the object stays referenced in the store while any array, tensor or view of
it lives. numpy and torch are optional: a call that needs one says which is missing.
"""
from __future__ import annotations

import os
import sys
# typing is for type checkers only (annotations are strings here): importing it takes
# 15 ms, which an isolated extension's start would pay.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from . import _shoal
from ._shoal import (
    Closed,
    Error,
    InvalidInput,
    NameTaken,
    NotFound,
    StoreFull,
    Timeout,
    __version__,
    default_socket,
)

__all__ = [
    "CONNECTION_TIMEOUT",
    "Client",
    "Closed",
    "Error",
    "InvalidInput",
    "NameTaken",
    "NotFound",
    "ObjectID",
    "Store",
    "StoreFull",
    "Timeout",
    "__version__",
    "connect",
    "default_socket",
    "load_file",
]

if TYPE_CHECKING:
    Key = Union[int, str]


class _ConnectionTimeout:
    """The default of every call's ``timeout=``: the timeout given to ``connect``."""

    def __repr__(self) -> str:
        return "CONNECTION_TIMEOUT"


#: A call's ``timeout=`` when none is given: the connection's (``connect(timeout=)``).
CONNECTION_TIMEOUT = _ConnectionTimeout()
#: Seconds, ``None`` for no bound, or the connection's.
if TYPE_CHECKING:
    CallTimeout = Union[float, None, _ConnectionTimeout]


def _tmo(timeout: CallTimeout) -> Dict[str, Any]:
    return {} if timeout is CONNECTION_TIMEOUT else {"timeout": timeout}

# numpy's dtype names and the store's; bfloat16 goes through torch.
_NUMPY_TO_STORE = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
}
_TORCH_TO_STORE = {
    "torch.float64": "F64",
    "torch.float32": "F32",
    "torch.float16": "F16",
    "torch.bfloat16": "BF16",
    "torch.int64": "I64",
    "torch.int32": "I32",
    "torch.int16": "I16",
    "torch.int8": "I8",
    "torch.uint8": "U8",
    "torch.bool": "BOOL",
}


# Store dtypes that older torch lacks, and the name torch gives them.
_TORCH_LACKS = {"U16": "uint16", "U32": "uint32", "U64": "uint64",
                "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


class ObjectID(int):
    """The id of an object in a store: an int, shown in hex as the CLI shows it."""

    def __repr__(self) -> str:
        return "ObjectID(%016x)" % int(self)

    __str__ = __repr__


def _need(module: str, why: str) -> Any:
    """Imports numpy or torch, or says which package is missing and what for."""
    try:
        return __import__(module)
    except ImportError:
        pkg = {"numpy": "python3-numpy", "torch": "python3-torch"}.get(module, module)
        raise ImportError("%s needs %s (Debian: apt-get install %s)" % (why, module, pkg)) from None


def _is_numpy(value: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.ndarray, np.generic))


def _is_torch(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _is_tensor_dict(value: Any) -> bool:
    """A dict of arrays or tensors with str keys (a state dict): a tensor_dict."""
    return (isinstance(value, dict) and bool(value)
            and all(isinstance(k, str) and (_is_numpy(v) or _is_torch(v))
                    for k, v in value.items()))


def _marked(metadata: Optional[Mapping[str, str]], torch_made: bool) -> Optional[Dict[str, str]]:
    """The metadata of a put, with torch's mark (safetensors' ``format: pt``)."""
    meta = dict(metadata) if metadata else {}
    if torch_made:
        meta.setdefault("format", "pt")
    return meta or None


def _as_tensor(value: Any, what: str) -> Tuple[Any, str, Tuple[int, ...]]:
    """A numpy array or a torch tensor as (C-contiguous buffer, store dtype, shape)."""
    if _is_torch(value):
        torch = sys.modules["torch"]
        t = value.detach()
        if t.device.type != "cpu":
            raise InvalidInput("%s is on %s: only CPU tensors go into the store" % (what, t.device))
        dtype = _TORCH_TO_STORE.get(str(t.dtype))
        if dtype is None:
            raise InvalidInput("%s has dtype %s, which the store does not keep" % (what, t.dtype))
        t = t.contiguous()  # one copy when it is not
        # numpy has no bfloat16: the same bits as int16, named BF16 in the store
        arr = (t.view(torch.int16) if dtype == "BF16" else t).numpy()
        return arr, dtype, tuple(t.shape)
    if _is_numpy(value):
        np = sys.modules["numpy"]
        dtype = _NUMPY_TO_STORE.get(value.dtype.name)
        if dtype is None:
            raise InvalidInput(
                "%s has numpy dtype %s, which the store does not keep" % (what, value.dtype)
            )
        arr = np.asarray(value)  # a scalar (np.float32(1)) is a 0-d tensor
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        return arr, dtype, tuple(arr.shape)
    raise InvalidInput(
        "%s is a %s: expected a numpy array or a torch tensor" % (what, type(value).__name__)
    )


class Client:
    """A connection to a store. One connection serves one thread at a time (calls from
    several threads take turns); after ``os.fork()`` connect again in the child.

    Every call that talks to the store blocks, at most ``timeout`` seconds, with the
    GIL released."""

    def __init__(self, socket: Optional[str] = None, *, timeout: Optional[float] = 30.0) -> None:
        self.socket = socket or default_socket()
        self._timeout = timeout
        try:
            self._c = _shoal.Client(self.socket, timeout)
        except NotFound as e:  # no socket there: no store, not a missing object
            raise Closed(str(e)) from None

    # -- putting ---------------------------------------------------------------
    def put(
        self,
        value: Any,
        name: Optional[str] = None,
        *,
        persist: bool = False,
        replace: bool = False,
        metadata: Optional[Mapping[str, str]] = None,
        timeout: CallTimeout = CONNECTION_TIMEOUT,
    ) -> ObjectID:
        """Puts value into the store, sealed, and returns its id:

        - a numpy array or a CPU torch tensor as a tensor, and a dict of them (a torch
          ``state_dict()``) as a tensor_dict, written once, straight into shared memory,
          with optional string ``metadata``; torch's are marked (``format: pt``, as
          safetensors marks torch files) so that ``get`` gives torch back;
        - bytes-like data (bytes, bytearray, memoryview) as a blob;
        - any other value shoal passes (None, bool, int, float, str, list, tuple, set,
          dict, arrays inside them, registered types: see shoal.isolate) as a value,
          kept as bytes in shoal's encoding (never pickled), got back as a copy.

        ``name`` binds it (``replace`` rebinds a taken name); ``persist`` makes it
        outlive this connection.

        Like every call, it waits for the store at most ``timeout`` seconds (``None``:
        no bound; by default the connection's) and then raises ``Timeout``; Ctrl-C
        interrupts it. Either closes the connection (the store's answer may still
        come): connect again."""
        t = _tmo(timeout)
        if _is_tensor_dict(value):
            items = []
            torch_made = False
            for key, item in value.items():
                buf, dtype, shape = _as_tensor(item, "the tensor %r" % key)
                torch_made = torch_made or _is_torch(item)
                items.append((key, buf, dtype, shape))
            meta = _marked(metadata, torch_made)
            return ObjectID(self._c.put_tensor_dict(items, meta, name, persist, replace, **t))
        if _is_numpy(value) or _is_torch(value):
            buf, dtype, shape = _as_tensor(value, "the value")
            return ObjectID(self._c.put_tensor(buf, dtype, shape, name, persist, replace,
                                               metadata=_marked(metadata, _is_torch(value)),
                                               **t))
        if metadata:
            raise InvalidInput("metadata goes with a tensor or a dict of tensors, not a %s"
                               % type(value).__name__)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return ObjectID(self._c.put_bytes(value, name, persist, replace, **t))
        from . import _values  # noqa: F401  (its hooks encode tuples, sets, torch...)
        try:
            data = _shoal.pack_value(value)
        except TypeError as e:
            raise InvalidInput(
                "cannot put a %s: expected a tensor, a dict of tensors, bytes-like data or "
                "a value shoal passes (%s)" % (type(value).__name__, e)) from None
        return ObjectID(self._c.put_bytes(data, name, persist, replace, type="value", **t))

    # -- getting ---------------------------------------------------------------
    def migrate(self, key: Key, source: str, *, streams: int = 0,
                progress: Optional[Callable[[int, int], None]] = None,
                timeout: CallTimeout = CONNECTION_TIMEOUT) -> ObjectID:
        """Copies the object ``key`` (a name or an id) of another host's store into this
        one and returns its id (the same as there). ``source`` is that store's
        ``HOST:PORT`` (shoald ``--peer``); both daemons must know the same secret
        (``$SHOAL_SECRET_FILE`` or ``$SHOAL_SECRET``). The store pulls the object into its
        own shared memory in one region, keeps its id, signature and name (when free
        here), and later gets here are local. Many asks for one object share one
        transfer; an object already here costs nothing. ``streams``: TCP links at once (0:
        the store's choice). ``progress(received, total)`` is called about every 100 ms
        while bytes come, in this thread (an exception it raises is raised here once the
        copy ends). Blocks until the copy is here, at most ``timeout``."""
        return ObjectID(self._c.migrate(key, source, streams, progress=progress,
                                        **_tmo(timeout)))

    def get(self, key: Optional[Key] = None, *, name: Optional[str] = None,
            framework: Optional[str] = "auto", copy: bool = False,
            fetch: bool = False, source: Optional[str] = None,
            progress: Optional[Callable[[int, int], None]] = None,
            timeout: CallTimeout = CONNECTION_TIMEOUT) -> Any:
        """Gets an object by id or name (``key``, or ``name=``), mapped read-only without a
        copy: a tensor as a numpy array (not writable) or a torch tensor, a tensor_dict
        as a dict of those: ``framework="auto"`` gives torch for what was put from torch
        (``format: pt``, a safetensors file of torch's too) when torch is installed, numpy
        otherwise; ``"numpy"`` or ``"torch"`` choose; ``None`` gives shoal's own tensor
        (which numpy and torch read through the buffer protocol and DLPack). A blob comes
        as a read-only memoryview, a value (a plain Python value put) as a copy of it. The
        object stays referenced in the store while any of them lives.

        torch has no read-only tensors: they map the object copy-on-write, so a write
        (``t.add_(1)``) makes the pages it touches this tensor's own (the first write to
        a page copies it); the store's object, other gets and other processes keep
        reading the original bytes, and a tensor never written costs no copy.
        ``copy=True`` gives private copies at once.

        An object of another host's store is copied into this one only with
        ``fetch=True`` (a migration: the copy may be large), from ``source``
        (``HOST:PORT``, shoald ``--peer``) or, without it, from where the store's cluster
        registry says it is (shoald ``--meta etcd``, or ``--peers-file``); then gets are
        local. Without ``fetch``, ``NotFound`` says in which store the object is.
        ``progress``: as for ``migrate``, with ``source``. ``timeout``: as for ``put``,
        the copy included."""
        if name is not None:
            if key is not None:
                raise InvalidInput("get takes a key or name=, not both")
            key = name
        if key is None:
            raise InvalidInput("get needs the object: its id or name (or name=)")
        if framework not in ("auto", "numpy", "torch", None):
            raise InvalidInput("framework %r: expected 'auto', 'numpy', 'torch' or None"
                               % (framework,))
        if source is not None and not fetch:
            raise InvalidInput("source=%r goes with fetch=True" % (source,))
        if progress is not None and source is None:
            raise InvalidInput("progress goes with fetch=True and a source")
        if fetch and source is not None:
            self.migrate(key, source, progress=progress, timeout=timeout)
        # without fetch the store copies nothing from elsewhere (get_local)
        call = self._c.get if fetch else self._c.get_local
        obj = call(key) if timeout is CONNECTION_TIMEOUT else call(key, timeout=timeout)
        if obj.type == "value":
            try:
                from . import _values  # noqa: F401  (its hooks decode tuples, sets...)
                return _shoal.unpack_value(obj.blob(0))
            finally:
                obj.release()
        if framework == "auto":
            framework = "torch" if (obj.type in ("tensor", "tensor_dict")
                                    and obj.fields().get("format") == "pt"
                                    and _have_torch()) else "numpy"
        if framework == "torch" and not copy and obj.type != "blob":
            # torch has no read-only tensors: they map the object copy-on-write, so
            # that a write (t.add_(1)) makes private pages rather than a SIGSEGV
            try:
                view = obj.cow()
            finally:
                obj.release()
            obj = view
        try:
            if obj.type == "tensor":
                return self._convert(obj.tensor(), framework, copy)
            if obj.type == "tensor_dict":
                if framework == "torch":
                    return self._torch_dict(obj, copy)
                return {name: self._convert(t, framework, copy) for name, t in obj.tensors()}
            view = memoryview(obj.blob(0))
            return bytes(view) if copy else view
        finally:
            obj.release()  # the views hold it until they go

    @staticmethod
    def _torch_dict(obj: Any, copy: bool) -> Dict[str, Any]:
        # One C call for the whole dict: a thousand tensors in a few ms.
        torch = _need("torch", "framework='torch'")
        refuse = {dt: "torch %s has no %s: get it with framework='numpy'"
                  % (torch.__version__, name)
                  for dt, name in _TORCH_LACKS.items() if not hasattr(torch, name)}
        from_dlpack = getattr(torch._C, "_from_dlpack", None) or torch.utils.dlpack.from_dlpack
        out = obj.dlpack_dict(from_dlpack, lambda cap: from_dlpack(cap).view(torch.bool),
                              refuse)
        if copy:
            return {k: v.clone() for k, v in out.items()}
        return out

    @staticmethod
    def _convert(t: Any, framework: Optional[str], copy: bool) -> Any:
        if framework is None:
            return t
        if framework == "torch":
            torch = _need("torch", "framework='torch'")
            if t.dtype in _TORCH_LACKS and not hasattr(torch, _TORCH_LACKS[t.dtype]):
                raise InvalidInput(
                    "torch %s has no %s (the store's %s): get it with framework='numpy'"
                    % (torch.__version__, _TORCH_LACKS[t.dtype], t.dtype))
            out = torch.from_dlpack(t)
            if t.dtype == "BOOL":  # DLPack 0.6 carries bools as uint8
                out = out.view(torch.bool)
            return out.clone() if copy else out
        np = _need("numpy", "framework='numpy'")
        if t.dtype == "BF16":
            raise InvalidInput(
                "numpy has no bfloat16: get this tensor with framework='torch'"
            )
        return np.array(t) if copy else np.asarray(t)

    # -- names and the rest ----------------------------------------------------
    def name(self, key: Key, name: str, *, replace: bool = False,
             timeout: CallTimeout = CONNECTION_TIMEOUT) -> None:
        """Binds ``name`` to the object ``key`` (an id, or a name it has). An object has
        one name in a store: ``NameTaken`` if it has another, or if ``name`` names
        another object and not ``replace`` (with ``replace`` the name moves; that object
        stays, unnamed). A persistent object's name is the cluster's, as at its put."""
        self._c.name(self.id_of(key, timeout=timeout) if isinstance(key, str) else int(key),
                     name, replace, **_tmo(timeout))

    def unname(self, name: str, *, timeout: CallTimeout = CONNECTION_TIMEOUT) -> None:
        """Lets go of ``name``; its object stays (``delete`` deletes it)."""
        self._c.unname(name, **_tmo(timeout))

    def id_of(self, name: str, *, wait: bool = False,
              timeout: CallTimeout = CONNECTION_TIMEOUT) -> ObjectID:
        """The id of the object ``name`` names in this store (``NotFound`` if none);
        ``wait=True``: until one is bound to it, at most ``timeout`` seconds (then
        ``Timeout``)."""
        import time
        limit = (self._timeout if timeout is CONNECTION_TIMEOUT else timeout) if wait else 0
        end = None if limit is None else time.monotonic() + limit
        pause = 0.002
        while True:
            try:
                obj = self._c.get_local(name, **_tmo(timeout))
            except NotFound:
                if not wait:
                    raise
                if end is not None and time.monotonic() >= end:
                    raise Timeout("no object was named %r within %s s" % (name, limit)) \
                        from None
                # names are bound by other clients' puts: asked again, less often
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
                continue
            try:
                return ObjectID(obj.id)
            finally:
                obj.release()


    def delete(self, key: Key, *, timeout: CallTimeout = CONNECTION_TIMEOUT) -> None:
        """Deletes an object (by name, unbinding it, or by id): readers that hold it keep
        reading; its memory is freed when the last lets go."""
        self._c.delete(key, **_tmo(timeout))

    def persist(self, key: Key, *, timeout: CallTimeout = CONNECTION_TIMEOUT) -> None:
        """Makes an object outlive the connection that made it."""
        if isinstance(key, str):
            obj = self._c.get(key, **_tmo(timeout))
            try:
                key = obj.id
            finally:
                obj.release()
        self._c.persist(int(key), **_tmo(timeout))

    def names(self, prefix: str = "", *,
              timeout: CallTimeout = CONNECTION_TIMEOUT) -> List[Tuple[str, ObjectID, str, int]]:
        """The bound names starting with prefix: (name, id, type, bytes)."""
        return [(n, ObjectID(i), t, b) for n, i, t, b in self._c.names(prefix, **_tmo(timeout))]

    def stat(self, *, timeout: CallTimeout = CONNECTION_TIMEOUT) -> Dict[str, Any]:
        """The store's figures: capacity, bytes used, objects, names, clients...; and
        ``pages``, what its segments of 2 MiB and more live on ("4k", "thp" or
        "hugetlb", see shoald --huge-pages), with ``pages_why`` saying why. With a
        spill directory (shoald --spill-dir): ``spill_objects`` and ``spill_bytes`` on
        disk only now, ``spill_file_bytes``, ``spilled`` and ``restored`` (counts since
        the start, with ``spilled_bytes``, ``restored_bytes``) and ``spill_rate``,
        ``restore_rate`` in bytes a second."""
        return self._c.stat(**_tmo(timeout))

    def claim(self, *, timeout: CallTimeout = CONNECTION_TIMEOUT) -> int:
        """This connection's owner token (the same every time): what a strict isolated
        extension is granted, to read the objects this connection holds."""
        return int(self._c.claim(**_tmo(timeout)))

    def import_safetensors(
        self, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None, *,
        persist: bool = True, replace: bool = False,
        timeout: CallTimeout = CONNECTION_TIMEOUT,
    ) -> ObjectID:
        """Imports a .safetensors file as a tensor_dict (the header checked first, then
        the data read by the kernel straight into shared memory)."""
        return ObjectID(self._c.import_safetensors(os.fspath(path), name, persist, replace,
                                                   **_tmo(timeout)))

    def export_safetensors(self, name: str, path: Union[str, "os.PathLike[str]"], *,
                           timeout: CallTimeout = CONNECTION_TIMEOUT) -> None:
        """Writes the tensor_dict bound to name as a .safetensors file."""
        self._c.export_safetensors(name, os.fspath(path), **_tmo(timeout))

    def close(self) -> None:
        """Closes the connection; objects got through it must be let go of first."""
        self._c.close()

    @property
    def closed(self) -> bool:
        return bool(self._c.closed)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<shoal.Client %s%s>" % (self.socket, " closed" if self.closed else "")


def connect(socket: Optional[str] = None, *, host: Optional[str] = None,
            port: Optional[int] = None, timeout: Optional[float] = 30.0) -> Any:
    """Connects to the store at socket: by default ``$SHOAL_SOCKET``, else shoald.sock
    in your private socket directory, as the ``shoal`` command does. With ``host`` and
    ``port``: to another host's store through its ``--peer`` port, as a
    :class:`shoal.remote.RemoteClient` (vineyard's RPC client: a get copies the object's
    bytes into this process, a put sends them), proving the cluster's secret
    (``$SHOAL_SECRET_FILE`` or ``$SHOAL_SECRET``)."""
    if host is not None or port is not None:
        if socket is not None or host is None or port is None:
            raise InvalidInput("connect takes a socket, or a host and a port")
        from .remote import RemoteClient
        return RemoteClient(host, port, timeout=timeout)
    return Client(socket, timeout=timeout)


class Store:
    """A store in this process, for a script that needs no daemon::

        with shoal.Store(size=1 << 30) as store:
            client = store.connect()

    Other processes connect to ``store.socket``; the store ends with ``close()``.

    ``huge_pages=True`` puts objects of 2 MiB and more on huge pages (shoald's
    ``--huge-pages``: the hugetlb pool while it has room, else shmem's transparent huge
    pages where ``shmem_enabled`` allows them, else 4 KiB pages); ``pages`` and
    ``pages_why`` say which, and why. ``reserve=True`` touches ``size`` bytes of those
    pages at start (shoald's ``--reserve``), so no put meets memory never touched."""

    def __init__(self, size: int = 1 << 30, socket: Optional[str] = None, *,
                 huge_pages: bool = False, reserve: bool = False) -> None:
        self._s = _shoal.Store(size, socket, huge_pages=huge_pages, reserve=reserve)

    @property
    def pages(self) -> str:
        """What objects of 2 MiB and more live on: "4k", "thp" or "hugetlb"."""
        return str(self._s.pages)

    @property
    def pages_why(self) -> str:
        """Why those pages, and how the system would allow better ones."""
        return str(self._s.pages_why)

    @property
    def socket(self) -> str:
        return str(self._s.socket)

    def connect(self, *, timeout: Optional[float] = 30.0) -> Client:
        return Client(self.socket, timeout=timeout)

    def close(self) -> None:
        self._s.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def load_file(
    path: Union[str, "os.PathLike[str]"], client: Optional[Client] = None, *,
    framework: str = "torch",
) -> Dict[str, Any]:
    """safetensors' ``load_file``, through the store: the file is imported once (under a
    name made of its absolute path, size and modification time) and found by name the
    next time, by this process or any other; the tensors map the store's memory."""
    c = client or connect()
    st = os.stat(path)
    name = "file:%s@%d:%d" % (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    try:
        return c.get(name, framework=framework)
    except NotFound:
        pass
    try:
        c.import_safetensors(path, name, persist=True)
    except NameTaken:
        pass  # another process imported it meanwhile
    return c.get(name, framework=framework)


# Tasklets (shoal.tasklets) are re-exported here, imported at their first use: most
# users of the store never touch them.
_TASKLET_NAMES = (
    "CLOSED",
    "TaskletExit",
    "channel",
    "getcurrent",
    "run",
    "run_asyncio",
    "schedule",
    "select",
    "sleep",
    "tasklet",
    "to_thread",
    "wait_readable",
    "wait_writable",
    "wrap",
)
__all__ += _TASKLET_NAMES


def __getattr__(name: str) -> Any:
    if name in _TASKLET_NAMES:
        from . import tasklets

        # Into the module's globals, so that only the first use pays for this
        # function (~0.6 us a call: ``shoal.channel()`` in a loop is common).
        globals().update((n, getattr(tasklets, n)) for n in _TASKLET_NAMES)
        return globals()[name]
    raise AttributeError(f"module 'shoal' has no attribute {name!r}")
