"""shoal.compat.pyisolate: pyisolate v0.1's API on shoal.isolate, for programs written
against pyisolate that should run with only their imports changed::

    import shoal.compat.pyisolate as pyisolate
    from shoal.compat.pyisolate import (ExtensionBase, ExtensionConfig, ExtensionManager,
                                        ExtensionManagerConfig, ProxiedSingleton,
                                        local_execution)

What maps, with pyisolate's meaning:

- ``ExtensionManagerConfig(venv_root_path=...)`` and ``ExtensionConfig(name=,
  module_path=, isolated=, dependencies=, apis=, share_torch=)``: dicts, as pyisolate's
  TypedDicts are (a plain dict works as well). Each isolated extension gets a venv of
  its own under venv_root_path, named after it, with its dependencies pip-installed
  (kept while they stay the same; see :class:`shoal.isolate.ExtensionManagerConfig`);
  ``isolated=False`` runs it in the host's Python environment, in a process of its own
  (pyisolate's documented meaning; its v0.1 code makes a venv either way), and takes no
  dependencies (NotImplementedError: install them into the host's Python). A dependency
  naming pyisolate's own directory (``-e dirname(dirname(pyisolate.__file__))``, as
  pyisolate's example installs itself) is dropped: that is shoal's, which every
  extension has from its host. ``apis`` lists the
  ProxiedSingletons whose ``Cls()`` in the extension is the host's instance (others are
  the extension's own); ``share_torch`` shares the host's CPU tensors both ways (an
  extension's in-place write is seen by the host) and runs the extension under
  ``torch.inference_mode()``, as pyisolate does. Missing keys take pyisolate's
  documented defaults (isolated True, no dependencies, no apis, share_torch False).
- ``ExtensionManager(ExtensionBase subclass, config)``; ``load_extension(config)`` starts
  the extension and returns its proxy (awaiting the proxy gives the proxy, so both
  ``manager.load_extension(c)`` and pyisolate's README's ``await
  manager.load_extension(c)`` work); ``proxy.method(...)`` is a coroutine, as in
  pyisolate, that runs the method there (sync or ``async def``) when awaited; ``await
  proxy.stop()``, ``stop_extension(name)`` and ``stop_all_extensions()`` stop
  extensions.
- ``ExtensionBase`` with ``async def before_module_loaded(self)`` / ``async def
  on_module_loaded(self, module)`` (awaited in the extension, on its one event loop);
  ``ProxiedSingleton`` (in an extension, ``await Cls().method(...)`` runs in the host;
  attributes annotated with another ProxiedSingleton are proxies of it too) and
  ``local_execution``.
- The extension inherits the host's environment, as pyisolate's spawned process does
  (shoal's ``sandbox="none"``). Keys of :class:`shoal.isolate.ExtensionConfig` beyond
  pyisolate's (``sandbox``, ``mem_max``, ``call_timeout``, ``restart``, ...) may be given
  in the same dict, for shoal's limits.

What it does not cover (each raises ``NotImplementedError`` naming the shoal call to use):

- ``register_callee``, ``create_caller`` and ``use_remote`` of ExtensionBase and of the
  host's proxy (pyisolate's low-level RPC objects): use a :class:`ProxiedSingleton` and
  the config's ``apis``.
- ``ProxiedSingleton.get_remote_id`` overridden, ``inject_instance`` and ``use_remote``:
  shoal names a singleton's methods by the class's qualified name; use distinct class
  names.
- ``manager.extensions`` (pyisolate's internal Extension objects, their processes and
  queues): use ``get_extension(name)`` for the proxy, ``stop_extension(name)`` to stop.
- Config keys neither pyisolate's nor shoal's.

Values that cross calls are shoal.isolate's (see its docstring), not pickle's: None,
bool, int, float, str, bytes, lists, tuples, sets, dicts, numpy arrays, torch tensors and
types registered with :func:`register_type` (also exported here); anything else raises
TypeError naming register_type. An exception in the extension comes back as the same
builtin type, else as :class:`RemoteError`, with its traceback, where pyisolate raises a
bare ``Exception(str(e))``. The extension's module is registered in ``sys.modules`` as
``shoal_ext_<name>``, where pyisolate uses its path with dots replaced.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, TypedDict

from .. import isolate as _si
from ..isolate import (ExtensionCrashed, ExtensionLoadError, RemoteError, local_execution,
                       register_type)

__all__ = [
    "ExtensionBase",
    "ExtensionConfig",
    "ExtensionCrashed",
    "ExtensionLoadError",
    "ExtensionManager",
    "ExtensionManagerConfig",
    "ProxiedSingleton",
    "RemoteError",
    "local_execution",
    "register_type",
]


class ExtensionManagerConfig(TypedDict):
    """pyisolate's manager config: where isolated extensions' venvs go."""

    venv_root_path: str


class ExtensionConfig(TypedDict, total=False):
    """pyisolate's extension config (a dict)."""

    name: str
    module_path: str
    isolated: bool
    dependencies: List[str]
    apis: List[type]
    share_torch: bool


_PYISOLATE_KEYS = {"name", "module_path", "isolated", "dependencies", "apis", "share_torch"}


def _unsupported(what: str, instead: str) -> NotImplementedError:
    return NotImplementedError("%s is not covered by shoal.compat.pyisolate: %s"
                               % (what, instead))


class ExtensionBase(_si.ExtensionBase):
    """pyisolate's ExtensionBase: subclass it, with async (or plain) hooks and methods."""

    async def before_module_loaded(self) -> None:
        """Runs in the extension before its module is imported."""

    async def on_module_loaded(self, module: Any) -> None:
        """Runs in the extension with its module once it is imported."""

    def register_callee(self, object_instance: object, object_id: str) -> None:
        raise _unsupported("ExtensionBase.register_callee",
                           "make the object a shoal.isolate.ProxiedSingleton (its methods "
                           "are called by name across processes), or add a public method "
                           "to the extension class")

    def create_caller(self, object_type: type, object_id: str) -> Any:
        raise _unsupported("ExtensionBase.create_caller",
                           "call a shoal.isolate.ProxiedSingleton of the host: Cls() in the "
                           "extension is its proxy")

    def use_remote(self, proxied_singleton: type) -> None:
        raise _unsupported("ExtensionBase.use_remote",
                           "list the class in ExtensionConfig(apis=[...]): Cls() in the "
                           "extension is then the host's instance")


class ProxiedSingleton(_si.ProxiedSingleton):
    """pyisolate's ProxiedSingleton: one instance in the host; ``Cls()`` in an extension
    that lists it in ``apis`` is a proxy whose methods run in the host."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        for name in ("get_remote_id", "inject_instance", "use_remote"):
            if name in cls.__dict__:
                raise _unsupported("%s.%s" % (cls.__qualname__, name),
                                   "shoal names a singleton's methods by the class's "
                                   "qualified name (%s): give each singleton a class name "
                                   "of its own" % cls.__qualname__)
        super().__init_subclass__(**kwargs)

    @classmethod
    def get_remote_id(cls) -> str:
        return cls.__qualname__

    @classmethod
    def get_instance(cls, *args: Any, **kwargs: Any) -> Any:
        return cls(*args, **kwargs)

    @classmethod
    def inject_instance(cls, instance: Any) -> None:
        raise _unsupported("ProxiedSingleton.inject_instance",
                           "the host's instance is the first Cls() there; construct it "
                           "with what it needs before loading extensions")

    @classmethod
    def use_remote(cls, rpc: Any) -> None:
        raise _unsupported("ProxiedSingleton.use_remote",
                           "list the class in ExtensionConfig(apis=[...])")


class _HostExtension:
    """The proxy load_extension returns: the extension's methods, and stop()."""

    def __init__(self, manager: "ExtensionManager", name: str, proxy: Any) -> None:
        self._manager = manager
        self._name = name
        self._proxy = proxy

    def __getattr__(self, method: str) -> Any:
        call = getattr(self._proxy, method)

        # pyisolate's methods are coroutines wherever they are called (asyncio.run(
        # ext.method()) is a pyisolate program's line), where shoal's answer at once
        # outside an event loop
        async def remote(*args: Any, **kwargs: Any) -> Any:
            return await call(*args, **kwargs)  # in the loop: a future of shoal's
        remote.__name__ = method
        return remote

    # pyisolate's host-side proxy has ExtensionLocal's plain methods: here they would be
    # coroutines nobody awaits, so they raise at once
    def register_callee(self, object_instance: object, object_id: str) -> None:
        raise _unsupported("register_callee on the host's proxy",
                           "make the object a shoal.isolate.ProxiedSingleton of the host")

    def create_caller(self, object_type: type, object_id: str) -> Any:
        raise _unsupported("create_caller on the host's proxy",
                           "call the extension's public methods on this proxy")

    def use_remote(self, proxied_singleton: type) -> None:
        raise _unsupported("use_remote on the host's proxy",
                           "list the class in ExtensionConfig(apis=[...])")

    async def stop(self) -> None:
        """Stops the extension (a coroutine, as pyisolate's is)."""
        if self._name in self._manager._loaded:
            self._manager.stop_extension(self._name)

    def __await__(self) -> Any:
        return self
        yield  # pyisolate's README awaits load_extension(): the proxy, at once

    def __repr__(self) -> str:
        return repr(self._proxy)


_SHOAL_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def _without_self(deps: List[str]) -> List[str]:
    """The dependencies less pyisolate itself: pyisolate's example installs it into each
    venv from ``os.path.dirname(os.path.dirname(pyisolate.__file__))``, which here is
    shoal's package, and every extension has shoal from its host already."""
    out: List[str] = []
    for d in deps:
        p = d[3:].strip() if d.startswith("-e ") else d
        if os.path.isdir(p) and os.path.realpath(p) in (_SHOAL_DIR, os.path.join(
                _SHOAL_DIR, "shoal")):
            if out and out[-1] == "-e":
                out.pop()
            continue
        out.append(d)
    return out


def _shoal_config(config: Dict[str, Any]) -> _si.ExtensionConfig:
    if not isinstance(config, dict):
        raise TypeError("load_extension: expected an ExtensionConfig (a dict); got %s"
                        % type(config).__name__)
    shoal_keys = set(_si.ExtensionConfig._FIELDS)
    unknown = sorted(set(config) - _PYISOLATE_KEYS - shoal_keys)
    if unknown:
        raise _unsupported("ExtensionConfig key(s) %s" % ", ".join(unknown),
                           "pyisolate v0.1 takes %s, and shoal.isolate.ExtensionConfig "
                           "takes also %s" % (", ".join(sorted(_PYISOLATE_KEYS)),
                                              ", ".join(sorted(shoal_keys - _PYISOLATE_KEYS))))
    for key in ("name", "module_path"):
        if key not in config:
            raise KeyError("ExtensionConfig: expected %s; the config has %s"
                           % (key, ", ".join(sorted(config)) or "no keys"))
    kw = dict(config)
    kw["dependencies"] = _without_self(list(kw.get("dependencies") or []))
    kw.setdefault("isolated", True)
    kw.setdefault("apis", [])
    kw.setdefault("sandbox", "none")  # pyisolate's process inherits the host's environment
    if kw.get("share_torch"):
        # pyisolate runs a share_torch extension under torch.inference_mode()
        env = dict(kw.get("env") or {})
        env.setdefault("SHOAL_PY_INFERENCE_MODE", "1")
        kw["env"] = env
    return _si.ExtensionConfig(**kw)


class ExtensionManager:
    """pyisolate's ExtensionManager(extension_type, config) on shoal.isolate's."""

    def __init__(self, extension_type: type, config: Any = None) -> None:
        # pyisolate requires the root; without one shoal's dependencies would mean module
        # names rather than pip requirements
        if not isinstance(config, dict) or not config.get("venv_root_path"):
            raise TypeError("ExtensionManager: expected an ExtensionManagerConfig (a dict "
                            "with venv_root_path); got %r" % (config,))
        self.config = config
        self.extension_type = extension_type
        self._manager = _si.ExtensionManager(extension_type, _si.ExtensionManagerConfig(
            venv_root_path=self.config.get("venv_root_path")))
        self._loaded: Dict[str, _HostExtension] = {}

    @property
    def extensions(self) -> Any:
        raise _unsupported("ExtensionManager.extensions",
                           "get_extension(name) gives an extension's proxy, "
                           "stop_extension(name) stops it")

    def load_extension(self, config: Dict[str, Any]) -> Any:
        """Starts the extension (its venv made first if need be) and returns its proxy."""
        c = _shoal_config(config)
        proxy = _HostExtension(self, c.name, self._manager.load_extension(c))
        self._loaded[c.name] = proxy
        return proxy

    def get_extension(self, name: str) -> Any:
        return self._loaded[name]

    def stop_extension(self, name: str) -> None:
        if name not in self._loaded:
            raise KeyError("No extension named '%s' is loaded" % name)
        del self._loaded[name]
        self._manager.stop_extension(name)

    def stop_all_extensions(self) -> None:
        for name in list(self._loaded):
            self.stop_extension(name)
        self._manager.close()
