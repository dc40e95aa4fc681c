"""Tests of shoal._shoal, the C module alone (the package has its own):
every call against a real embedded store, the errors and their classes,
zero-copy views and their lifetimes, misuse, threads, fork, and a loop
that shows no growth of references, memory or the store's counters.

Run: PYTHONPATH=build/release/python python3 -m pytest -q tests/python/test_c_module.py
(the module is loaded by path from build/release/python/shoal, or from
$SHOAL_PY_MODULE, so the package's __init__.py is not needed)."""
import gc
import glob
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



def clients_soon(c, want):
    """The store's count of connections once it is want, or after 2 s: the
    store sees a hang-up on its own time."""
    for _ in range(200):
        n = c.stat()["clients"]
        if n == want:
            return n
        time.sleep(0.01)
    return n

def _load():
    path = os.environ.get("SHOAL_PY_MODULE")
    if not path:
        dirs = [os.path.join(p, "shoal") for p in sys.path if p] + [
            os.path.join(ROOT, "build", "release", "python", "shoal")
        ]
        for d in dirs:
            hits = glob.glob(os.path.join(d, "_shoal*.so"))
            if hits:
                path = hits[0]
                break
    if not path:
        pytest.skip("shoal._shoal is not built (build/release/python/shoal/_shoal*.so)",
                    allow_module_level=True)
    spec = importlib.util.spec_from_file_location("shoal._shoal", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_shoal = _load()
np = pytest.importorskip("numpy")

NUMPY_DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "F16": np.float16, "U32": np.uint32, "I32": np.int32, "F32": np.float32,
    "U64": np.uint64, "I64": np.int64, "F64": np.float64,
}


@pytest.fixture
def store(tmp_path):
    s = _shoal.Store(size=64 << 20, socket=str(tmp_path / "store.sock"))
    yield s
    s.close()


@pytest.fixture
def client(store):
    c = _shoal.Client(store.socket)
    yield c
    c.close()


def mappings():
    """(start, end, perms, path) of this process's mappings."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            a, b = (int(x, 16) for x in parts[0].split("-"))
            out.append((a, b, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


def mapping_of(addr):
    for a, b, perms, path in mappings():
        if a <= addr < b:
            return perms, path
    return None


def baseline(client):
    gc.collect()
    st = client.stat()
    return st["objects"], st["used"], st["pending_frees"]


# ---- the module ------------------------------------------------------------

def test_module_constants():
    assert _shoal.__version__.count(".") == 2
    assert "F32" in _shoal.DTYPES and "BF16" in _shoal.DTYPES and "F8_E5M2" in _shoal.DTYPES
    assert len(_shoal.DTYPES) == 15


def test_default_socket(monkeypatch):
    monkeypatch.setenv("SHOAL_SOCKET", "/some/where.sock")
    assert _shoal.default_socket() == "/some/where.sock"
    monkeypatch.delenv("SHOAL_SOCKET")
    assert _shoal.default_socket().endswith("/shoald.sock")


def test_exception_classes():
    E = _shoal
    assert issubclass(E.NotFound, E.Error) and issubclass(E.NotFound, KeyError)
    assert issubclass(E.NameTaken, ValueError)
    assert issubclass(E.StoreFull, MemoryError)
    assert issubclass(E.Timeout, TimeoutError)
    assert issubclass(E.InvalidInput, ValueError)
    assert issubclass(E.Closed, ConnectionError)
    # raisable from Python too (the package does), str is the message
    e = E.NotFound("no such thing")
    assert str(e) == "no such thing"


# ---- put, get, names -------------------------------------------------------

def test_put_bytes_get_roundtrip(client):
    i = client.put_bytes(b"hello world", name="greeting")
    assert isinstance(i, int) and i > 0
    for key in (i, "greeting"):
        o = client.get(key)
        assert o.id == i and o.type == "bytes" and o.nbytes == 11
        b = o.blob()
        assert bytes(memoryview(b)) == b"hello world" and b.nbytes == 11 and len(b) == 11
        assert memoryview(b).readonly
        assert b.object is o
    # any C-contiguous buffer
    i2 = client.put_bytes(bytearray(b"\x00" * 100))
    assert client.get(i2).nbytes == 100
    i3 = client.put_bytes(memoryview(b"abcdef")[1:4])
    assert bytes(memoryview(client.get(i3).blob())) == b"bcd"
    i4 = client.put_bytes(b"")
    assert bytes(memoryview(client.get(i4).blob())) == b""


def test_errors_carry_code_and_message(client):
    with pytest.raises(_shoal.NotFound) as ei:
        client.get("missing")
    assert ei.value.code == -2 and "missing" in str(ei.value)
    assert str(ei.value) == ei.value.message  # not KeyError's quoted repr
    with pytest.raises(KeyError):
        client.get(123456789)
    client.put_bytes(b"x", name="taken")
    with pytest.raises(_shoal.NameTaken) as ei:
        client.put_bytes(b"y", name="taken")
    assert ei.value.code == -17 and "taken" in str(ei.value)
    client.put_bytes(b"z", name="taken", replace=True)
    assert bytes(memoryview(client.get("taken").blob())) == b"z"
    with pytest.raises(_shoal.StoreFull) as ei:
        client.put_bytes(bytes(65 << 20))
    assert ei.value.code == -28 and str(ei.value)
    with pytest.raises(_shoal.NotFound):
        client.delete("never-bound")


def test_names_delete_persist_stat(client, store):
    ids = [client.put_bytes(b"%d" % k * 10, name="n/%d" % k) for k in range(3)]
    client.put_bytes(b"other", name="m")
    names = client.names("n/")
    assert names == [("n/%d" % k, ids[k], "bytes", len(b"%d" % k * 10)) for k in range(3)]
    assert len(client.names()) == 4 and client.names(prefix="zz") == []
    st = client.stat()
    assert set(st) == {
        "capacity",
        "used",
        "objects",
        "names",
        "clients",
        "pending_frees",
        "sent",
        "sent_bytes",
        "fetched",
        "fetched_bytes",
        "migrating",
        "peers",
        "registry",
        "incoming_bytes",
        "incoming_total",
        "incoming_rate",
        "spare_bytes",
        "pages",
        "pages_why",
        "spill_objects",
        "spill_bytes",
        "spill_file_bytes",
        "spilled",
        "spilled_bytes",
        "restored",
        "restored_bytes",
        "spill_rate",
        "restore_rate",
    }
    assert st["capacity"] == 64 << 20 and st["names"] == 4 and st["clients"] == 1
    assert st["pages"] == "4k" and "--huge-pages" in st["pages_why"]
    client.delete("n/0")
    client.delete(ids[1])
    assert [n[0] for n in client.names("n/")] == ["n/2"]
    # a transient object goes with its connection, a persistent one stays
    t = client.put_bytes(b"transient")
    p = client.put_bytes(b"persistent")
    client.persist(p)
    q = client.put_bytes(b"flag", persist=True)
    with _shoal.Client(store.socket) as c2:
        assert c2.get(t).nbytes == 9
    client.close()
    with _shoal.Client(store.socket) as c2:
        assert bytes(memoryview(c2.get(p).blob())) == b"persistent"
        assert c2.get(q).nbytes == 4
        # the store sees the connection end a moment after close() returns (its watcher
        # wakes on the socket): the transient object goes then
        deadline = time.monotonic() + 10
        while True:
            try:
                c2.get(t).release()
            except _shoal.NotFound:
                break
            assert time.monotonic() < deadline, "a transient object outlived its connection"
            time.sleep(0.01)


# ---- tensors ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", sorted(NUMPY_DTYPES))
def test_tensor_roundtrip_every_dtype(client, dtype):
    npt = NUMPY_DTYPES[dtype]
    rng = np.random.default_rng(1)
    for shape in [(), (0,), (3, 0, 2), (5,), (2, 3, 4), (1,) * 32]:
        a = (rng.integers(0, 100, size=shape) % (2 if dtype == "BOOL" else 100)).astype(npt)
        i = client.put_tensor(a, dtype, shape)
        o = client.get(i)
        t = o.tensor()
        assert t.dtype == dtype and t.shape == shape and t.ndim == len(shape)
        assert t.nbytes == a.nbytes and t.object is o
        cs = [1] * len(shape)
        for k in range(len(shape) - 2, -1, -1):
            cs[k] = cs[k + 1] * shape[k + 1]
        if 0 not in shape:  # an empty tensor's strides are the library's choice
            assert t.strides == tuple(cs)
        else:
            assert len(t.strides) == len(shape)
        b = np.asarray(t)
        assert b.dtype == a.dtype and b.shape == shape
        np.testing.assert_array_equal(a, b)
        assert not b.flags.writeable
        with pytest.raises(ValueError):
            b[...] = 0 if b.ndim == 0 else b


def test_tensor_is_zero_copy_in_the_store_mapping(client):
    a = np.arange(1 << 20, dtype=np.float32)  # 4 MiB
    t = client.get(client.put_tensor(a, "F32", a.shape)).tensor()
    b = np.asarray(t)
    assert b.ctypes.data == t._address
    perms, path = mapping_of(t._address)
    # a shared, read-only mapping of the store's memory (memfd), not a heap copy
    assert perms.startswith("r--s"), perms
    assert "memfd" in path or "shoal" in path, path
    assert mapping_of(t._address + t.nbytes - 1)[1] == path
    m = memoryview(t)
    assert m.readonly and m.format == "f" and m.shape == (1 << 20,) and m.c_contiguous
    with pytest.raises((TypeError, BufferError)):
        memoryview(t).cast("B")[0:1] = b"x"
    # the blob of the same object is the same memory
    assert t.object.blob()._address == t._address


def test_bf16_and_f8(client):
    raw = np.arange(8, dtype=np.uint16)
    i = client.put_tensor(raw, "BF16", (2, 4))
    t = client.get(i).tensor()
    assert t.dtype == "BF16" and t.shape == (2, 4)
    with pytest.raises(_shoal.InvalidInput) as ei:
        memoryview(t)
    assert "BF16" in str(ei.value) and "torch" in str(ei.value)
    # the raw bytes stay reachable
    np.testing.assert_array_equal(np.frombuffer(t.object.blob(), dtype=np.uint16), raw)
    cap = t.__dlpack__()
    assert type(cap).__name__ == "PyCapsule"
    del cap
    f8 = client.get(client.put_tensor(b"\x01\x02\x03", "F8_E4M3", (3,))).tensor()
    with pytest.raises(_shoal.InvalidInput) as ei:
        f8.__dlpack__()
    assert "F8_E4M3" in str(ei.value)
    with pytest.raises(_shoal.InvalidInput):
        memoryview(f8)


def test_dlpack_numpy(client):
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    t = client.get(client.put_tensor(a, "I64", a.shape)).tensor()
    assert t.__dlpack_device__() == (1, 0)
    b = np.from_dlpack(t)
    np.testing.assert_array_equal(a, b)
    assert b.ctypes.data == t._address
    with pytest.raises(_shoal.InvalidInput):
        t.__dlpack__(stream=1)


def test_dlpack_torch(client):
    torch = pytest.importorskip("torch")
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    o = client.get(client.put_tensor(a.numpy(), "F32", (3, 4)))
    t = o.tensor()
    x = torch.from_dlpack(t)
    assert torch.equal(x, a) and x.data_ptr() == t._address
    bf = torch.arange(6, dtype=torch.bfloat16)
    raw = bf.view(torch.int16).numpy()
    tb = client.get(client.put_tensor(raw, "BF16", (6,))).tensor()
    y = torch.from_dlpack(tb)
    assert y.dtype == torch.bfloat16 and torch.equal(y, bf)
    # the torch tensor keeps the object alive after every Python handle goes
    base = client.stat()["objects"]
    del t, o, tb
    gc.collect()
    assert client.stat()["objects"] == base
    assert torch.equal(x, a)
    del x, y
    gc.collect()
    assert client.stat()["objects"] == base  # objects persist in the store...
    st = client.stat()
    assert st["pending_frees"] == 0


def test_tensor_misuse(client):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(_shoal.InvalidInput) as ei:
        client.put_tensor(a, "F32", (3, 5))
    assert "48" in str(ei.value) and "60" in str(ei.value)
    with pytest.raises(_shoal.InvalidInput) as ei:
        client.put_tensor(a.T, "F32", (4, 3))  # not C-contiguous
    assert "contiguous" in str(ei.value)
    with pytest.raises(_shoal.InvalidInput):
        client.put_bytes(memoryview(b"abcdef")[::2])
    with pytest.raises(_shoal.InvalidInput) as ei:
        client.put_tensor(a, "F33", (3, 4))
    assert "F33" in str(ei.value) and "BF16" in str(ei.value)
    with pytest.raises(_shoal.InvalidInput):
        client.put_tensor(a, "F32", (1 << 62, 1 << 62))  # product overflows
    with pytest.raises(_shoal.InvalidInput):
        client.put_tensor(b"", "F32", (0, 1 << 62, 1 << 62))  # huge even with a 0
    with pytest.raises(_shoal.InvalidInput):
        client.put_tensor(a, "F32", (1 << 70,))
    with pytest.raises(_shoal.InvalidInput):
        client.put_tensor(a, "F32", (-3, -4))
    with pytest.raises(_shoal.InvalidInput):
        client.put_tensor(b"", "U8", (1,) * 33)
    with pytest.raises(TypeError):
        client.put_tensor(a, "F32", 12)
    with pytest.raises(TypeError):
        client.put_tensor(a, "F32", (3.0, 4))
    with pytest.raises(TypeError):
        client.put_tensor(a, 7, (3, 4))
    with pytest.raises(TypeError):
        client.put_tensor(12, "F32", (3, 4))
    with pytest.raises(TypeError):
        client.put_bytes("a str is not bytes")
    with pytest.raises(TypeError):
        client.put_bytes(b"x", name=5)
    with pytest.raises(_shoal.InvalidInput):
        client.put_bytes(b"x", name="a\0b")
    with pytest.raises(_shoal.InvalidInput):
        client.put_bytes(b"x", name="")
    for bad in (0, -1, 1 << 64):
        with pytest.raises(_shoal.InvalidInput):
            client.get(bad)
    for bad in (None, 1.5, True, b"name"):
        with pytest.raises(TypeError):
            client.get(bad)
    with pytest.raises(TypeError):
        client.persist("name")
    with pytest.raises(TypeError):
        _shoal.Object()
    with pytest.raises(TypeError):
        _shoal.Tensor()
    o = client.get(client.put_bytes(b"abc"))
    with pytest.raises(_shoal.InvalidInput):
        o.tensor()
    with pytest.raises(_shoal.InvalidInput):
        o.tensors()
    with pytest.raises(IndexError):
        o.blob(1)
    with pytest.raises(IndexError):
        o.blob(-1)


# ---- tensor dicts and safetensors -------------------------------------------

def test_tensor_dict(client, tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([True, False, True])
    c = np.zeros((0, 5), dtype=np.int16)
    i = client.put_tensor_dict([("a", a, "F32", (3, 4)), ("b.c", b, "BOOL", [3]),
                                ("empty", c, "I16", (0, 5))],
                               {"format": "pt", "k": "v"}, name="sd")
    o = client.get("sd")
    assert o.id == i and o.type == "tensor_dict" and o.nbytes >= a.nbytes + 3
    assert o.fields() == {"format": "pt", "k": "v"}
    ts = o.tensors()
    assert [n for n, _ in ts] == ["a", "b.c", "empty"]
    np.testing.assert_array_equal(np.asarray(ts[0][1]), a)
    np.testing.assert_array_equal(np.asarray(ts[1][1]), b)
    assert np.asarray(ts[2][1]).shape == (0, 5)
    # one region: the tensors lie in the same mapping, 64-byte aligned
    assert ts[0][1]._address % 64 == 0 and ts[1][1]._address % 64 == 0
    assert mapping_of(ts[0][1]._address) == mapping_of(ts[1][1]._address)
    with pytest.raises(_shoal.InvalidInput):
        o.tensor()
    # the store's exporter reads it
    out = tmp_path / "sd.safetensors"
    client.export_safetensors("sd", out)
    j = client.import_safetensors(str(out), name="sd2")
    back = dict(client.get(j).tensors())
    np.testing.assert_array_equal(np.asarray(back["a"]), a)
    assert client.get(j).fields() == {"format": "pt", "k": "v"}
    with pytest.raises(_shoal.InvalidInput):
        client.put_tensor_dict([("x", a, "F32", (3, 4)), ("x", a, "F32", (3, 4))])
    with pytest.raises(_shoal.InvalidInput):
        client.put_tensor_dict([("x", a, "F32", (3, 5))])
    with pytest.raises(TypeError):
        client.put_tensor_dict([("x", a, "F32")])
    with pytest.raises(TypeError):
        client.put_tensor_dict([("x", a, "F32", (3, 4))], {"k": 1})
    with pytest.raises(TypeError):
        client.put_tensor_dict([("x", a, "F32", (3, 4))], ["k"])
    with pytest.raises(TypeError):
        client.put_tensor_dict(5)
    e = client.get(client.put_tensor_dict([]))
    assert e.tensors() == [] and e.fields() == {}


def test_safetensors_file_round_trip(client, tmp_path):
    src = tmp_path / "in.safetensors"
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "st_write.py"), str(src),
                    "--tensors", "20", "--bytes", "100000", "--metadata", "format=pt"],
                   check=True)
    i = client.import_safetensors(src, name="file")
    o = client.get("file")
    assert o.id == i and len(o.tensors()) == 20 and o.fields() == {"format": "pt"}
    out = tmp_path / "out.safetensors"
    client.export_safetensors("file", str(out))
    assert out.read_bytes() == src.read_bytes()
    with pytest.raises(_shoal.NotFound):
        client.import_safetensors(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "st_write.py"), str(bad),
                    "--tensors", "2", "--bytes", "1000", "--hostile", "overlap"], check=True)
    with pytest.raises(_shoal.InvalidInput) as ei:
        client.import_safetensors(bad)
    assert "bad.safetensors" in str(ei.value)
    client.put_bytes(b"x", name="notdict")
    with pytest.raises(_shoal.InvalidInput):
        client.export_safetensors("notdict", str(tmp_path / "x"))


# ---- lifetimes ------------------------------------------------------------

def test_views_keep_the_object(client):
    base = baseline(client)
    a = np.arange(1000, dtype=np.float64)
    i = client.put_tensor(a, "F64", a.shape)
    client.delete(i)  # only the creator's... the object is deleted now
    # deleted but never got: freed already
    assert baseline(client) == base
    i = client.put_tensor(a, "F64", a.shape, name="v")
    o = client.get("v")
    arr = np.asarray(o.tensor())
    del o
    client.delete("v")
    gc.collect()
    st = client.stat()
    assert st["pending_frees"] == 1  # a reader holds it
    np.testing.assert_array_equal(arr, a)  # still readable
    del arr
    assert baseline(client) == base


def test_release_waits_for_views(client):
    base = baseline(client)
    i = client.put_tensor(np.ones(100, np.float32), "F32", (100,), name="r")
    o = client.get(i)
    t = o.tensor()
    m = memoryview(t)
    client.delete("r")
    o.release()
    assert o.released
    with pytest.raises(_shoal.Closed):
        o.tensor()
    with pytest.raises(_shoal.Closed):
        o.fields()
    del t
    gc.collect()
    assert client.stat()["pending_frees"] == 1  # the memoryview holds it
    assert m[99] == 1.0
    m.release()
    del m
    assert baseline(client) == base
    o.release()  # twice is fine
    with client.get(client.put_bytes(b"ctx")) as o2:
        assert o2.nbytes == 3
    assert o2.released


def test_dlpack_capsule_lifetime(client):
    base = baseline(client)
    i = client.put_tensor(np.ones(10, np.int32), "I32", (10,), name="cap")
    t = client.get(i).tensor()
    cap = t.__dlpack__()  # never consumed: its destructor lets go
    client.delete("cap")
    del t
    gc.collect()
    assert client.stat()["pending_frees"] == 1
    del cap
    assert baseline(client) == base
    t = client.get(client.put_tensor(np.ones(10, np.int32), "I32", (10,), name="cap")).tensor()
    arr = np.from_dlpack(t)  # consumed: the array's deleter lets go
    client.delete("cap")
    del t
    gc.collect()
    assert client.stat()["pending_frees"] == 1
    assert int(arr.sum()) == 10
    del arr
    assert baseline(client) == base


def test_close_with_live_views(store):
    c = _shoal.Client(store.socket)
    arr = np.asarray(c.get(c.put_tensor(np.arange(5, dtype=np.int8), "I8", (5,))).tensor())
    with _shoal.Client(store.socket) as watcher:
        assert watcher.stat()["clients"] == 2
        c.close()
        assert c.closed
        with pytest.raises(_shoal.Closed) as ei:
            c.put_bytes(b"x")
        assert "closed" in str(ei.value)
        with pytest.raises(_shoal.Closed):
            c.get(1)
        assert list(arr) == [0, 1, 2, 3, 4]  # still mapped
        assert watcher.stat()["clients"] == 2  # the array holds the connection
        del arr
        gc.collect()
        assert clients_soon(watcher, 1) == 1
    c.close()


def test_store_close_and_client_errors(tmp_path):
    s = _shoal.Store(size=1 << 20)
    assert os.path.exists(s.socket)
    c = _shoal.Client(s.socket)
    c.put_bytes(b"x")
    s.close()
    assert s.closed and not os.path.exists(s.socket)
    with pytest.raises(_shoal.Error) as ei:
        c.put_bytes(b"y")
    assert isinstance(ei.value, _shoal.Closed), repr(ei.value)
    c.close()
    with pytest.raises(_shoal.Error):
        _shoal.Client(str(tmp_path / "nobody.sock"))
    with pytest.raises(_shoal.InvalidInput):
        _shoal.Client(str(tmp_path / "x.sock"), timeout=0)
    with pytest.raises(_shoal.InvalidInput):
        _shoal.Store(size=0)
    with _shoal.Store(size=1 << 20) as s2:
        with _shoal.Client(s2.socket, timeout=None) as c2:
            assert c2.stat()["capacity"] == 1 << 20
        assert c2.closed


def test_timeout(tmp_path):
    # a socket that accepts and never answers: the set-up times out
    path = str(tmp_path / "mute.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(1)
    t0 = time.monotonic()
    with pytest.raises(_shoal.Error) as ei:
        _shoal.Client(path, timeout=0.3)
    assert time.monotonic() - t0 < 10
    assert isinstance(ei.value, _shoal.Timeout), repr(ei.value)
    srv.close()


# ---- threads and fork --------------------------------------------------------

def test_threads_share_a_client(client):
    errors = []

    def work(k):
        try:
            for n in range(200):
                i = client.put_bytes(b"%d-%d" % (k, n))
                o = client.get(i)
                assert bytes(memoryview(o.blob())) == b"%d-%d" % (k, n)
                o.release()
                client.delete(i)
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert client.stat()["objects"] == 0


def test_gil_released_while_blocked(tmp_path):
    # a connect to a mute socket blocks for its timeout: other threads run
    path = str(tmp_path / "mute.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(1)
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.01)

    th = threading.Thread(target=ticker)
    th.start()
    with pytest.raises(_shoal.Error):
        _shoal.Client(path, timeout=0.5)
    done.set()
    th.join()
    srv.close()
    assert len(ticks) >= 10


def test_fork(client):
    i = client.put_bytes(b"parent", name="p")
    o = client.get(i)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                client.get(i)
            except _shoal.Closed as e:
                if "before a fork" in str(e) and str(os.getppid()) in str(e):
                    code = 0
            # memory mapped before the fork is still readable
            if bytes(memoryview(o.blob())) != b"parent":
                code = 2
            client.close()
            del o
            gc.collect()
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    code = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert code == b"\x00"
    # the parent's connection is untouched
    assert bytes(memoryview(client.get("p").blob())) == b"parent"
    assert client.stat()["clients"] == 1


# ---- no growth ---------------------------------------------------------------

def every_call(client, tmp_path, a):
    i = client.put_bytes(b"x" * 64, name="loop/b", replace=True)
    o = client.get(i)
    bytes(memoryview(o.blob()))
    o.fields()
    o.release()
    j = client.put_tensor(a, "F32", a.shape, name="loop/t", replace=True)
    with client.get("loop/t") as o:
        t = o.tensor()
        np.asarray(t).sum()
        np.from_dlpack(t).sum()
        t.__dlpack__()
        (t.dtype, t.shape, t.strides, t.nbytes, t.object)
        del t
    k = client.put_tensor_dict([("a", a, "F32", a.shape)], {"m": "v"}, name="loop/d",
                               replace=True)
    d = client.get(k)
    [np.asarray(t) for _, t in d.tensors()]
    d.fields()
    del d
    client.export_safetensors("loop/d", str(tmp_path / "loop.st"))
    client.import_safetensors(str(tmp_path / "loop.st"), name="loop/i", replace=True)
    client.names("loop/")
    client.stat()
    client.persist(j)
    for bad in (lambda: client.get("loop/none"), lambda: client.put_tensor(a, "F32", (1,)),
                lambda: client.get(0), lambda: client.put_bytes(a.T)):
        try:
            bad()
        except _shoal.Error:
            pass
    client.delete("loop/b")


def test_no_growth(client, tmp_path):
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    for _ in range(50):
        every_call(client, tmp_path, a)
    gc.collect()
    st0 = client.stat()
    refs0 = sys.getrefcount(a), sys.getrefcount(client)
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    for _ in range(500):
        every_call(client, tmp_path, a)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert grown < 64 << 10, grown  # 500 rounds of a dozen calls: nothing kept
    st1 = client.stat()
    for k in ("used", "objects", "names", "pending_frees", "clients"):
        assert st1[k] == st0[k], (k, st0, st1)
    assert (sys.getrefcount(a), sys.getrefcount(client)) == refs0


def test_dlpack_arrays_dropped_on_other_threads(client):
    base = baseline(client)
    i = client.put_tensor(np.arange(256, dtype=np.int32), "I32", (256,), name="thr")
    t = client.get(i).tensor()
    arrays = [np.from_dlpack(t) for _ in range(64)]
    caps = [t.__dlpack__() for _ in range(64)]
    del t
    client.delete("thr")
    errors = []

    def drop(k):
        try:
            for n in range(8):
                a = arrays[k * 8 + n]
                assert int(a[255]) == 255
                arrays[k * 8 + n] = None
                caps[k * 8 + n] = None
                client.stat()  # the connection is used meanwhile
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=drop, args=(k,)) for k in range(8)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert errors == []
    assert baseline(client) == base


def test_more_misuse(client, tmp_path):
    with pytest.raises(_shoal.InvalidInput):
        _shoal.Client("a\0b")
    with pytest.raises(TypeError):
        _shoal.Client(5)
    with pytest.raises(TypeError):
        _shoal.Client(client.socket, timeout="1")
    with pytest.raises(_shoal.Error):
        _shoal.Store(size=1 << 20, socket=str(tmp_path / "no" / "such" / "dir" / "s.sock"))
    with pytest.raises(TypeError):
        client.names(prefix=3)
    with pytest.raises(TypeError):
        client.import_safetensors(None)
    with pytest.raises(_shoal.NotFound):
        client.export_safetensors("nothing", str(tmp_path / "x"))
    # a view of a released object keeps working; a new one is refused
    o = client.get(client.put_tensor(np.ones(4, np.float32), "F32", (4,)))
    t = o.tensor()
    o.release()
    assert float(np.asarray(t).sum()) == 4.0
    cap = t.__dlpack__()  # the Tensor still holds the object
    del cap
    with pytest.raises(_shoal.Closed):
        o.blob()
    assert "released" in repr(o) or o.released


def test_close_while_other_threads_call(store):
    c = _shoal.Client(store.socket)
    outcomes = []
    go = threading.Event()

    def work():
        go.wait()
        try:
            for _ in range(2000):
                o = c.get(c.put_bytes(b"abc"))
                assert bytes(memoryview(o.blob())) == b"abc"
        except _shoal.Closed:
            outcomes.append("closed")
        except Exception as e:  # reported below
            outcomes.append(e)
        else:
            outcomes.append("done")

    ts = [threading.Thread(target=work) for _ in range(4)]
    for th in ts:
        th.start()
    go.set()
    time.sleep(0.01)
    c.close()
    for th in ts:
        th.join()
    assert all(x in ("closed", "done") for x in outcomes), outcomes
    del c
    gc.collect()
    with _shoal.Client(store.socket) as w:
        assert clients_soon(w, 1) == 1


def test_views_outlive_the_store(tmp_path):
    s = _shoal.Store(size=1 << 20)
    c = _shoal.Client(s.socket)
    arr = np.asarray(c.get(c.put_tensor(np.arange(100, dtype=np.int16), "I16", (100,))).tensor())
    s.close()
    assert int(arr[99]) == 99  # the client's mapping stays
    c.close()
    assert int(arr.sum()) == 4950
    del arr
    gc.collect()


def test_large_tensor_dict(client):
    rng = np.random.default_rng(7)
    items = [("layer.%d.weight" % k, rng.standard_normal((k % 7 + 1, 3)).astype(np.float32))
             for k in range(1100)]
    i = client.put_tensor_dict([(n, a, "F32", a.shape) for n, a in items],
                               {"k%d" % k: "v" * k for k in range(50)})
    o = client.get(i)
    got = o.tensors()
    assert len(got) == 1100 and len(o.fields()) == 50
    for (n, a), (gn, t) in zip(items, got):
        assert n == gn
        np.testing.assert_array_equal(np.asarray(t), a)
    maps = mappings()
    paths = {path for _, t in got for a, b, _, path in maps if a <= t._address < b}
    assert len(paths) == 1  # one region for all of them


def test_buffers_are_released_on_every_path(client):
    # a bytearray cannot grow while a buffer of it is held: each call,
    # failed or not, must have let go of it
    ba = bytearray(12)
    good = bytearray(12)
    calls = [
        lambda: client.put_bytes(ba),
        lambda: client.put_tensor(ba, "F32", (3,)),
        lambda: client.put_tensor(ba, "F32", (4,)),
        lambda: client.put_tensor_dict([("a", ba, "F32", (3,))]),
        lambda: client.put_tensor_dict([("a", good, "F32", (3,)), ("b", ba, "F32", (9,))]),
        lambda: client.put_tensor_dict([("a", good, "F32", (3,)), ("a", ba, "F32", (3,))]),
        lambda: client.put_tensor_dict([("a", good, "F32", (3,)), ("b", ba, "F32", (3,))],
                                       {"k": 5}),
        lambda: client.put_bytes(ba, name="x", replace=False),
        lambda: client.put_bytes(ba, name="x", replace=False),
    ]
    for call in calls:
        try:
            call()
        except (_shoal.Error, TypeError):
            pass
        ba.extend(b"1234")
        good.extend(b"1234")
        del ba[-4:]
        del good[-4:]


def test_cycle_through_a_client_subclass(store):
    class Keeper(_shoal.Client):
        pass

    with _shoal.Client(store.socket) as w:
        k = Keeper(store.socket)
        k.kept = k.get(k.put_bytes(b"cycle"))
        k.view = k.kept.blob()
        k.me = k
        assert w.stat()["clients"] == 2
        del k
        gc.collect()
        # the cycle was collected, the connection went (the store sees the
        # hang-up on its own time)
        assert clients_soon(w, 1) == 1


def test_torch_state_dict_round_trip(client):
    torch = pytest.importorskip("torch")
    sd = {"w": torch.randn(4, 5), "b": torch.arange(5, dtype=torch.int64),
          "h": torch.randn(3).to(torch.bfloat16), "m": torch.tensor([True, False])}
    names = {torch.float32: "F32", torch.int64: "I64", torch.bfloat16: "BF16",
             torch.bool: "BOOL"}
    items = [(k, (v.view(torch.int16) if v.dtype == torch.bfloat16 else v).numpy(),
              names[v.dtype], tuple(v.shape)) for k, v in sd.items()]
    o = client.get(client.put_tensor_dict(items, {"format": "pt"}))
    back = {k: torch.from_dlpack(t) for k, t in o.tensors()}
    assert back.keys() == sd.keys()
    for k in ("w", "b", "h"):
        assert back[k].dtype == sd[k].dtype and torch.equal(back[k], sd[k])
    # DLPack 0.6 has no bool: the store's BOOL arrives as uint8 (the buffer
    # protocol gives numpy a real bool)
    assert back["m"].dtype == torch.uint8 and back["m"].tolist() == [1, 0]
    assert np.asarray(dict(o.tensors())["m"]).dtype == np.bool_
