"""shoal.compat.pyisolate: a program written against pyisolate v0.1's documented API
(its README and docstrings: ExtensionManager(ExtensionBase subclass,
ExtensionManagerConfig(venv_root_path=...)), load_extension(ExtensionConfig(name=,
module_path=, isolated=, dependencies=, apis=, share_torch=)), async hooks, awaited calls,
ProxiedSingleton) runs with only its import lines changed. The program's files are
written here as a pyisolate user writes them; the test changes their imports, nothing
else, and runs them. pyisolate itself is not installed (no PyPI here), so the same
program runs only against shoal: what pyisolate would do is taken from its code and
documentation, not run side by side."""
import asyncio
import os
import sys
import textwrap

import pytest

import shoal.compat.pyisolate as pyisolate_compat

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_isolate import tiny_package, venv_root  # noqa: E402,F401  (a fixture)


SHARED = '''
"""Imported by the host and by every extension (pyisolate's example/shared)."""
import os
from typing import Any

from pyisolate import ExtensionBase, ProxiedSingleton, local_execution


class AuditLog(ProxiedSingleton):
    def __init__(self):
        self.lines: list = []

    async def add(self, line: str) -> None:
        self.lines.append(line)

    async def all(self) -> list:
        return self.lines


class DatabaseSingleton(ProxiedSingleton):
    audit: AuditLog  # pyisolate proxies a singleton's singleton-typed attributes too

    def __init__(self):
        self._db: dict = {}
        self.audit = AuditLog()

    async def set_value(self, key: str, value: Any) -> None:
        self._db[key] = value

    async def get_value(self, key: str) -> Any:
        return self._db.get(key, None)

    @local_execution
    def local_pid(self) -> int:
        return os.getpid()


class Tally(ProxiedSingleton):
    """Not in the extensions' apis: each process has its own."""

    def __init__(self):
        self.n = 0

    async def bump(self) -> int:
        self.n += 1
        return self.n


class AppExtensionBase(ExtensionBase):
    async def before_module_loaded(self) -> None:
        self.events = ["before"]

    async def on_module_loaded(self, module) -> None:
        if not getattr(module, "entrypoint", None):
            raise RuntimeError(f"Module {module.__name__} has no entrypoint")
        self.impl = module.entrypoint()
        await self.impl.initialize()
        self.events.append("loaded")

    async def do_stuff(self, value: Any) -> Any:
        return await self.impl.do_stuff(value)

    async def events_seen(self) -> list:
        return self.events

    async def tally(self) -> int:
        return await Tally().bump()

    async def pids(self) -> list:
        return [os.getpid(), DatabaseSingleton().local_pid()]

    async def add_one(self, t) -> None:
        t.add_(1)

    async def grad_mode(self) -> list:
        import torch
        return [torch.is_inference_mode_enabled(), torch.is_grad_enabled()]

    async def wants_callee(self) -> None:
        self.register_callee(self, "me")
'''

EXT_DATA = '''
import tinypkg_shoal

from shared_app import DatabaseSingleton

db = DatabaseSingleton()


class Processor:
    async def initialize(self):
        self.ready = True

    async def do_stuff(self, value):
        await db.set_value("processor", {"value": value, "dep": tinypkg_shoal.VALUE})
        await db.audit.add("processed " + value)
        return f"processed {value}"


def entrypoint():
    return Processor()
'''

EXT_TORCH = '''
class Plain:
    async def initialize(self):
        pass

    async def do_stuff(self, value):
        return value * 2


def entrypoint():
    return Plain()
'''

HOST = '''
import asyncio
import os

import pyisolate
import torch

from shared_app import AppExtensionBase, AuditLog, DatabaseSingleton, Tally


async def async_main(venv_root, data_dir, torch_dir, pkg):
    # pyisolate's example installs pyisolate itself into each venv, from its source
    pyisolate_dir = os.path.dirname(os.path.dirname(os.path.realpath(pyisolate.__file__)))
    config = pyisolate.ExtensionManagerConfig(venv_root_path=venv_root)
    manager = pyisolate.ExtensionManager(AppExtensionBase, config)
    out = {}
    data = manager.load_extension(pyisolate.ExtensionConfig(
        name="data processor", module_path=data_dir, isolated=True,
        dependencies=[pkg, "-e", pyisolate_dir],
        apis=[DatabaseSingleton], share_torch=False))
    # pyisolate's README awaits load_extension
    tensors = await manager.load_extension(pyisolate.ExtensionConfig(
        name="tensors", module_path=torch_dir, isolated=True, dependencies=[],
        apis=[], share_torch=True))

    out["reply"] = await data.do_stuff("hello")
    out["stored"] = await DatabaseSingleton().get_value("processor")
    out["audit"] = await AuditLog().all()
    out["events"] = await data.events_seen()
    out["tallies"] = [await data.tally(), await data.tally(), await Tally().bump()]
    out["pids"] = await data.pids()
    t = torch.zeros(2, 3)
    await tensors.add_one(t)
    await tensors.add_one(t[1])
    out["tensor"] = t.tolist()
    out["grad_mode"] = await tensors.grad_mode()
    out["doubled"] = await tensors.do_stuff(21)
    try:
        await data.wants_callee()
    except Exception as e:
        out["callee_error"] = [type(e).__name__, str(e)]
    out["host_pid"] = os.getpid()

    await data.stop()
    await tensors.stop()
    manager.stop_all_extensions()
    return out


def main(*args):
    return asyncio.run(async_main(*args))
'''


def as_shoal(src):
    """The one change a pyisolate program takes: its imports."""
    return (src.replace("from pyisolate import", "from shoal.compat.pyisolate import")
               .replace("import pyisolate\n", "import shoal.compat.pyisolate as pyisolate\n"))


@pytest.fixture
def app(tmp_path):
    pytest.importorskip("torch")
    d = tmp_path / "app"
    d.mkdir()
    (d / "shared_app.py").write_text(as_shoal(textwrap.dedent(SHARED)))
    (d / "host_app.py").write_text(as_shoal(textwrap.dedent(HOST)))
    for name, src in (("data_ext", EXT_DATA), ("torch_ext", EXT_TORCH)):
        (d / name).mkdir()
        (d / name / "__init__.py").write_text(as_shoal(textwrap.dedent(src)))
    assert "pyisolate" not in as_shoal(EXT_DATA) + as_shoal(EXT_TORCH)
    sys.path.insert(0, str(d))
    try:
        import host_app
        yield host_app, d, tiny_package(tmp_path)
    finally:
        sys.path.remove(str(d))
        for m in ("host_app", "shared_app"):
            sys.modules.pop(m, None)


def test_a_pyisolate_program_runs_with_its_imports_changed(app, venv_root):
    host_app, d, pkg = app
    venvs = venv_root
    out = host_app.main(str(venvs), str(d / "data_ext"), str(d / "torch_ext"), pkg)
    assert out["reply"] == "processed hello"
    # the extension's dependency, pip-installed offline into its own venv, and the
    # host's singleton it was granted
    assert out["stored"] == {"value": "hello", "dep": "installed"}
    assert out["audit"] == ["processed hello"]
    assert out["events"] == ["before", "loaded"]  # async hooks, awaited in order
    assert out["tallies"] == [1, 2, 1]  # Tally is not in its apis: its own
    ext_pid, local_pid = out["pids"]
    assert ext_pid != out["host_pid"] and local_pid == ext_pid  # local_execution
    # share_torch: the extension's in-place writes are the host's tensor's
    assert out["tensor"] == [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]
    assert out["grad_mode"] == [True, False]  # pyisolate's torch.inference_mode()
    assert out["doubled"] == 42
    name, msg = out["callee_error"]
    assert name == "NotImplementedError" and "ProxiedSingleton" in msg
    assert sorted(os.listdir(venvs)) == ["data_processor", "tensors"]

    # run again, as the program's next start: the venvs are kept
    marker = venvs / "data_processor" / ".shoal-venv"
    made = marker.stat().st_mtime_ns
    out = host_app.main(str(venvs), str(d / "data_ext"), str(d / "torch_ext"), pkg)
    assert out["stored"] == {"value": "hello", "dep": "installed"}
    assert marker.stat().st_mtime_ns == made


def test_what_it_does_not_cover_says_so(app, venv_root):
    host_app, d, pkg = app
    p = pyisolate_compat
    import shared_app
    m = p.ExtensionManager(shared_app.AppExtensionBase,
                           p.ExtensionManagerConfig(venv_root_path=str(venv_root)))
    try:
        with pytest.raises(NotImplementedError, match="shoal.isolate.ExtensionConfig"):
            m.load_extension({"name": "x", "module_path": str(d / "torch_ext"),
                              "isolated": True, "dependencies": [], "apis": [],
                              "share_torch": False, "backend": "xpu"})
        with pytest.raises(NotImplementedError, match="get_extension"):
            m.extensions
        with pytest.raises(NotImplementedError, match="qualified name"):
            class Renamed(p.ProxiedSingleton):
                @classmethod
                def get_remote_id(cls):
                    return "other"
        with pytest.raises(NotImplementedError, match="apis"):
            shared_app.DatabaseSingleton.use_remote(None)
        for config in (object(), None, {}):  # pyisolate's manager requires the root too
            with pytest.raises(TypeError, match="ExtensionManagerConfig"):
                p.ExtensionManager(shared_app.AppExtensionBase, config)
        with pytest.raises(KeyError, match="module_path"):
            m.load_extension({"name": "x"})
        # shoal's own fields go in the same dict: here a limit pyisolate lacks
        n = m.load_extension({"name": "limited", "module_path": str(d / "torch_ext"),
                              "isolated": False, "call_timeout": 30, "sandbox": "basic"})
        # a coroutine wherever it is called, as pyisolate's: asyncio.run takes it
        assert asyncio.run(n.do_stuff(2)) == 4
        with pytest.raises(NotImplementedError, match="ProxiedSingleton"):
            n.register_callee(object(), "id")  # plain in pyisolate: raises at once
        asyncio.run(n.stop())
        assert "limited" not in m._loaded
    finally:
        m.stop_all_extensions()
