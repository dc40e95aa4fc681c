"""shoal.isolate: Python extensions in processes of their own, in pyisolate's shapes.

    class Node(shoal.isolate.ExtensionBase):         # shared by host and extension
        def run(self, x): ...

    with shoal.isolate.ExtensionManager(Node) as manager:
        node = manager.load_extension(shoal.isolate.ExtensionConfig(
            name="upscale", module_path="nodes/upscale", sandbox="basic"))
        node.run(3)                  # plain code: the result
        await node.run(3)            # in a coroutine: an awaitable

The extension runs in a python3 process of its own (this one's executable, or the
configured one or venv's) that runs shoal's extension runner, with the same limits,
sandbox levels, deadlines and restarts as a C extension; the module at
``module_path`` is imported there, between the hooks ``before_module_loaded`` and
``on_module_loaded`` of an instance of the manager's class, whose public methods the
host calls.

Values: None, bool, int, float, str, bytes, list, tuple, set, dict, numpy arrays and
torch tensors (copied through shared-memory rings; with ``share_torch`` in its config,
the host's CPU torch tensors are shared both ways, mutable: an extension's in-place
write is the host's tensor's, as with torch.multiprocessing; views of store objects go
by reference through the store, read-only), and types registered on both sides with
:func:`register_type`. Nothing else is ever constructed from what an extension sends:
the host never unpickles, imports or calls anything an extension names, so an extension
cannot run code in its host. An exception in the extension is raised in the host as a
:class:`RemoteError`, which is also of the same builtin type when it is one (its remote
traceback in a note: ``except ValueError`` catches it); a crash raises :class:`ExtensionCrashed` at once in every call in
flight.
"""
from __future__ import annotations

# An extension's process imports this module too, and its start is measured in
# milliseconds: asyncio, concurrent.futures, dataclasses, inspect and traceback
# (together 80 ms here) are imported where they are used, not at the top; threading and
# importlib.util (8 ms with what they import: functools, collections, contextlib) are
# not imported at all. importlib.util's two functions used here are these, which it
# re-exports.
import importlib
import os
import sys
from importlib._bootstrap import module_from_spec as _module_from_spec
from importlib._bootstrap_external import spec_from_file_location as _spec_from_file
# typing only for type checkers (isolate.pyi has the generic manager): see above
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar
    T = TypeVar("T")
    
from . import _shoal, _values
from . import Error
from ._remote import RemoteError, _awaitable, _caller_loop, _envelope_for, _unwrap
from ._values import _CTX, _ByIdentity, _forget, register_type

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

_ECRASHED = _shoal.ECRASHED
_SANDBOX = {"none": 0, "basic": 1, "strict": 2}

# ---- errors ---------------------------------------------------------------------------

class ExtensionCrashed(RuntimeError):
    """The extension's process died with the call in flight (the message names the signal
    or exit status and the method); with ``restart="on_crash"`` the next call starts it
    again."""


class ExtensionLoadError(ImportError):
    """The extension did not start: its module failed to import (the child's traceback
    is in the message), a dependency is missing, or its Python does not fit."""


# ---- the extension's side ---------------------------------------------------------------



class ExtensionBase:
    """The class whose instance lives in the extension's process: the host calls its
    public methods through the proxy ``load_extension`` returns. Subclass it in a module
    both sides import."""

    def before_module_loaded(self) -> None:
        """Runs in the extension before its module is imported."""

    def on_module_loaded(self, module: Any) -> None:
        """Runs in the extension with its module once it is imported."""


def _public_methods(cls: type) -> List[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))
                  and n not in ("before_module_loaded", "on_module_loaded"))


def _findable(name: str) -> bool:
    """Whether the module name can be imported here (without importing it)."""
    if "." in name:  # a parent package would be imported: rare, and importlib.util's job
        import importlib.util
        try:
            return importlib.util.find_spec(name) is not None
        except ImportError:
            return False
    return name in sys.modules or any(
        f.find_spec(name, None) is not None for f in sys.meta_path
        if hasattr(f, "find_spec"))


def _load_module(path: str, name: str) -> Any:
    path = os.path.abspath(path)
    if os.path.isdir(path):
        init = os.path.join(path, "__init__.py")
        spec = _spec_from_file(name, init, submodule_search_locations=[path])
    else:
        spec = _spec_from_file(name, path)
    if spec is None or spec.loader is None:
        raise ExtensionLoadError("%s is not a Python module or package" % path)
    module = _module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# The extension's event loop: its hooks and async methods run on it, call after call,
# so that what one leaves there (a task, a lock, a queue bound to the loop) is there at
# the next, as in pyisolate, whose extension runs one loop for its life.
_LOOP: Any = None


def _run_awaitable(aw: Any) -> Any:
    """Runs a coroutine to its end on this thread: on the extension's loop, or in a loop
    of its own when one runs already (a call nested in an async method, which cannot
    wait on the loop it runs in)."""
    global _LOOP
    import asyncio
    running = asyncio.events._get_running_loop()
    if running is None and _values._IN_CHILD:
        if _LOOP is None or _LOOP.is_closed():
            _LOOP = asyncio.new_event_loop()
        return _LOOP.run_until_complete(aw)
    loop = asyncio.new_event_loop()
    asyncio.events._set_running_loop(None)
    try:
        return loop.run_until_complete(aw)
    finally:
        loop.close()
        asyncio.events._set_running_loop(running)


def _run_hook(r: Any) -> Any:
    """A hook's result: an ``async def`` hook (pyisolate's are) runs to its end here."""
    return _run_awaitable(r) if _awaitable(r) else r


def _child_start() -> Callable[[Any], Any]:
    """In the extension's process (called by child.c once the sandbox is in place): loads
    the extension and returns its dispatcher."""
    _values._IN_CHILD = True
    env = os.environ
    for p in reversed([p for p in env.get("SHOAL_PY_SYS_PATH", "").split(os.pathsep) if p]):
        sys.path.insert(0, p)
    missing = [d for d in env.get("SHOAL_PY_DEPENDENCIES", "").split(",")
               if d and not _findable(d)]
    if missing:
        raise ModuleNotFoundError(
            "missing dependencies: %s (not importable by %s; no package registry is "
            "reached: install them into that Python or venv)" % (", ".join(missing),
                                                                 sys.executable))
    mod_name, _, qual = env["SHOAL_PY_BASE"].partition(":")
    # shoal.compat.pyisolate's share_torch: pyisolate loads the module and runs every
    # call under torch.inference_mode()
    mode: Any = None
    if env.get("SHOAL_PY_INFERENCE_MODE") == "1":
        import torch
        mode = torch.inference_mode
    try:
        base: Any = importlib.import_module(mod_name)
        for part in qual.split("."):
            base = getattr(base, part)
        inst = base()
        _run_hook(inst.before_module_loaded())
        name = env.get("SHOAL_PY_NAME") or "shoal_extension"
        mod_path, mod_as = env["SHOAL_PY_MODULE"], "shoal_ext_" + "".join(
            c if c.isalnum() else "_" for c in name)
        if mode is None:
            module = _load_module(mod_path, mod_as)
        else:
            with mode():
                module = _load_module(mod_path, mod_as)
    except (PermissionError, ModuleNotFoundError) as e:
        # A strict extension is a uid of its own: what the host reads in its home
        # (a 0700 directory) that uid cannot, and a module it cannot read is not found.
        if env.get("SHOAL_PY_SANDBOX") != "strict" or (
                isinstance(e, ModuleNotFoundError) and e.name != mod_name):
            raise
        raise PermissionError(
            "%s (the extension runs as uid %d: a strict extension reads its module, its "
            "base class's module and its sys_path as a uid of its own; keep them where "
            "every user can read them)" % (e, os.getuid())) from None
    if mode is None:
        _run_hook(inst.on_module_loaded(module))
    else:
        with mode():
            _run_hook(inst.on_module_loaded(module))
    allowed = set(_public_methods(base))
    store = env.get("SHOAL_PY_STORE")
    if store:
        # Shared tensors arrive as views of store objects through this connection
        # (they are decoded before the dispatcher runs). A strict sandbox may not
        # reach the store: they are copied then.
        try:
            from . import connect
            _values._CHILD_CLIENT = connect(store)
        except Error:
            _values._CHILD_CLIENT = None

    def dispatch(call: Any) -> List[Any]:
        # this call's arguments are made: the last call's go
        _values._KEPT, _values._MADE = _values._MADE, []
        prev = _CTX.client
        _CTX.client = _values._CHILD_CLIENT
        try:
            method, args, kwargs = call
            if method not in allowed:
                raise AttributeError("%s has no public method %r" % (base.__qualname__, method))
            if mode is None:
                r = getattr(inst, method)(*args, **kwargs)
                if _awaitable(r):
                    r = _run_awaitable(r)
            else:
                with mode():
                    r = getattr(inst, method)(*args, **kwargs)
                    if _awaitable(r):
                        r = _run_awaitable(r)
            return [0, r]
        except BaseException as e:  # everything goes back to the host
            return _envelope_for(e)
        finally:
            _CTX.client = prev
    return dispatch


# ---- host services ----------------------------------------------------------------------

class _Done:
    """What a host-service call returns inside a running event loop: already done, and
    awaitable, so ``await Service().method()`` works as it does with pyisolate."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Any:
        return self.value
        yield  # a generator: the await finishes at once


def local_execution(func: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a method of a :class:`ProxiedSingleton` to run in the process that calls it
    (an extension's own instance) rather than in the host (pyisolate's decorator)."""
    func._is_local_execution = True  # type: ignore[attr-defined]
    return func


# In an extension, the instances of ProxiedSingletons that are its own: those outside its
# config's apis, and those whose local_execution methods it calls.
_LOCAL_SINGLETONS: Dict[type, Any] = {}


def _local_instance(cls: type) -> Any:
    inst = _LOCAL_SINGLETONS.get(cls)
    if inst is None:
        inst = _LOCAL_SINGLETONS[cls] = type.__call__(cls)
    return inst


def _singleton_attribute(cls: type, name: str) -> Any:
    """The ProxiedSingleton class that cls annotates its attribute name with, if any
    (pyisolate's way for one service to hold another)."""
    if not any(name in getattr(c, "__annotations__", {}) for c in cls.__mro__):
        return None
    import typing
    try:
        t = typing.get_type_hints(cls).get(name)
    except Exception:  # an annotation that does not resolve here: not a service then
        return None
    return t if isinstance(t, type) and issubclass(t, ProxiedSingleton) else None


class _ServiceProxy:
    def __init__(self, cls: type) -> None:
        self._cls = cls

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        if getattr(getattr(self._cls, method, None), "_is_local_execution", False):
            return getattr(_local_instance(self._cls), method)
        other = _singleton_attribute(self._cls, method)
        if other is not None:
            return _ServiceProxy(other)  # the host's instance's attribute, as pyisolate
        service = "%s.%s" % (self._cls.__qualname__, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            r = _unwrap(_shoal._call_host(service, [list(args), kwargs]), service)
            return _Done(r) if _caller_loop() is not None else r
        return call


class _Singleton(type):
    """Cls() of a ProxiedSingleton: its one instance in the host, a proxy in an
    extension."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if _values._IN_CHILD:
            apis = os.environ.get("SHOAL_PY_APIS")
            if apis is None or cls.__qualname__ in apis.split(","):
                return _ServiceProxy(cls)
            return _local_instance(cls)  # not granted by the config: the extension's own
        inst = cls.__dict__.get("_shoal_instance")
        if inst is None:
            inst = super().__call__(*args, **kwargs)
            cls._shoal_instance = inst  # type: ignore[attr-defined]
        return inst


class ProxiedSingleton(metaclass=_Singleton):
    """A service of the host that extensions call: in the host ``Cls()`` is its one
    instance; in an extension ``Cls()`` is a proxy whose methods run in the host (calls
    nest both ways: the host's method may call the extension again)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if _values._IN_CHILD:
            return
        for method in _public_methods(cls):
            _shoal.register_service("%s.%s" % (cls.__qualname__, method), _service(cls, method))


def _service(cls: type, method: str) -> Callable[[Any], List[Any]]:
    def serve(payload: Any) -> List[Any]:
        try:
            args, kwargs = payload
            r = getattr(cls(), method)(*args, **kwargs)
            if _awaitable(r):
                r = _run_awaitable(r)
            return [0, r]
        except BaseException as e:
            return _envelope_for(e)
    return serve


# ---- the host's side --------------------------------------------------------------------

class ExtensionConfig:
    """How to run one extension (pyisolate's ExtensionConfig, and shoal's limits).

    - name, module_path: the extension's name (in messages) and its module, a file or a
      package directory.
    - python: a Python executable or a venv's directory (made with ``python3 -m venv
      --system-site-packages``); it must be CPython 3.11, as shoal's. None: this one.
    - sys_path, env, cwd: more import paths, environment variables, its directory.
    - dependencies: with a manager whose config has ``venv_root_path``, pip requirement
      specs installed into the extension's own venv (pyisolate's meaning: see
      :class:`ExtensionManagerConfig`); without one, module names that must import
      there (nothing is installed), a missing one failing the start.
    - isolated: pyisolate's meaning: True, the extension gets a venv of its own (with a
      manager's ``venv_root_path``); False, it runs in the host's Python environment (this
      Python and its packages, no venv, nothing installed). Either way it is a process of
      its own, as in pyisolate.
    - apis: the :class:`ProxiedSingleton` classes whose ``Cls()`` in this extension is the
      host's instance (pyisolate's meaning); any other ProxiedSingleton there is a local
      one of the extension's. None (the default): every ProxiedSingleton is the host's.
    - share_torch: the host's CPU torch tensors are shared with the extension both ways
      (torch.multiprocessing's meaning): their storage moves into shared memory once
      (``share_memory_()``) and the extension maps the same pages writable, so an
      in-place write there is the host's tensor's (see :class:`ExtensionManager`);
      numpy arrays are copied.
    - sandbox: "none", "basic" (hygiene: a cleared environment, no inherited
      descriptors) or "strict" (namespaces, no privileges, a seccomp allow-list);
      allow_network keeps IP sockets at strict.
    - mem_max (bytes), cpu_limit (seconds of CPU), max_files: its limits.
    - call_timeout, start_timeout: seconds, None for none.
    - restart: "never", or "on_crash" (started again at the next call after a crash).
    - log_output: its stdout and stderr into shoal's log, a line at a time.
    """

    _FIELDS = ("name", "module_path", "python", "sys_path", "env", "cwd", "dependencies",
               "isolated", "apis", "share_torch", "sandbox", "allow_network", "mem_max",
               "cpu_limit", "max_files", "call_timeout", "start_timeout", "restart",
               "log_output")

    def __init__(self, name: str, module_path: str, python: Optional[str] = None,
                 sys_path: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None,
                 cwd: Optional[str] = None, dependencies: Optional[List[str]] = None,
                 share_torch: bool = False, sandbox: str = "basic",
                 allow_network: bool = False, mem_max: Optional[int] = None,
                 cpu_limit: Optional[int] = None, max_files: Optional[int] = None,
                 call_timeout: Optional[float] = None, start_timeout: Optional[float] = 30.0,
                 restart: str = "never", log_output: bool = False, isolated: bool = True,
                 apis: Optional[List[type]] = None) -> None:
        self.isolated = isolated
        self.apis = None if apis is None else list(apis)
        for a in self.apis or []:
            if not (isinstance(a, type) and issubclass(a, ProxiedSingleton)):
                raise TypeError("%s: apis takes ProxiedSingleton subclasses; got %r"
                                % (name, a))
        self.name = name
        self.module_path = module_path
        self.python = python
        self.sys_path = list(sys_path or [])
        self.env = dict(env or {})
        self.cwd = cwd
        self.dependencies = list(dependencies or [])
        self.share_torch = share_torch
        self.sandbox = sandbox
        self.allow_network = allow_network
        self.mem_max = mem_max
        self.cpu_limit = cpu_limit
        self.max_files = max_files
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        self.restart = restart
        self.log_output = log_output

    def __repr__(self) -> str:
        return "ExtensionConfig(%s)" % ", ".join("%s=%r" % (f, getattr(self, f))
                                                 for f in self._FIELDS)


# What an extension's python3 runs: this package from where the host has it (the first
# argument), then shoal-ext's code with the rest (the runner's options). -S: site-packages
# are read only once the runner has applied the sandbox (child.c); -P: neither the working
# directory nor the script's is put on sys.path.
_BOOT = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from shoal import _shoal; "
         "sys.exit(_shoal._run_extension(sys.argv[1:]))")


def _python_of(config: ExtensionConfig, venv: Optional[str] = None) -> str:
    """The extension's python3: ours (the CPython this package is built for), or the one
    configured (or the venv made for it), checked to be our CPython's version."""
    p = venv or config.python
    if not p:
        if not sys.executable:
            raise ExtensionLoadError("%s: this Python does not know its executable: give "
                                     "ExtensionConfig(python=...)" % config.name)
        return sys.executable
    if os.path.isdir(p):
        cfg = os.path.join(p, "pyvenv.cfg")
        exe = os.path.join(p, "bin", "python3")
        if not os.path.exists(cfg) or not os.path.exists(exe):
            raise ExtensionLoadError("%s: python is neither an executable nor a venv "
                                     "(no pyvenv.cfg and bin/python3)" % config.name)
        with open(cfg) as f:
            kv = dict(line.split("=", 1) for line in f if "=" in line)
        version = kv.get("version", kv.get("version_info ", "")).strip()
        want = "%d.%d" % sys.version_info[:2]
        if version and not (version == want or version.startswith(want + ".")):
            raise ExtensionLoadError(
                "%s: the venv %s is Python %s; shoal's extensions run CPython %s, the one "
                "shoal was built with" % (config.name, p, version, want))
        return os.path.abspath(exe)
    if not os.access(p, os.X_OK):
        raise ExtensionLoadError("%s: python %s is not an executable" % (config.name, p))
    return os.path.abspath(p)


def _base_spec(base: type) -> Tuple[str, str]:
    """'module:qualname' of the manager's class, and the directory its module imports
    from, so that the extension's process finds it."""
    mod = sys.modules[base.__module__]
    path = os.path.abspath(getattr(mod, "__file__", "") or "")
    root = os.path.dirname(path)
    if os.path.basename(path) == "__init__.py":
        root = os.path.dirname(root)
    for _ in range(base.__module__.count(".")):
        root = os.path.dirname(root)
    return "%s:%s" % (base.__module__, base.__qualname__), root


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


# ---- venvs ------------------------------------------------------------------------------

class ExtensionManagerConfig:
    """How a manager runs its extensions (pyisolate's ExtensionManagerConfig).

    - venv_root_path: where isolated extensions' venvs are made, one per extension, in a
      directory named after it: ``python3 -m venv --system-site-packages`` of this
      Python (so that what the host has, numpy, torch and shoal itself, imports there
      too), then ``pip install`` of its ``dependencies``. A venv is kept, and used again
      by the next load, while its dependencies, Python and share_torch are the same (a
      hash of them in the venv's ``.shoal-venv``); made again when they differ. Local
      paths (a directory, a wheel, ``-e DIR``) install offline (``--no-index
      --no-build-isolation``, with what this Python has to build them); a requirement
      from a registry (``numpy>=2``) needs one pip reaches, else the load fails with an
      :class:`ExtensionLoadError` naming it. None: no venvs; ``dependencies`` are module
      names that must import in the extension's Python.
    """

    def __init__(self, venv_root_path: Optional[str] = None) -> None:
        self.venv_root_path = venv_root_path

    def __repr__(self) -> str:
        return "ExtensionManagerConfig(venv_root_path=%r)" % (self.venv_root_path,)


def _venv_dir_name(name: str) -> str:
    """A directory name of an extension's name: nothing that climbs out of the root or
    that a shell would read (pyisolate's rule)."""
    out = "".join(c if (c.isalnum() or c in "-_.") else "_" for c in name).strip("._")
    while "__" in out:
        out = out.replace("__", "_")
    if not out:
        raise ValueError("extension name %r has no character a directory name can keep"
                         % name)
    return out


def _pip_args(name: str, deps: List[str]) -> Tuple[List[str], List[str]]:
    """pip's arguments for the dependencies, and the requirements among them that need a
    registry (the rest are local paths, installed offline)."""
    args: List[str] = []
    remote: List[str] = []
    i = 0
    while i < len(deps):
        d = deps[i].strip()
        i += 1
        if not d:
            continue
        if d == "-e" or d.startswith("-e "):
            path = d[2:].strip() if d != "-e" else (deps[i].strip() if i < len(deps) else "")
            if d == "-e":
                i += 1
            if not path or not os.path.exists(path):
                raise ExtensionLoadError("%s: dependency -e %s: expected an existing "
                                         "directory to install in editable mode" % (name, path))
            args += ["-e", os.path.abspath(path)]
            continue
        if d.startswith("-"):
            raise ValueError("%s: dependency %r: expected a requirement or a path, not a pip "
                             "option (only -e DIR is taken)" % (name, d))
        if any(c in d for c in ("\n", "\r", "\0")):
            raise ValueError("%s: dependency %r: a requirement is one line" % (name, d))
        local = d[7:] if d.startswith("file://") else d
        if os.sep in local and os.path.exists(local) or os.path.isdir(local) or (
                local.endswith(".whl") and os.path.exists(local)):
            args.append(os.path.abspath(local))
        else:
            args.append(d)
            remote.append(d)
    return args, remote


def _make_venv(name: str, root: str, deps: List[str], share_torch: bool) -> str:
    """The extension's venv under root, made (or made again) unless the one there has
    these dependencies already."""
    import hashlib
    import json
    import shutil
    import subprocess
    args, remote = _pip_args(name, deps)
    venv = os.path.join(os.path.abspath(root), _venv_dir_name(name))
    key = hashlib.sha256(json.dumps(
        {"deps": deps, "python": sys.version, "executable": sys.executable,
         "share_torch": share_torch}).encode()).hexdigest()
    marker = os.path.join(venv, ".shoal-venv")
    try:
        with open(marker) as f:
            if f.read().strip() == key:
                return venv
    except OSError:
        pass
    if os.path.lexists(venv):
        shutil.rmtree(venv)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    py = os.path.join(venv, "bin", "python3")

    def run(cmd: List[str], what: str) -> None:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise ExtensionLoadError("%s: %s failed (exit status %d):\n%s" % (
                name, what, p.returncode, p.stdout.strip()[-4000:]))

    # Without pip of its own: this Python's (Debian's python3-pip, in the system
    # site-packages the venv sees) installs into the venv it runs in, in a tenth of the
    # time ensurepip takes; ensurepip only where this Python has none.
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
        "making the venv %s (python3 -m venv; Debian needs python3-venv)" % venv)
    if subprocess.run([py, "-c", "import pip"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        run([py, "-m", "ensurepip", "--default-pip"], "installing pip into %s" % venv)
    if args:
        pip = [py, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
               "--no-build-isolation"]
        if not remote:
            pip.append("--no-index")
        else:
            pip += ["--timeout", "15", "--retries", "1"]
        p = subprocess.run(pip + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            reach = (" (%s from a package registry, which pip could not reach or which has "
                     "no such release: install it from a local path or wheel instead)"
                     % ", ".join(remote)) if remote else ""
            raise ExtensionLoadError("%s: pip could not install the dependencies %s%s:\n%s"
                                     % (name, ", ".join(deps), reach,
                                        p.stdout.strip()[-4000:]))
    with open(marker, "w") as f:
        f.write(key + "\n")
    return venv


class _Extension:
    """One running extension: its C handle and the thread its async calls run on."""

    def __init__(self, manager: "ExtensionManager[Any]", config: ExtensionConfig) -> None:
        self.config = config
        if config.sandbox not in _SANDBOX:
            raise ValueError("sandbox %r: expected none, basic or strict" % config.sandbox)
        if config.restart not in ("never", "on_crash"):
            raise ValueError("restart %r: expected never or on_crash" % config.restart)
        spec, root = _base_spec(manager.base)
        deps = config.dependencies
        if manager.venv_root_path is not None and config.isolated and config.python is None:
            exe = _python_of(config, _make_venv(config.name, manager.venv_root_path, deps,
                                                config.share_torch))
            deps = []  # installed: pip has checked them
        else:
            if not config.isolated and deps and manager.venv_root_path is not None:
                raise NotImplementedError(
                    "%s: dependencies %s with isolated=False: the extension runs in the "
                    "host's Python environment, which shoal does not install into; install "
                    "them there (and list their module names), or give isolated=True for a "
                    "venv of its own" % (config.name, ", ".join(deps)))
            exe = _python_of(config)
        for api in config.apis or []:
            api()  # the host's instance exists before the extension asks for it
        env = {k: os.environ[k] for k in _shoal._SANITIZER_ENV if k in os.environ}
        env.update(config.env)
        env.update({
            "SHOAL_PY_NAME": config.name,
            "SHOAL_PY_MODULE": os.path.abspath(config.module_path),
            "SHOAL_PY_BASE": spec,
            "SHOAL_PY_SYS_PATH": os.pathsep.join([os.path.abspath(p) for p in config.sys_path]
                                                 + [root]),
            "SHOAL_PY_DEPENDENCIES": ",".join(deps),
            "SHOAL_PY_SANDBOX": config.sandbox,
        })
        if config.apis is not None:
            env["SHOAL_PY_APIS"] = ",".join(a.__qualname__ for a in config.apis)
        # Arguments of tens of MiB become new Python objects there call after call, in
        # memory glibc maps afresh each time (32 MiB and up): a page fault per 4 KiB,
        # 0.2 s for 50 MiB on a VM. In 2 MiB pages (glibc asks for them where the
        # kernel's transparent huge pages are "madvise", as Debian's are) a fiftieth.
        tun = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
        if not any(t.startswith("glibc.malloc.hugetlb=") for t in tun):
            env["GLIBC_TUNABLES"] = ":".join(tun + ["glibc.malloc.hugetlb=1"])
        self.manager = manager
        store = manager.store_socket() if config.share_torch else None
        if store:
            env["SHOAL_PY_STORE"] = store
        c: Dict[str, Any] = {
            # shoal-ext's code in a python3 process (see _BOOT); its "extension" is the
            # module, which the runner only names
            "runner": exe, "runner_args": ["-S", "-P", "-c", _BOOT, os.path.dirname(_PKG_DIR)],
            "path": os.path.abspath(config.module_path), "name": config.name,
            "env": ["%s=%s" % kv for kv in env.items()], "cwd": config.cwd,
            "sandbox": _SANDBOX[config.sandbox], "allow_network": config.allow_network,
            "mem_max": config.mem_max, "cpu_limit": config.cpu_limit,
            "max_files": config.max_files, "call_timeout": config.call_timeout,
            "start_timeout": config.start_timeout, "restart": config.restart == "on_crash",
            "log_output": config.log_output, "store_socket": store,
            # what a strict one may read of the store: what this process's connection
            # holds, the tensors it shares with it
            "store_grant": manager.client.claim() if store and config.sandbox == "strict"
            else 0,
            "shared": config.share_torch,
        }
        try:
            self.ext = _shoal.Extension(c)
        except Error as e:
            raise ExtensionLoadError("%s: %s" % (config.name, e.message)) from None
        self.methods = _public_methods(manager.base)
        self._pool: Any = None

    @property
    def pool(self) -> Any:
        """The thread this extension's calls from asyncio run on, in order."""
        if self._pool is None:
            import concurrent.futures
            self._pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="shoal-ext-" + self.config.name)
        return self._pool

    def call(self, method: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        where = "%s.%s" % (self.config.name, method)
        prev = _CTX.client, _CTX.cache, _CTX.host_share
        if self.config.share_torch:
            _CTX.client, _CTX.cache = self.manager.client, self.manager.shared
            # a strict extension is a uid of its own, which cannot open the host's
            # descriptors: its tensors go through the store, read-only, as copies there
            _CTX.host_share = self.config.sandbox != "strict"
        else:
            _CTX.client, _CTX.cache, _CTX.host_share = None, None, False
        try:
            env = self.ext.call("call", [method, list(args), kwargs])
        except Error as e:
            # the C layer names the one function every method goes through
            msg = e.message.replace("call()", method + "()")
            if e.code == _ECRASHED:
                raise ExtensionCrashed(msg) from None
            again = type(e)(msg)
            again.code, again.message = e.code, msg
            raise again from None
        finally:
            _CTX.client, _CTX.cache, _CTX.host_share = prev
        return _unwrap(env, where)

    def stop(self) -> None:
        self.ext.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=False)


class _Proxy:
    """Calls the extension: each public method of the manager's class is one."""

    def __init__(self, ext: _Extension) -> None:
        self._ext = ext

    def __getattr__(self, method: str) -> Callable[..., Any]:
        ext = self._ext
        if method not in ext.methods:
            raise AttributeError("%s has no public method %r" % (ext.config.name, method))

        def call(*args: Any, **kwargs: Any) -> Any:
            loop = _caller_loop()
            if loop is None:
                return ext.call(method, args, kwargs)
            return loop.run_in_executor(ext.pool, ext.call, method, args, kwargs)
        call.__name__ = method
        return call

    def __repr__(self) -> str:
        return "<extension %s (pid %d)>" % (self._ext.config.name, self._ext.ext.pid)


class ExtensionManager:
    """Starts, calls and stops extensions whose instances are of class base.

    Extensions with ``share_torch`` share the host's CPU torch tensors in place: the
    tensor's storage moves into shared memory at its first call (torch's
    ``share_memory_()``: every view of it follows; a tensor made with
    ``torch.from_numpy`` no longer shares the array's memory after) and the extension
    maps those pages writable, so that writes either side makes are the other's; these
    tensors are mutable, outside the store and its immutability. What the extension
    returns of such a tensor is a view of the host's. Under ``sandbox="strict"`` (a uid
    of its own, which cannot open the host's memory) they go as below, and an in-place
    write there is the extension's copy's alone.

    A strict extension's host tensors, and views of store objects either side passes,
    go through a store (numpy arrays and what an extension makes itself are copied):
    ``store`` (a socket path, or a :class:`shoal.Store`), else one this manager starts
    in its process at the first such extension, sized half the machine's memory (a
    limit, not an allocation); a host tensor put there once passes by reference until it
    changes; what arrives is a read-only view, on either side."""

    def __class_getitem__(cls, item: Any) -> Any:
        return cls  # ExtensionManager[Node] in annotations; isolate.pyi types it

    def __init__(self, base: Type[T], config: Any = None, *, store: Any = None) -> None:
        if not (isinstance(base, type) and issubclass(base, ExtensionBase)):
            raise TypeError("ExtensionManager takes a subclass of ExtensionBase")
        if isinstance(config, dict):  # pyisolate's config is a TypedDict
            unknown = set(config) - {"venv_root_path"}
            if unknown:
                raise TypeError("ExtensionManager config: expected venv_root_path; got also "
                                "%s" % ", ".join(sorted(unknown)))
            config = ExtensionManagerConfig(**config)
        if config is not None and not isinstance(config, ExtensionManagerConfig):
            raise TypeError("ExtensionManager config: expected an ExtensionManagerConfig or "
                            "None; got %s" % type(config).__name__)
        self.config = config or ExtensionManagerConfig()
        self.venv_root_path = self.config.venv_root_path
        self.base = base
        self._exts: Dict[str, _Extension] = {}
        self._store_arg = store
        self._own_store: Any = None
        self._client: Any = None
        self.shared = _ByIdentity(_forget)

    def store_socket(self) -> str:
        """The socket of the store shared tensors go through (started if need be)."""
        s = self._store_arg
        if isinstance(s, str):
            return s
        if s is not None:
            return str(s.socket)
        if self._own_store is None:
            from . import Store
            half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
            self._own_store = Store(size=half)
        return str(self._own_store.socket)

    @property
    def client(self) -> Any:
        """This process's connection to that store."""
        if self._client is None:
            from . import connect
            self._client = connect(self.store_socket())
        return self._client

    def load_extension(self, config: ExtensionConfig) -> T:
        """Starts the extension (blocks until its module is loaded) and returns a proxy
        of the manager's class whose methods run there."""
        if config.name in self._exts:
            raise ValueError("an extension named %r is loaded already" % config.name)
        ext = _Extension(self, config)
        self._exts[config.name] = ext
        return _Proxy(ext)  # type: ignore[return-value]

    def get_extension(self, name: str) -> T:
        return _Proxy(self._exts[name])  # type: ignore[return-value]

    def stop_extension(self, name: str) -> None:
        self._exts.pop(name).stop()

    def stop_all_extensions(self) -> None:
        for name in list(self._exts):
            self.stop_extension(name)

    def close(self) -> None:
        """Stops every extension, then the store this manager started, if any."""
        self.stop_all_extensions()
        self.shared = _ByIdentity(_forget)
        self._client = None  # it goes when the views got through it do
        if self._own_store is not None:
            self._own_store.close()
            self._own_store = None

    def __enter__(self) -> "ExtensionManager[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
