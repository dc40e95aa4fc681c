"""Python values as shoal's call values (the C module's value.c does the work, with these
hooks): tensors (numpy arrays and torch tensors, copied, or by reference through a store),
and the types registered with :func:`register_type`. Shared by shoal.isolate and
shoal.tasks; nothing is made from what another process sends but msgpack's kinds, tuples,
sets, tensors and registered types."""
from __future__ import annotations

import os
import weakref
from _thread import _local as _ThreadLocal  # threading.local, without importing threading

from . import NotFound, _as_tensor, _is_numpy, _is_torch, _shoal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

# In an isolated extension's process (set by shoal.isolate there), and its connection to
# the store with share_torch (None: shared tensors arrive as copies).
_IN_CHILD = False
_CHILD_CLIENT: Any = None


_TYPES_BY_CLASS: Dict[type, Tuple[str, Callable[[Any], Any]]] = {}
_TYPES_BY_NAME: Dict[str, Callable[[Any], Any]] = {}


def register_type(cls: type, to_value: Callable[[Any], Any], from_value: Callable[[Any], Any],
                  name: Optional[str] = None) -> None:
    """Lets instances of cls cross calls (to isolated extensions and to engines):
    ``to_value(obj)`` gives a value of the kinds that cross (None, bool, int, float, str,
    bytes, lists, tuples, sets, dicts, arrays and tensors), ``from_value(value)`` makes
    the object again on the other side, which must register the same name (by default
    cls's qualified name)."""
    n = name or cls.__qualname__
    _TYPES_BY_CLASS[cls] = (n, to_value)
    _TYPES_BY_NAME[n] = from_value


class _Sharing(_ThreadLocal):
    """What the call this thread makes shares through: the store connection of this
    side (None: the call copies), and the host's tensors already in the store."""

    client: Any = None
    cache: Any = None
    # whether a view of a store object goes as that object: not in a task, whose
    # client deletes the objects made for a task once its result is taken (a view of
    # one outlives the object's id, which then cannot be got)
    views = True
    # the host's CPU torch tensors go as shared memory the extension maps writable
    # (share_torch, where the extension can open the host's descriptors: not strict)
    host_share = False


_CTX = _Sharing()


class _ByIdentity:
    """A map from live objects, by identity (arrays and tensors compare elementwise,
    which a WeakKeyDictionary would call), to what is known of them; an entry goes with
    its object, and on_gone(value) runs then."""

    def __init__(self, on_gone: Optional[Callable[[Any], None]] = None) -> None:
        self.d: Dict[int, Tuple[Any, Any]] = {}
        self.on_gone = on_gone

    def get(self, o: Any) -> Any:
        e = self.d.get(id(o))
        return e[1] if e is not None and e[0]() is o else None

    def put(self, o: Any, value: Any) -> None:
        key = id(o)
        old = self.d.get(key)
        self.d[key] = (weakref.ref(o, lambda _r, k=key, v=value: self._gone(k, v)), value)
        if old is not None and self.on_gone:
            self.on_gone(old[1])  # replaced: the old store object is not needed

    def _gone(self, key: int, value: Any) -> None:
        e = self.d.get(key)
        if e is not None and e[1] is value:
            del self.d[key]
        if self.on_gone:
            self.on_gone(value)


# Arrays and tensors that are views of a store object: the object's id, so that
# passing one on (an extension returning its argument) goes by reference.
_VIEWS = _ByIdentity()
# The newest live view of each store object, to make the next from.
_LATEST: Dict[int, Any] = {}
# In an extension, the views of the last call's shared arguments stay until the next
# call's are made (as the runner keeps their objects): a tensor passed call after call
# then becomes a view of a view, with no round trip to the store and no release after.
_KEPT: List[Any] = []
_MADE: List[Any] = []


def _store_id(o: Any) -> int:
    """The store object holding exactly o's bytes, put there now if it is a torch
    tensor of the host in a shared call (once: again only when it has changed)."""
    try:
        vid = _VIEWS.get(o) if _CTX.views else None
    except TypeError:
        vid = None
    if vid is not None:
        return int(vid)
    client, cache = _CTX.client, _CTX.cache
    if client is None or cache is None or not _is_torch(o):
        return 0
    entry = cache.get(o)
    if entry is not None and entry[0] == o._version and entry[1] == o.data_ptr():
        return int(entry[2])
    oid = int(client.put(o))
    cache.put(o, (o._version, o.data_ptr(), oid, client))
    return oid


def _forget(entry: Tuple[int, int, int, Any]) -> None:
    """A shared tensor of the host is gone (or changed): its store copy goes."""
    try:
        entry[3].delete(entry[2])
    except Exception:  # the store or the connection went first: nothing to free
        pass


# ---- the host's tensors, shared both ways (share_torch) ----
#
# torch.multiprocessing's meaning, which pyisolate users rely on: an extension's in-place
# write to a tensor the host passed is the host's tensor's. The host moves the tensor's
# storage into shared memory in place (torch's own _share_fd_cpu_, what share_memory_()
# does: every tensor on that storage follows, and it is done once: the next call finds
# it there) and sends the descriptor's number, its inode and the view's geometry; the
# extension opens /proc/HOST/fd/N (the same uid: basic or no sandbox) and maps it
# writable. These tensors are mutable, outside the store and its immutability. A tensor
# the extension sends back that is a view of such memory comes back as a view of the
# host's own tensor (only of what the host shared: anything else the extension names is
# refused).

_HOST_TENSOR = "shoal.isolate.host_tensor"
# host: (fd, inode) -> a weak reference to a tensor on that storage
_SHARED_OUT: Dict[Tuple[int, int], Any] = {}
# extension: (pid, fd, inode, dtype) -> a weak reference to the newest view made of it
_MAPPED: Dict[Tuple[int, int, int, str], Any] = {}
# extension: the address of each mapping of host memory -> (fd, inode, a weak reference
# to the mmap), while mapped (any tensor on that storage, a slice made there too, goes
# back as a view of the host's)
_MAPPED_AT: Dict[int, Tuple[int, int, Any]] = {}


def _host_shared(o: Any) -> Any:
    """The ("type", ...) value of a host tensor shared in place, or None where it cannot
    be (not CPU, not strided, empty)."""
    try:
        # a conjugate or negative view is a bit on the tensor, not in its bytes, and a
        # quantized one has its scale outside them: those go as values (copied or stored)
        if (o.device.type != "cpu" or o.layout is not _torch().strided or o.numel() == 0
                or o.is_conj() or o.is_neg() or o.is_quantized):
            return None
        st = _storage(o)
        if st.nbytes() == 0:
            return None
        fd, size = st._share_fd_cpu_()
        ino = os.fstat(fd).st_ino
    except (AttributeError, RuntimeError, NotImplementedError, OSError):
        return None
    key = (int(fd), int(ino))
    ref = _SHARED_OUT.get(key)
    if ref is None or ref() is None:
        _SHARED_OUT[key] = weakref.ref(o, lambda _r, k=key: _SHARED_OUT.pop(k, None)
                                       if _SHARED_OUT.get(k) is _r else None)
    return ("type", _HOST_TENSOR, [os.getpid(), key[0], key[1], int(size),
                                   o.storage_offset(), list(o.shape), list(o.stride()),
                                   str(o.dtype)])


def _storage(o: Any) -> Any:
    """A tensor's untyped storage (torch 2's call, or torch 1.13's, which lacks it)."""
    f = getattr(o, "untyped_storage", None)
    return f() if f is not None else o.storage().untyped()


def _torch() -> Any:
    import torch
    return torch


def _dtype(name: Any) -> Any:
    torch = _torch()
    dt = getattr(torch, name[6:], None) if isinstance(name, str) and \
        name.startswith("torch.") else None
    if not isinstance(dt, torch.dtype):
        raise ValueError("a shared tensor of dtype %r: expected a torch dtype" % (name,))
    return dt


def _decode_host_tensor(p: Any) -> Any:
    """In the extension: the host's tensor, mapped writable."""
    torch = _torch()
    pid, fd, ino, size, offset, shape, stride, dtname = p
    dt = _dtype(dtname)
    key = (pid, fd, ino, dtname)
    ref = _MAPPED.get(key)
    old = ref() if ref is not None else None
    if old is None:
        import mmap
        path = "/proc/%d/fd/%d" % (pid, fd)
        try:
            f = os.open(path, os.O_RDWR)
        except OSError as e:
            raise PermissionError(
                "a tensor the host shares (share_torch) could not be mapped: %s (the "
                "extension opens the host's shared memory as the host's uid: sandbox none "
                "or basic)" % e) from None
        try:
            if os.fstat(f).st_ino != ino:
                raise ValueError("a tensor the host shares was gone before it was mapped")
            mm = mmap.mmap(f, size)
        finally:
            os.close(f)
        itemsize = torch.empty((), dtype=dt).element_size()
        old = torch.frombuffer(mm, dtype=dt, count=size // itemsize)
        addr = old.data_ptr()
        # the mapping lives as long as a tensor on it does (the storage holds the mmap)
        _MAPPED_AT[addr] = (fd, ino, weakref.ref(mm, lambda _r, a=addr: _MAPPED_AT.pop(a, None)
                                                 if _MAPPED_AT.get(a, (0, 0, None))[2] is _r
                                                 else None))
    v = torch.as_strided(old, shape, stride, offset)
    _MAPPED[key] = weakref.ref(v, lambda _r, k=key: _MAPPED.pop(k, None)
                               if _MAPPED.get(k) is _r else None)
    _MADE.append(v)  # kept until the next call's arguments: the mapping is reused
    return v


def _decode_host_ref(p: Any) -> Any:
    """In the host: a view of a tensor this host shared, which the extension returns."""
    torch = _torch()
    fd, ino, offset, shape, stride, dtname = p
    ref = _SHARED_OUT.get((fd, ino))
    base = ref() if ref is not None else None
    if base is None:
        raise ValueError("an extension returned a view of host memory that this host did "
                         "not share (or no longer holds)")
    if _dtype(dtname) != base.dtype:
        raise ValueError("an extension returned a view of host memory as %s; the host "
                         "shared it as %s" % (dtname, base.dtype))
    # as_strided checks the view against the storage's bounds (set_ would not)
    return torch.as_strided(base, shape, stride, offset)


def _encode(o: Any) -> Tuple[Any, ...]:
    if _IN_CHILD and _MAPPED_AT and _is_torch(o) and o.device.type == "cpu":
        hv = _MAPPED_AT.get(_storage(o).data_ptr())
        if hv is not None:
            return ("type", _HOST_TENSOR + "_ref", [hv[0], hv[1], o.storage_offset(),
                                                     list(o.shape), list(o.stride()),
                                                     str(o.dtype)])
    elif _CTX.host_share and _is_torch(o):
        r = _host_shared(o)
        if r is not None:
            return r
    if _is_torch(o) or _is_numpy(o):
        buf, dtype, shape = _as_tensor(o, "a %s argument" % type(o).__name__)
        return ("tensor", buf, dtype, shape, _is_torch(o), _store_id(o))
    for c in type(o).__mro__:
        if c in _TYPES_BY_CLASS:
            name, to_value = _TYPES_BY_CLASS[c]
            return ("type", name, to_value(o))
    raise TypeError("cannot send a %s through a call: register it with "
                    "shoal.isolate.register_type" % type(o).__qualname__)


def _decode_tensor(val: Any, torch: bool) -> Any:
    if torch:
        import torch as t
        out = t.utils.dlpack.from_dlpack(val.__dlpack__())
        return out.view(t.bool) if val.dtype == "BOOL" else out
    import numpy as np
    return np.asarray(val)


def _decode_shared(oid: int, torch: bool) -> Any:
    """A tensor passed by reference: a read-only view of the store object through this
    side's own connection (which holds it while the view lives), or None to copy."""
    client = _CTX.client if _CTX.client is not None else _CHILD_CLIENT
    if client is None:
        return None
    # A numpy view of it that still lives (an array passed call after call) makes the
    # new one with no round trip to the store. Not a torch one: torch tensors map the
    # object copy-on-write, and what an earlier call wrote into its tensor is its own.
    ref = _LATEST.get(oid)
    old = ref() if ref is not None else None
    if old is not None and not torch and not _is_torch(old):
        v = old.view()
    else:
        try:
            v = client.get(oid, framework="torch" if torch else "numpy")
        except NotFound:
            # deleted already, though the call still maps it (an argument the call
            # put into the store, returned as it came): a copy, then
            return None
    _VIEWS.put(v, oid)
    _LATEST[oid] = weakref.ref(v, lambda _r, k=oid: _LATEST.pop(k, None)
                               if _LATEST.get(k) is _r else None)
    if _IN_CHILD:
        _MADE.append(v)
    return v


def _decode_type(name: str, payload: Any) -> Any:
    # each side takes only what the other may send it: a host never maps what an
    # extension names, an extension never gets a view of its own memory
    if name == _HOST_TENSOR and _IN_CHILD:
        return _decode_host_tensor(payload)
    if name == _HOST_TENSOR + "_ref" and not _IN_CHILD:
        return _decode_host_ref(payload)
    from_value = _TYPES_BY_NAME.get(name)
    if from_value is None:
        raise ValueError("a value of type %r arrived, which is not registered here "
                         "(shoal.isolate.register_type)" % name)
    return from_value(payload)


_shoal._set_value_hooks(_encode, _decode_tensor, _decode_type, _decode_shared)
