"""vineyard's client API on shoal: a vineyard program runs with its imports changed::

    import shoal.compat.vineyard as vineyard
    from shoal.compat.vineyard.contrib.ml.torch import torch_context

    client = vineyard.connect("/run/shoald.sock")        # a shoald's socket (IPC)
    with torch_context(client):
        oid = client.put(model.state_dict(), persist=True, name="state_dict")
    # on another host of the same cluster (shoald --meta etcd://...):
    with torch_context(client2):
        sd = client2.get(name="state_dict", fetch=True)  # migrated into this store
    rpc = vineyard.connect(host="10.0.0.5", port=9600)    # a store's --peer port

Covered: ``connect`` (a socket path, ``$VINEYARD_IPC_SOCKET``, or ``host``/``port`` of a
store's ``--peer`` port, the cluster secret from ``$SHOAL_SECRET_FILE`` or
``$SHOAL_SECRET``); ``Client.put`` (tensors, numpy arrays, dicts of them, bytes, plain
Python values), ``get`` (by ``object_id`` or ``name``, ``fetch``), ``put_name``,
``get_name`` (``wait``), ``drop_name``, ``list_names``, ``persist``, ``delete``,
``exists``, ``close``; ``ObjectID``; ``torch_context``.

Differences, each of which raises rather than differ silently:

- An object has one name in a store: ``put_name`` of a second name for a named object
  raises ``shoal.NameTaken`` (``drop_name`` the first). A name vineyard would move
  moves (``put_name`` of a taken name binds it to the new object; the old stays).
- ``get`` without ``fetch=True`` of an object in another host's store raises
  ``shoal.NotFound`` saying where it is, as vineyard does; nothing is migrated.
- Objects are immutable: numpy arrays come read-only; torch tensors copy-on-write (a
  write is the writer's alone). vineyard's builders, resolvers, metadata objects
  (``get_meta``, ``create_metadata``, blobs and blob writers), streams, ``clear``,
  ``status``, ``instance_id``, ``migrate`` by instance and the sessions' API are not
  covered: each raises ``NotImplementedError`` naming the shoal call to use.
"""
from __future__ import annotations

import fnmatch
import os
import re

import shoal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Union

__all__ = ["Client", "IPCClient", "ObjectID", "ObjectName", "RPCClient", "connect"]


class ObjectID(shoal.ObjectID):
    """vineyard's object id: an int, also made from vineyard's text (``o`` and 16 hex
    digits), shown that way."""

    def __new__(cls, value: Union[int, str] = 0) -> "ObjectID":
        if isinstance(value, str):
            text = value[1:] if value.startswith("o") else value
            value = int(text, 16)
        return super().__new__(cls, int(value))

    def __repr__(self) -> str:
        return "o%016x" % int(self)

    __str__ = __repr__


ObjectName = str

# What vineyard calls that shoal does otherwise: the shoal call to use instead.
_INSTEAD = {
    "get_meta": "shoal.Client.get (the object itself), or Object.fields() via shoal._shoal",
    "get_metas": "shoal.Client.get",
    "get_object": "shoal.Client.get",
    "get_objects": "shoal.Client.get",
    "create_metadata": "shoal.Client.put (objects are sealed whole)",
    "create_blob": "shoal.Client.put of bytes",
    "create_empty_blob": "shoal.Client.put of bytes",
    "get_blob": "shoal.Client.get",
    "get_blobs": "shoal.Client.get",
    "create_remote_blob": "shoal.Client.put through shoal.connect(host=, port=)",
    "clear": "shoal.Client.names and delete, one by one",
    "status": "shoal.Client.stat()",
    "instance_id": "shoal.Client.stat() (a store is its socket: Client.socket)",
    "instances": "shoal.Client.stat()['peers']",
    "migrate": "shoal.Client.migrate(key, 'HOST:PORT') or get(..., fetch=True)",
    "sync_meta": "nothing: a store's objects are sealed, there is nothing to sync",
    "shallow_copy": "nothing: objects are immutable, share them",
    "deep_copy": "shoal.Client.get(..., copy=True) then put",
    "release_object": "letting go of what get returned (or Object.release)",
    "add_object": "shoal.Client.put",
    "is_shared_memory": "nothing: what get returns maps the store",
    "find_shared_memory": "nothing: what get returns maps the store",
    "open_stream": "shoal.tasks or channels (streams are not covered)",
    "new_buffer_chunk": "shoal.tasks or channels (streams are not covered)",
    "get_session": "shoal.Store or another shoald (sessions are not covered)",
    "fork": "connecting again after os.fork (shoal.connect)",
}


def _not_covered(what: str) -> NotImplementedError:
    instead = _INSTEAD.get(what.rsplit(".", 1)[-1])
    return NotImplementedError(
        "vineyard's %s is not covered by shoal.compat.vineyard%s" %
        (what, ": use %s" % instead if instead else " (its docstring lists what is)"))


def _torch_wanted() -> bool:
    from .contrib.ml import torch as _t
    return _t._active()


class Client:
    """vineyard's IPC client over a shoal store (``shoal.Client``), or its RPC client
    over a store's peer port (``shoal.remote``)."""

    def __init__(self, impl: Any, remote: bool = False) -> None:
        self._c = impl
        self._remote = remote

    @property
    def ipc_socket(self) -> str:
        if self._remote:
            raise _not_covered("RPCClient.ipc_socket")
        return str(self._c.socket)

    def put(self, value: Any, builder: Any = None, persist: bool = False,
            name: Optional[str] = None, **kwargs: Any) -> ObjectID:
        if builder is not None or kwargs:
            raise NotImplementedError(
                "vineyard's builders and put options (%s) are not covered by "
                "shoal.compat.vineyard: shoal.Client.put stores tensors, dicts of them, "
                "bytes and plain values itself" % ", ".join(["builder"] * (builder is not None)
                                                           + sorted(kwargs)))
        torch = __import__("sys").modules.get("torch")
        if torch is not None and isinstance(value, torch.nn.Module):
            value = value.state_dict()  # what vineyard's torch builder keeps of a module
        if self._remote:
            # a remote store binds the name at the put: a taken one is refused there
            # (NameTaken) rather than moved
            return ObjectID(int(self._c.put(value, name, persist=persist)))
        oid = self._c.put(value, persist=persist)
        if name is not None:
            # vineyard moves a taken name to the new object and keeps the old one
            # (put's replace would delete it)
            self._c.name(oid, name, replace=True)
        return ObjectID(int(oid))

    def get(self, object_id: Optional[Any] = None, name: Optional[str] = None,
            resolver: Any = None, fetch: bool = False, **kwargs: Any) -> Any:
        if resolver is not None or kwargs:
            raise NotImplementedError(
                "vineyard's resolvers and get options are not covered by "
                "shoal.compat.vineyard: shoal.Client.get(framework=) chooses numpy or torch")
        if (object_id is None) == (name is None):
            raise ValueError("get takes an object_id or a name")
        key = name if name is not None else int(object_id)
        framework = "torch" if _torch_wanted() else "auto"
        if self._remote:
            return self._c.get(key, framework=framework)
        return self._c.get(key, framework=framework, fetch=fetch)

    def _local(self, what: str) -> Any:
        if self._remote:
            raise NotImplementedError(
                "vineyard's RPCClient.%s is not covered by shoal.compat.vineyard: name "
                "objects at their put through it, or use a local client (shoal.Client.%s)"
                % (what, {"put_name": "name", "get_name": "id_of", "drop_name": "unname",
                          "persist": "persist"}.get(what, what)))
        return self._c

    def put_name(self, object_id: Any, name: str) -> None:
        self._local("put_name").name(int(object_id), name, replace=True)

    def get_name(self, name: str, wait: bool = False) -> ObjectID:
        return ObjectID(int(self._local("get_name").id_of(name, wait=wait,
                                                          timeout=None if wait else 30.0)))

    def drop_name(self, name: str) -> None:
        self._local("drop_name").unname(name)

    def list_names(self, pattern: str = "*", regex: bool = False,
                   limit: int = 5) -> Dict[str, ObjectID]:
        match = re.compile(pattern).match if regex else \
            (lambda n: fnmatch.fnmatchcase(n, pattern))
        out: Dict[str, ObjectID] = {}
        for n, oid, _type, _bytes in self._c.names(""):
            if match(n):
                out[n] = ObjectID(int(oid))
                if len(out) >= limit:
                    break
        return out

    def persist(self, object_id: Any) -> None:
        self._local("persist").persist(int(object_id))

    def delete(self, object_id: Union[Any, Iterable[Any]], force: bool = False,
               deep: bool = True) -> None:
        if not deep:
            raise NotImplementedError("delete(deep=False) is not covered by "
                                      "shoal.compat.vineyard: an object is deleted whole "
                                      "(shoal.Client.delete)")
        ids = object_id if isinstance(object_id, (list, tuple, set)) else [object_id]
        for oid in ids:
            self._c.delete(int(oid))

    def exists(self, object_id: Any) -> bool:
        try:
            self._local("exists").get(int(object_id), framework=None)
        except shoal.NotFound:
            return False
        return True

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise _not_covered("Client." + name)


IPCClient = Client
RPCClient = Client


def connect(*args: Any, **kwargs: Any) -> Client:
    """vineyard.connect: ``connect(socket)``, ``connect()`` (``$VINEYARD_IPC_SOCKET``,
    else shoal's default socket), ``connect(host, port)`` or ``connect(host=, port=)``
    or ``connect("host:port")`` (a store's ``--peer`` port, the cluster's secret from
    ``$SHOAL_SECRET_FILE`` or ``$SHOAL_SECRET``)."""
    host = kwargs.pop("host", None)
    port = kwargs.pop("port", None)
    socket = kwargs.pop("socket", None) or kwargs.pop("endpoint", None)
    for k in ("username", "password", "session", "rdma_endpoint"):
        if kwargs.pop(k, None) is not None:
            raise _not_covered("connect(%s=)" % k)
    if kwargs:
        raise TypeError("connect() got unexpected keyword arguments: %s" % ", ".join(kwargs))
    if len(args) == 2:
        host, port = args
    elif len(args) == 1:
        socket = args[0]
    elif args:
        raise TypeError("connect() takes a socket, or a host and a port")
    if socket is not None and host is None and not os.path.exists(str(socket)) and \
            ":" in str(socket):
        host, _, port = str(socket).rpartition(":")
        socket = None
    if host is not None:
        if port is None:
            raise TypeError("connect(host=) needs a port: the store's --peer port")
        return Client(shoal.connect(host=str(host), port=int(port)), remote=True)
    return Client(shoal.connect(socket or os.environ.get("VINEYARD_IPC_SOCKET")))


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise _not_covered("vineyard." + name)
