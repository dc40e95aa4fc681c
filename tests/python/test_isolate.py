"""shoal.isolate: Python extensions in real extension processes (python3 running shoal's
extension runner), called from this test's process as pyisolate's users call theirs."""
import asyncio
import gc
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

import shoal
import shoal.isolate as si

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iso_app  # noqa: E402  (the application both sides import)
from conftest import stop  # noqa: E402

np = pytest.importorskip("numpy")


def module(tmp_path, name, code):
    p = tmp_path / (name + ".py")
    p.write_text(textwrap.dedent(code))
    return str(p)


@pytest.fixture
def manager():
    with si.ExtensionManager(iso_app.Node) as m:
        yield m


@pytest.fixture(params=["copy", "shared"])
def any_node(request, tmp_path):
    """An extension in each payload mode (shared: tensors through a store)."""
    with shoal.Store(size=256 << 20, socket=str(tmp_path / "m.sock")) as store, \
            si.ExtensionManager(iso_app.Node, store=store) as m:
        yield m.load_extension(si.ExtensionConfig(
            name=request.param, module_path=module(tmp_path, "m", "x = 1"),
            share_torch=request.param == "shared")), request.param == "shared"


@pytest.fixture
def node(manager, tmp_path):
    path = module(tmp_path, "plain", """
        class Custom(Exception):
            pass

        def div(a, b):
            return a // b

        def custom():
            raise Custom("made here")

        def segfault():
            import ctypes
            ctypes.string_at(0)

        def leave(code):
            import os
            os._exit(code)

        def spin():
            while True:
                pass

        def hog(mb):
            global kept
            kept = bytearray(mb << 20)
            for i in range(0, len(kept), 4096):
                kept[i] = 1
            return len(kept)

        def forged(kind):
            import shoal.isolate as si
            if kind == "type":
                si.register_type(complex, lambda c: [c.real, c.imag], complex,
                                 name="os.system")
                return 1j
            if kind == "tag":
                return {b"\\0shoal": ["builtins.eval", "1+1"]}
            if kind == "error":
                raise type("system", (Exception,), {"__module__": "os"})("rm -rf /")
    """)
    n = manager.load_extension(si.ExtensionConfig(name="plain", module_path=path,
                                                  call_timeout=20))
    iso_app.Counter().ext = n
    return n


VALUES = [None, True, False, 0, -1, 2**63 - 1, -2**63, 1.5, float("inf"), "", "héllo",
          "x" * 5000, b"", b"\x00\xff", b"y" * 10000, bytearray(b"ba"), [], [1, [2, [3]]],
          (), (1, "two", (3.0,)), {1, 2, 3}, frozenset({"a"}), {}, {"a": 1, "b": [1, 2]},
          {1: "int key", (1, 2): "tuple key", None: "none key"},
          {b"\x00shoal": "a dict whose key is shoal's tag"}, iso_app.Point(1, 2),
          [iso_app.Point(3, 4), {"p": iso_app.Point(5, 6)}]]


def test_every_value_kind_both_ways(any_node):
    node, _ = any_node
    for v in VALUES:
        got = node.echo(v)
        want = bytes(v) if isinstance(v, bytearray) else v
        assert got == want and type(got) is type(want), (v, got)
    with pytest.raises(OverflowError):
        node.echo(2**64)
    with pytest.raises(TypeError) as e:
        node.echo(object())
    assert "register_type" in str(e.value)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64", "int32", "int16",
                                   "int8", "uint64", "uint32", "uint16", "uint8", "bool"])
def test_numpy_arrays_both_ways(any_node, dtype):
    node, shared = any_node
    for shape in [(), (0,), (7,), (3, 5), (2, 0, 4), (1,) * 32]:
        a = (np.arange(int(np.prod(shape))) % 3).astype(dtype).reshape(shape)
        got = node.echo(a)
        assert isinstance(got, np.ndarray) and got.dtype == a.dtype and got.shape == a.shape
        assert np.array_equal(got, a)
        if not shared:
            got[...] = 0  # a copy is the receiver's own
    t = np.arange(12, dtype=np.int32).reshape(3, 4).T  # not contiguous
    assert np.array_equal(node.echo(t), t)


def test_torch_tensors_both_ways(any_node):
    node, shared = any_node
    torch = pytest.importorskip("torch")
    for t in [torch.rand(10, 10), torch.arange(6, dtype=torch.int64).reshape(2, 3),
              torch.tensor([1.5, -2.0], dtype=torch.bfloat16), torch.tensor([True, False]),
              torch.zeros(0, 3), torch.tensor(3.0), torch.rand(4, 4).t()]:
        got = node.echo(t)
        assert isinstance(got, torch.Tensor) and got.dtype == t.dtype and got.shape == t.shape
        assert torch.equal(got, t)
    big = torch.rand(1024, 1024)
    two = node.echo([big, {"again": big}])
    assert torch.equal(two[0], big) and torch.equal(two[1]["again"], big)


def test_hooks_run_in_order_in_another_process(node):
    assert node.order_of_hooks() == ["before", "loaded:plain"]
    assert node.pid() != os.getpid()
    assert node.add(2, b=3) == 5


def test_async_hooks_are_awaited_and_async_methods_share_their_loop(tmp_path):
    with si.ExtensionManager(iso_app.AsyncNode) as m:
        n = m.load_extension(si.ExtensionConfig(
            name="hooks", module_path=module(tmp_path, "hooked", "def three():\n    return 3\n")))
        # the module was handed over: a hook's coroutine ran to its end
        assert n.order_of_hooks() == ["before-async", "loaded-async:hooks"]
        assert n.run("three") == 3
        assert n.same_loop() is True and n.same_loop() is True

        async def main():
            return await n.same_loop()
        assert asyncio.run(main()) is True


def test_apis_grant_the_hosts_singleton(tmp_path):
    path = module(tmp_path, "granted", "x = 1")
    with si.ExtensionManager(iso_app.AsyncNode) as m:
        yes = m.load_extension(si.ExtensionConfig(name="yes", module_path=path,
                                                  apis=[iso_app.Registry]))
        no = m.load_extension(si.ExtensionConfig(name="no", module_path=path, apis=[]))
        assert yes.registry_pid() == os.getpid()  # the host's instance
        assert no.registry_pid() == no.pid()  # not granted: the extension's own
    with pytest.raises(TypeError, match="ProxiedSingleton"):
        si.ExtensionConfig(name="bad", module_path=path, apis=[dict])


def test_environment_working_directory_and_sys_path(manager, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper_mod.py").write_text("VALUE = 'from sys_path'\n")
    work = tmp_path / "work"
    work.mkdir()
    path = module(tmp_path, "envy", """
        import os, helper_mod
        def where():
            return [os.environ.get("EXT_FLAVOUR"), os.getcwd(), helper_mod.VALUE,
                    "HOME_SECRET" in os.environ]
    """)
    os.environ["HOME_SECRET"] = "not for extensions"
    try:
        n = manager.load_extension(si.ExtensionConfig(
            name="envy", module_path=path, env={"EXT_FLAVOUR": "mint"}, cwd=str(work),
            sys_path=[str(lib)], sandbox="basic"))
        # basic: a cleared environment, plus what the config gives
        assert n.run("where") == ["mint", str(work), "from sys_path", False]
    finally:
        del os.environ["HOME_SECRET"]


def test_exceptions_keep_type_message_and_traceback(node):
    with pytest.raises(ZeroDivisionError) as e:
        node.run("div", 1, 0)
    assert "integer division or modulo by zero" in str(e.value)
    assert "Traceback" in e.value.remote_traceback
    assert any("remote traceback" in n for n in e.value.__notes__)
    with pytest.raises(si.RemoteError) as r:
        node.run("custom")
    assert r.value.type_name.endswith(".Custom") and r.value.message == "made here"
    assert "raise Custom" in r.value.remote_traceback
    with pytest.raises(AttributeError):
        node.no_such_method()


def test_host_services_and_nesting(node):
    c = iso_app.Counter()
    before = c.n
    assert node.bump_host(5) == before + 5 and c.n == before + 5
    assert node.down(3) == ["host0", "ext1", "host2", "ext3"]
    assert node.down(5) == ["host0", "ext1", "host2", "ext3", "host4", "ext5"]
    with pytest.raises(KeyError) as e:
        node.host_error()  # a host service's exception reaches the extension, then us
    assert "no such key on the host" in str(e.value)


def test_async_calls(node):
    async def main():
        got = await asyncio.gather(*[node.slow_echo(i) for i in range(100)])
        assert got == list(range(100))
        assert await node.await_host(1) >= 1
        return await node.add(1, 2)
    assert asyncio.run(main()) == 3
    assert node.add(1, 2) == 3  # plain code needs no event loop


def test_a_crash_raises_at_once_and_restart_brings_it_back(manager, tmp_path):
    path = module(tmp_path, "crashy", """
        def segfault():
            import ctypes
            ctypes.string_at(0)
    """)
    # under ASan the child's SIGSEGV is the kernel's to report, as without it
    n = manager.load_extension(si.ExtensionConfig(
        name="crashy", module_path=path, restart="on_crash",
        env={"ASAN_OPTIONS": "handle_segv=0:detect_leaks=0"}))
    first = n.pid()
    t0 = time.monotonic()
    with pytest.raises(si.ExtensionCrashed) as e:
        n.run("segfault")
    assert time.monotonic() - t0 < 5
    assert "SIGSEGV" in str(e.value) and "run()" in str(e.value)
    assert n.pid() != first  # started again


def test_exit_deadline_and_memory_limit(manager, tmp_path, node):
    with pytest.raises(si.ExtensionCrashed) as e:
        node.run("leave", 7)
    assert "status 7" in str(e.value)
    path = module(tmp_path, "limited", """
        def spin():
            while True:
                pass

        def hog(mb):
            kept = bytearray(mb << 20)
            for i in range(0, len(kept), 4096):
                kept[i] = 1
            return len(kept)
    """)
    n = manager.load_extension(si.ExtensionConfig(name="limited", module_path=path,
                                                  call_timeout=0.5, mem_max=256 << 20,
                                                  restart="on_crash"))
    t0 = time.monotonic()
    with pytest.raises(shoal.Timeout) as t:
        n.run("spin")
    assert time.monotonic() - t0 < 10 and "run()" in str(t.value)
    assert n.run("hog", 16) == 16 << 20
    n = manager.load_extension(si.ExtensionConfig(name="hungry", module_path=path,
                                                  mem_max=256 << 20))
    with pytest.raises(si.ExtensionCrashed) as e:
        n.run("hog", 1024)
    assert "memory" in str(e.value) or "SIGKILL" in str(e.value)


def test_an_import_error_fails_the_load_at_once(manager, tmp_path):
    path = module(tmp_path, "broken", """
        import no_such_module_anywhere
    """)
    t0 = time.monotonic()
    with pytest.raises(si.ExtensionLoadError) as e:
        manager.load_extension(si.ExtensionConfig(name="broken", module_path=path))
    assert time.monotonic() - t0 < 5
    assert "no_such_module_anywhere" in str(e.value) and "Traceback" in str(e.value)
    with pytest.raises(si.ExtensionLoadError) as e:
        manager.load_extension(si.ExtensionConfig(
            name="deps", module_path=module(tmp_path, "fine", "x = 1"),
            dependencies=["numpy", "math", "json.decoder", "surely_not_installed_pkg",
                          "json.surely_not_a_submodule"]))
    missing = str(e.value).split("missing dependencies: ")[1].split(" (")[0]
    assert missing == "surely_not_installed_pkg, json.surely_not_a_submodule"


def test_a_venv_with_system_site_packages(manager, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages",
                    "--without-pip", str(venv)], check=True)
    path = module(tmp_path, "invenv", """
        import sys
        def prefix():
            return sys.prefix
    """)
    n = manager.load_extension(si.ExtensionConfig(name="venv", module_path=path,
                                                  python=str(venv), dependencies=["numpy"]))
    assert n.run("prefix") == str(venv)


def tiny_package(tmp_path, name="tinypkg_shoal", value="installed"):
    """A package's source tree, for pip to install offline (setuptools, no build
    isolation: what Debian's python3 has)."""
    src = tmp_path / ("src_" + name)
    (src / name).mkdir(parents=True)
    (src / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "%s"
        version = "0.1"
    """ % name.replace("_", "-")))
    (src / name / "__init__.py").write_text("VALUE = %r\n" % value)
    return str(src)


@pytest.fixture
def venv_root(tmp_path):
    """Where the test's venvs go; removed after it (pytest keeps its tmp directories)."""
    root = tmp_path / "venvs"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_venvs_made_per_extension_and_kept(tmp_path, venv_root):
    pkg = tiny_package(tmp_path)
    root = venv_root
    path = module(tmp_path, "usespkg", """
        import sys, tinypkg_shoal
        def where():
            return [tinypkg_shoal.VALUE, sys.prefix]
    """)
    cfg = si.ExtensionManagerConfig(venv_root_path=str(root))
    venv = root / "with_pkg"
    with si.ExtensionManager(iso_app.Node, cfg) as m:
        n = m.load_extension(si.ExtensionConfig(name="with pkg", module_path=path,
                                                dependencies=[pkg]))
        assert n.run("where") == ["installed", str(venv)]
    marker = venv / ".shoal-venv"
    made = marker.stat().st_mtime_ns
    (venv / "left-by-the-test").write_text("")
    # the same dependencies again (another manager, as a new run of the program): kept
    with si.ExtensionManager(iso_app.Node, {"venv_root_path": str(root)}) as m:
        n = m.load_extension(si.ExtensionConfig(name="with pkg", module_path=path,
                                                dependencies=[pkg]))
        assert n.run("where") == ["installed", str(venv)]
    assert marker.stat().st_mtime_ns == made and (venv / "left-by-the-test").exists()
    # other dependencies: made again, here editable (-e), offline too
    with si.ExtensionManager(iso_app.Node, cfg) as m:
        n = m.load_extension(si.ExtensionConfig(name="with pkg", module_path=path,
                                                dependencies=["-e", pkg]))
        assert n.run("where") == ["installed", str(venv)]
    assert not (venv / "left-by-the-test").exists()
    # a requirement from a registry: pip tries; none answers here, and the error names it
    with si.ExtensionManager(iso_app.Node, cfg) as m:
        with pytest.raises(si.ExtensionLoadError, match="surely-not-a-shoal-pkg==1.0"):
            m.load_extension(si.ExtensionConfig(
                name="remote", module_path=path,
                dependencies=[pkg, "surely-not-a-shoal-pkg==1.0"]))
        assert not (root / "remote").exists()  # a venv that failed is not kept
        with pytest.raises(ValueError, match="not a pip option"):
            m.load_extension(si.ExtensionConfig(name="opt", module_path=path,
                                                dependencies=["--index-url=http://x"]))
        # isolated=False: the host's Python, no venv, nothing installed
        n = m.load_extension(si.ExtensionConfig(name="host env", module_path=module(
            tmp_path, "hostenv", "import sys\ndef prefix():\n    return sys.prefix\n"),
            isolated=False))
        assert n.run("prefix") == sys.prefix and not (root / "host_env").exists()
        with pytest.raises(NotImplementedError, match="isolated=True"):
            m.load_extension(si.ExtensionConfig(name="host deps", module_path=path,
                                                isolated=False, dependencies=[pkg]))


def test_a_hostile_reply_is_refused_or_data(node):
    with pytest.raises(ValueError) as e:
        node.run("forged", "type")  # a type registered there under a name we lack
    assert "os.system" in str(e.value) and "not registered" in str(e.value)
    # shoal's own tag as a dict key is escaped by the sender: it comes back as data
    assert node.run("forged", "tag") == {b"\0shoal": ["builtins.eval", "1+1"]}
    with pytest.raises(si.RemoteError) as r:
        node.run("forged", "error")  # a forged type name is a name, nothing more
    assert r.value.type_name == "os.system"


def _fds():
    return len(os.listdir("/proc/self/fd"))


def test_crash_and_restart_cycles_leave_nothing_behind(manager, tmp_path):
    path = module(tmp_path, "cycles", """
        import os
        def leave():
            os._exit(1)
    """)
    n = manager.load_extension(si.ExtensionConfig(name="cycles", module_path=path,
                                                  restart="on_crash"))
    for _ in range(10):
        with pytest.raises(si.ExtensionCrashed):
            n.run("leave")
    gc.collect()
    fds, threads = _fds(), threading.active_count()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cycles = 50 if shoal_sanitized() else 200
    for _ in range(cycles):
        with pytest.raises(si.ExtensionCrashed):
            n.run("leave")
    gc.collect()
    assert _fds() == fds and threading.active_count() == threads
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 32 << 10  # KiB
    assert n.add(1, 1) == 2


def shoal_sanitized():
    return "asan" in os.environ.get("LD_PRELOAD", "")


@pytest.mark.skipif(os.geteuid() != 0, reason="strict needs root or user namespaces here")
def test_strict_sandbox_refuses_sockets_and_ptrace():
    # The extension runs as a uid of its own: its module and the manager's base class's
    # module where any user reads them (this tree may be under a 0700 directory).
    d = tempfile.mkdtemp()
    try:
        os.chmod(d, 0o755)
        with open(os.path.join(d, "strict_app.py"), "w") as f:
            f.write(textwrap.dedent("""
                import shoal.isolate as si
                class Jailed(si.ExtensionBase):
                    def on_module_loaded(self, module):
                        self.mod = module
                    def echo(self, x):
                        return x
                    def run(self, name):
                        return getattr(self.mod, name)()
            """))
        sys.path.insert(0, d)
        try:
            import strict_app
        finally:
            sys.path.remove(d)
        with si.ExtensionManager(strict_app.Jailed) as manager:
            strict_sandbox_refuses_sockets_and_ptrace(manager, d)
    finally:
        shutil.rmtree(d)


def strict_sandbox_refuses_sockets_and_ptrace(manager, d):
    path = os.path.join(d, "jail.py")
    with open(path, "w") as f:
        f.write(textwrap.dedent("""
            import ctypes, errno, os, socket
            def net():
                try:
                    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                except OSError as e:
                    return e.errno
                return 0
            def trace():
                libc = ctypes.CDLL(None, use_errno=True)
                r = libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
                return ctypes.get_errno() if r != 0 else 0
            def uid():
                return os.getuid()
        """))
    os.chmod(path, 0o644)
    n = manager.load_extension(si.ExtensionConfig(name="jail", module_path=path,
                                                  sandbox="strict"))
    assert n.run("net") == 1  # EPERM
    assert n.run("trace") in (1, 3)  # EPERM (or ESRCH: no such process in its namespace)
    assert n.run("uid") != 0
    # a module the host reads in a 0700 directory: the extension's uid cannot, and says so
    hidden = tempfile.mkdtemp()
    try:
        with open(os.path.join(hidden, "hidden.py"), "w") as f:
            f.write("x = 1\n")
        with pytest.raises(si.ExtensionLoadError, match="reads its module.*as a uid of its own"):
            manager.load_extension(si.ExtensionConfig(
                name="hidden", module_path=os.path.join(hidden, "hidden.py"), sandbox="strict"))
    finally:
        shutil.rmtree(hidden)
    torch = pytest.importorskip("torch")
    # shared, in a sandbox whose Python cannot reach the store: its side copies
    s = manager.load_extension(si.ExtensionConfig(name="jail2", module_path=path,
                                                  sandbox="strict", share_torch=True))
    t = torch.rand(64, 64)
    assert torch.equal(s.echo(t), t) and torch.equal(s.echo([t, t])[1], t)


SHARED_MODULE = """
def bump(t, by=1):
    t.add_(by)

def first(t):
    return float(t.reshape(-1)[0])

def ptr(t):
    return t.data_ptr()

def back(t):
    return t[1:]

def fresh():
    import torch
    return torch.ones(3)

def forge_ref(kind, t=None):
    import shoal.isolate as si
    from shoal import _values
    if kind == "unshared":
        payload = [3, 1, 0, [1], [1], "torch.float32"]
    else:  # a view of what the host did share, past its end
        fd, ino, _ = _values._MAPPED_AT[t.storage().data_ptr()]
        payload = [fd, ino, 0, [t.numel() + 1], [1], str(t.dtype)]
    si.register_type(complex, lambda c: payload, complex,
                     name="shoal.isolate.host_tensor_ref")
    return 1j
"""


def test_shared_tensors_are_shared_both_ways(tmp_path):
    """share_torch: torch.multiprocessing's meaning, pyisolate's. The host's tensor moves
    into shared memory in place and the extension maps it writable: its in-place writes
    are the host's tensor's (before: the tensor arrived read-only from the store and
    t.add_(1) killed the extension with SIGSEGV)."""
    torch = pytest.importorskip("torch")
    with shoal.Store(size=1 << 30, socket=str(tmp_path / "s.sock")) as store, \
            si.ExtensionManager(iso_app.Node, store=store) as manager:
        n = manager.load_extension(si.ExtensionConfig(
            name="shared", module_path=module(tmp_path, "sh", SHARED_MODULE),
            share_torch=True, env={"ASAN_OPTIONS": "handle_segv=0:detect_leaks=0"}))
        client = manager.client
        base = client.stat()
        t = torch.zeros(256, 1024)
        view = t[3:5]  # a view the host keeps: it follows the storage into shared memory
        assert n.run("bump", t) is None
        assert float(t.sum()) == t.numel() and float(view.sum()) == view.numel()
        n.run("bump", t[10], 5)  # a view of it, written there
        assert torch.equal(t[10], torch.full((1024,), 6.0)) and float(t[11, 0]) == 1
        t += 1  # the host's write is seen there
        assert n.run("first", t) == 2.0
        nc = t.t()  # not contiguous: the same storage
        n.run("bump", nc)
        assert float(t[0, 0]) == 3.0
        # passed call after call: mapped once, the same pages each time
        p = n.run("ptr", t)
        assert all(n.run("ptr", t) == p for _ in range(20))
        assert client.stat()["objects"] == base["objects"]  # torch goes outside the store
        # what the extension returns of it is a view of the host's own tensor
        r = n.run("back", t)
        assert r.data_ptr() == t[1:].data_ptr() and torch.equal(r, t[1:])
        r.add_(1)
        assert float(t[1, 0]) == 4.0 and float(t[0, 0]) == 3.0
        assert torch.equal(n.echo(t), t) and n.echo(t).data_ptr() == t.data_ptr()
        assert torch.equal(n.run("fresh"), torch.ones(3))  # its own: copied
        for dt in (torch.int64, torch.bfloat16, torch.bool, torch.uint8):
            x = torch.zeros(5, dtype=dt)
            assert torch.equal(n.echo(x), x) and n.echo(x).data_ptr() == x.data_ptr()
        # the extension may name only what the host shared with it, within its bounds
        with pytest.raises(ValueError, match="did not share"):
            n.run("forge_ref", "unshared")
        with pytest.raises(RuntimeError, match="out of bounds"):
            n.run("forge_ref", "past_end", t)
        a = np.arange(1000.0)  # numpy arrays: copied, as before
        got = n.echo([a, {"t": torch.ones(3)}])
        assert np.array_equal(got[0], a)
        assert torch.equal(got[1]["t"], torch.ones(3))
        del t, view, nc, r, got, a
        n.add(1, 1)  # an extension holds the last result it returned until its next call
        gc.collect()
        assert client.stat()["used"] == base["used"]  # everything shared is freed


def test_a_tensor_passed_again_needs_no_store(tmp_path, shoald_proc):
    """Both sides keep the last call's shared arguments until the next call: a tensor
    passed call after call (pyisolate's shared-tensor test) reaches the store once. Shown
    by stopping the store: the calls go on."""
    torch = pytest.importorskip("torch")
    path = module(tmp_path, "again", """
        def info(t):
            return (t.numel(), float(t[0, 0]), t.data_ptr())
        """)
    with si.ExtensionManager(iso_app.Node, store=shoald_proc.sock) as manager:
        # the first call imports torch in the extension: seconds under ASan on a
        # loaded machine; a store round trip while the store is stopped would fail a
        # call at the store connection's own timeout (30 s), within this one
        n = manager.load_extension(si.ExtensionConfig(
            name="again", module_path=path, share_torch=True, call_timeout=60))
        t = torch.rand(512, 512)
        first = n.run("info", t)
        assert first[:2] == (t.numel(), float(t[0, 0]))
        stop(shoald_proc)  # from here a round trip to the store would time out
        try:
            for _ in range(50):
                assert n.run("info", t) == first  # the same store pages each call
        finally:
            shoald_proc.send_signal(signal.SIGCONT)
        t2 = torch.rand(8, 8)  # a new tensor goes through the store again
        assert n.run("info", t2)[:2] == (64, float(t2[0, 0]))


def test_a_crash_fails_every_call_in_flight(manager, tmp_path):
    path = module(tmp_path, "flight", """
        import os, time
        def slow_then_die():
            time.sleep(0.2)
            os._exit(9)
    """)
    n = manager.load_extension(si.ExtensionConfig(name="flight", module_path=path))

    async def main():
        calls = [n.run("slow_then_die")] + [n.add(i, 1) for i in range(20)]
        return await asyncio.gather(*calls, return_exceptions=True)
    t0 = time.monotonic()
    got = asyncio.run(main())
    assert time.monotonic() - t0 < 10
    assert all(isinstance(g, si.ExtensionCrashed) for g in got), got
    assert "status 9" in str(got[0])
