"""A store of another host, used from this process without a store here: vineyard's RPC
client (``vineyard.connect(host=, port=)``). :class:`RemoteClient` connects where the store
serves other stores (``shoald --peer HOST:PORT``) and proves the cluster's secret as a
store does (``$SHOAL_SECRET_FILE`` or ``$SHOAL_SECRET``; TLS 1.3)::

    from shoal.remote import RemoteClient
    with RemoteClient("10.0.0.7", 7000) as rc:
        rc.put(model.state_dict(), name="sd15", persist=True)
        weights = rc.get("sd15", framework="torch")

A get receives the object's bytes once, straight from the socket into memory of this
process (no copy after the kernel's), and gives the same values as :meth:`shoal.Client.get`:
numpy arrays, torch tensors or shoal tensors, a dict of them, or a memoryview. Unlike a local
get they are this process's own memory: the store's object is not held, and a write to a
torch tensor changes nothing there. A put sends the value's bytes from where they lie; the
store seals them as an object of its own once every byte came.
"""
from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, List, Mapping, Optional, Tuple, Union

    Key = Union[int, str]

from . import (
    CONNECTION_TIMEOUT,
    Client,
    InvalidInput,
    ObjectID,
    _as_tensor,
    _have_torch,
    _is_numpy,
    _is_tensor_dict,
    _is_torch,
    _marked,
    _shoal,
    _tmo,
)

__all__ = ["RemoteClient"]


class RemoteClient:
    """A client of the store whose peer port is ``host:port``.

    ``address`` may be given instead of host and port (``"HOST:PORT"``, optionally with
    ``?encrypt=false`` when the store runs with ``--peer-no-encrypt`` on a trusted network).
    ``timeout`` bounds the connection and, by default, every call (seconds; ``None``: no
    bound); a call past it raises ``Timeout``, and a link that broke or timed out mid-way is
    over (``Closed`` from then on: connect again). Calls from several threads take turns.
    What this client puts without ``persist`` is deleted in the store when it closes."""

    def __init__(self, host: Optional[str] = None, port: Optional[int] = None, *,
                 address: Optional[str] = None, timeout: Optional[float] = 30.0) -> None:
        if address is None:
            if host is None or port is None:
                raise InvalidInput("expected host and port, or address='HOST:PORT'")
            address = "%s:%d" % ("[%s]" % host if ":" in host else host, int(port))
        elif host is not None or port is not None:
            raise InvalidInput("address goes without host and port")
        self.address = address
        self._r = _shoal.Remote(address, timeout)

    # -- getting ---------------------------------------------------------------
    def get(self, key: Key, *, framework: Optional[str] = "auto", copy: bool = False,
            timeout: Any = CONNECTION_TIMEOUT) -> Any:
        """Gets an object by id or name, as :meth:`shoal.Client.get` gives it: a tensor as a
        numpy array (``framework="numpy"``, read-only), a torch tensor (``"torch"``) or a
        shoal tensor (``None``), ``"auto"`` giving torch for what was put from torch; a
        tensor_dict as a dict of those; a blob as a memoryview; a plain value as itself.
        Its bytes are received once into memory of this process, which the values share
        and keep alive. ``copy=True`` gives private copies of them besides. ``timeout``:
        seconds for the whole transfer (``None``: no bound; by default the client's)."""
        if framework not in ("auto", "numpy", "torch", None):
            raise InvalidInput("framework %r: expected 'auto', 'numpy', 'torch' or None"
                               % (framework,))
        obj = self._r.get(key, **_tmo(timeout))
        if framework == "auto":
            framework = "torch" if (obj.type in ("tensor", "tensor_dict")
                                    and obj.fields().get("format") == "pt"
                                    and _have_torch()) else "numpy"
        try:
            if obj.type == "value":
                from . import _values  # noqa: F401  (its hooks decode tuples, sets...)
                return _shoal.unpack_value(obj.blob(0))
            if obj.type == "tensor":
                return Client._convert(obj.tensor(), framework, copy)
            if obj.type == "tensor_dict":
                if framework == "torch":
                    return Client._torch_dict(obj, copy)
                return {name: Client._convert(t, framework, copy) for name, t in obj.tensors()}
            view = memoryview(obj.blob(0))
            return bytes(view) if copy else view
        finally:
            obj.release()  # the views hold it until they go

    # -- putting ---------------------------------------------------------------
    def put(self, value: Any, name: Optional[str] = None, *, persist: bool = False,
            replace: bool = False, metadata: Optional[Mapping[str, str]] = None,
            timeout: Any = CONNECTION_TIMEOUT) -> ObjectID:
        """Puts value into the store, as :meth:`shoal.Client.put` does: bytes-like data as a
        blob, a numpy array or a CPU torch tensor as a tensor, a dict of them as a
        tensor_dict (with optional string ``metadata``). Its bytes are sent from where they
        lie; the store seals the object once they all came (a link that breaks first
        leaves nothing there). ``name`` binds it (``replace`` rebinds a taken name);
        ``persist`` keeps it after this client closes. Returns its id there."""
        t = _tmo(timeout)
        if _is_tensor_dict(value):
            items = []
            torch_made = False
            for key, item in value.items():
                buf, dtype, shape = _as_tensor(item, "the tensor %r" % key)
                torch_made = torch_made or _is_torch(item)
                items.append((key, buf, dtype, shape))
            meta = _marked(metadata, torch_made)  # get gives torch back
            return ObjectID(self._r.put_tensor_dict(items, meta, name, persist, replace, **t))
        if metadata:
            raise InvalidInput("metadata goes with a dict of tensors, not a %s" % type(value).__name__)
        if _is_numpy(value) or _is_torch(value):
            buf, dtype, shape = _as_tensor(value, "the value")
            return ObjectID(self._r.put_tensor(buf, dtype, shape, name, persist, replace, **t))
        try:
            memoryview(value)
        except TypeError:
            raise InvalidInput(
                "cannot put a %s: expected bytes-like data, a numpy array, a torch tensor or "
                "a dict of arrays or tensors" % type(value).__name__
            ) from None
        return ObjectID(self._r.put_bytes(value, name, persist, replace, **t))

    # -- names and the rest ----------------------------------------------------
    def delete(self, key: Key, *, timeout: Any = CONNECTION_TIMEOUT) -> None:
        """Deletes an object there (by name, unbinding it, or by id)."""
        self._r.delete(key, **_tmo(timeout))

    def names(self, prefix: str = "", *,
              timeout: Any = CONNECTION_TIMEOUT) -> List[Tuple[str, ObjectID, str, int]]:
        """The names bound there that start with prefix, in order: (name, id, type, bytes)."""
        return [(n, ObjectID(i), t, b) for n, i, t, b in self._r.names(prefix, **_tmo(timeout))]

    def close(self) -> None:
        """Closes the link; what it put without ``persist`` goes. Values got through it
        stay valid."""
        self._r.close()

    @property
    def closed(self) -> bool:
        return bool(self._r.closed)

    def __enter__(self) -> "RemoteClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<shoal.RemoteClient %s%s>" % (self.address, " closed" if self.closed else "")
