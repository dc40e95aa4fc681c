"""The shoal package's object store, against real stores: one embedded in the test
process (shoal.Store) and shoald processes of this build; other Python processes
read what the test puts. Run by `make test` (tests/python/run.sh)."""
import gc
import os
import signal
import subprocess
import textwrap
import threading
import time

import pytest

import shoal

from conftest import stop  # noqa: E402
SRCDIR = os.environ.get("SHOAL_SRCDIR", ".")
PYTHON = "/usr/bin/python3"

np = pytest.importorskip("numpy")


@pytest.fixture
def store(tmp_path):
    with shoal.Store(size=512 << 20, socket=str(tmp_path / "store.sock")) as s:
        yield s


@pytest.fixture
def client(store):
    with store.connect() as c:
        yield c


def run_python(code, *args):
    """Runs code in a fresh Debian python3 with the package on its path."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(shoal.__file__)))
    r = subprocess.run([PYTHON, "-c", textwrap.dedent(code), *args], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


NUMPY_DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8",
                "uint64", "uint32", "uint16", "uint8", "bool"]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 0, 4), (1,) * 32])
def test_numpy_round_trips(client, dtype, shape):
    rng = np.random.default_rng(1)
    a = (rng.random(shape) * 100).astype(dtype)
    oid = client.put(a, name="a")
    assert isinstance(oid, shoal.ObjectID)
    b = client.get("a")
    assert b.dtype == a.dtype and b.shape == a.shape
    assert np.array_equal(a, b)
    assert not b.flags.writeable
    with pytest.raises(ValueError):
        b[...] = 0 if b.size else b  # read-only: numpy refuses
    assert np.array_equal(client.get(oid), a)  # by id too
    c = client.get("a", copy=True)
    assert c.flags.writeable and np.array_equal(a, c)


def test_non_contiguous_arrays_are_made_contiguous(client):
    a = np.arange(100, dtype=np.int32).reshape(10, 10).T
    client.put(a, name="t")
    assert np.array_equal(client.get("t"), a)


def test_bytes_come_back_as_read_only_memory(client):
    data = os.urandom(100_000)
    client.put(data, name="blob")
    v = client.get("blob")
    assert isinstance(v, memoryview) and v.readonly and bytes(v) == data
    assert client.get("blob", copy=True) == data
    client.put(bytearray(b"small"), name="small")
    assert bytes(client.get("small")) == b"small"


def test_arrays_map_the_store_without_a_copy(client):
    a = np.arange(1 << 20, dtype=np.float32)
    client.put(a, name="big")
    raw = client.get("big", framework=None)  # shoal's own tensor
    b = np.asarray(raw)
    assert b.ctypes.data == raw._address  # the array is the store's memory
    assert np.array_equal(a, b)


def test_a_dict_of_arrays_is_a_tensor_dict(client, tmp_path):
    d = {"w": np.ones((4, 4), dtype=np.float32), "b": np.arange(4, dtype=np.int64)}
    client.put(d, name="sd", metadata={"format": "np"})
    got = client.get("sd")
    assert list(got) == ["w", "b"]
    for k in d:
        assert np.array_equal(d[k], got[k])
    assert [n for n, _, t, _ in client.names() if t == "tensor_dict"] == ["sd"]
    client.export_safetensors("sd", tmp_path / "sd.safetensors")
    client.import_safetensors(tmp_path / "sd.safetensors", "sd2")
    back = client.get("sd2")
    assert sorted(back) == ["b", "w"] and np.array_equal(back["w"], d["w"])


def test_names_stat_delete_and_errors(client):
    client.put(b"x" * 10, name="one")
    with pytest.raises(shoal.NameTaken) as e:
        client.put(b"y", name="one")
    assert isinstance(e.value, ValueError) and e.value.code < 0 and "one" in str(e.value)
    client.put(b"y", name="one", replace=True)
    assert bytes(client.get("one")) == b"y"
    names = client.names()
    assert [n for n, *_ in names] == ["one"]
    assert client.stat()["names"] == 1
    client.delete("one")
    with pytest.raises(shoal.NotFound) as e:
        client.get("one")
    assert isinstance(e.value, KeyError) and isinstance(e.value, shoal.Error)
    with pytest.raises(shoal.InvalidInput):
        client.put(object())
    with pytest.raises(shoal.InvalidInput):
        client.put(np.zeros(3, dtype=np.complex64))
    with pytest.raises(shoal.InvalidInput):
        client.get("x", framework="jax")


def test_the_store_being_full_is_a_memory_error(tmp_path):
    with shoal.Store(size=1 << 20, socket=str(tmp_path / "s.sock")) as s, s.connect() as c:
        with pytest.raises(shoal.StoreFull) as e:
            c.put(b"\0" * (4 << 20))
        assert isinstance(e.value, MemoryError)


def test_no_store_is_a_connection_error(tmp_path):
    with pytest.raises(shoal.Error) as e:
        shoal.connect(str(tmp_path / "nobody.sock"), timeout=2)
    assert isinstance(e.value, OSError)


def test_a_view_outlives_delete_and_gc_lets_go(client):
    base = client.stat()
    client.put(np.ones(1 << 20, dtype=np.uint8), name="v")
    view = client.get("v")
    client.delete("v")
    assert view.sum() == 1 << 20  # still readable
    assert client.stat()["pending_frees"] == 1
    del view
    gc.collect()
    st = client.stat()
    assert st["pending_frees"] == 0 and st["used"] == base["used"]


def test_repeated_calls_do_not_leak(client):
    import tracemalloc
    a = np.arange(1000, dtype=np.float64)

    def round_trip():
        client.put(a, name="leak", replace=True)
        b = client.get("leak")
        assert b[999] == 999
        client.put(b"abc", name="leak2", replace=True)
        bytes(client.get("leak2"))
        client.names()
        client.stat()

    for _ in range(200):
        round_trip()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    used = client.stat()["used"]
    for _ in range(2000):
        round_trip()
    gc.collect()
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert grown < 64 << 10, "Python memory grew by %d bytes in 2000 round trips" % grown
    assert client.stat()["used"] == used


def test_threads_share_a_client(client):
    errors = []

    def work(i):
        try:
            for j in range(200):
                client.put(np.full(16, i, dtype=np.int32), name="t%d" % i, replace=True)
                assert client.get("t%d" % i)[0] == i
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_a_forked_child_must_connect_again(client):
    client.put(b"parent", name="p")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            client.get("p")
        except shoal.Closed as e:
            code = 0 if "fork" in str(e) and "connect again" in str(e) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert bytes(client.get("p")) == b"parent"  # the parent's connection is intact


def test_another_process_maps_a_large_array(shoald):
    n = 256 << 20
    with shoal.connect(shoald) as c:
        c.put(np.full(n, 7, dtype=np.uint8), name="big", persist=True)
        # this process maps it too: the pages are the same, shared, so what the
        # reader maps costs it no private memory
        mine = c.get("big")
        assert int(mine[::4096].sum()) == 7 * (n // 4096)
        out = run_python("""
            import sys, shoal, numpy as np
            def uss():
                for line in open("/proc/self/smaps_rollup"):
                    if line.startswith(("Private_Clean", "Private_Dirty")):
                        yield int(line.split()[1]) * 1024
            before = sum(uss())
            c = shoal.connect(sys.argv[1])
            raw = c.get("big", framework=None)
            a = np.asarray(raw)
            assert a.ctypes.data == raw._address
            assert int(a[::4096].sum()) == 7 * (len(a) // 4096)  # touches every page
            print(sum(uss()) - before)
        """, shoald)
        del mine
    assert int(out) < n // 100, "the reader's Uss grew by %s bytes for %d" % (out, n)


def test_a_client_killed_mid_put_leaves_nothing(shoald):
    with shoal.connect(shoald) as c:
        base = c.stat()
        p = subprocess.Popen([PYTHON, "-c", textwrap.dedent("""
            import sys, shoal, numpy as np
            c = shoal.connect(sys.argv[1])
            a = np.ones(64 << 20, dtype=np.uint8)
            print("ready", flush=True)
            while True:
                c.put(a)
        """), shoald], env=dict(os.environ, PYTHONPATH=os.path.dirname(
            os.path.dirname(shoal.__file__))), stdout=subprocess.PIPE)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
        p.kill()
        p.wait()
        for _ in range(100):
            st = c.stat()
            if st["clients"] == base["clients"] and st["used"] == base["used"]:
                break
            time.sleep(0.05)
        assert st["used"] == base["used"] and st["objects"] == base["objects"]


def test_load_file(shoald, tmp_path):
    torch = pytest.importorskip("torch")
    f = tmp_path / "m.safetensors"
    # the dtypes torch 1.13 has (no uint16/32/64, no float8)
    subprocess.run([PYTHON, os.path.join(SRCDIR, "tests", "st_write.py"), str(f),
                    "--tensors", "20", "--bytes", "100000", "--dtypes",
                    "F32,BF16,F16,I64,U8,BOOL,F64,I32,I8,I16"], check=True)
    with shoal.connect(shoald) as c:
        sd = shoal.load_file(f, c)
        assert len(sd) == 20 and all(isinstance(t, torch.Tensor) for t in sd.values())
        names = [n for n, *_ in c.names("file:")]
        assert len(names) == 1
        again = shoal.load_file(f, c)  # found by name, not imported again
        assert [n for n, *_ in c.names("file:")] == names
        for k in sd:  # bit for bit (random bits make NaNs, which equal nothing)
            assert torch.equal(sd[k].flatten().view(torch.uint8),
                               again[k].flatten().view(torch.uint8))
    g = tmp_path / "u.safetensors"
    subprocess.run([PYTHON, os.path.join(SRCDIR, "tests", "st_write.py"), str(g),
                    "--tensors", "3", "--bytes", "3000", "--dtypes", "U64"], check=True)
    with shoal.connect(shoald) as c:
        assert all(a.dtype == np.uint64 for a in shoal.load_file(g, c, framework="numpy").values())
        with pytest.raises(shoal.InvalidInput) as e:
            shoal.load_file(g, c)
        assert "torch" in str(e.value) and "U64" in str(e.value)


def test_a_call_to_a_stalled_store_times_out(shoald_proc):
    c = shoal.connect(shoald_proc.sock)
    c.put(b"x" * 100, name="x")
    with pytest.raises(shoal.InvalidInput):
        c.get("x", timeout=0)
    with pytest.raises(TypeError):
        c.get("x", timeout="soon")
    bytes(c.get("x", timeout=5))  # a call's own timeout, then the connection's again
    stop(shoald_proc)  # the store stops answering
    try:
        t0 = time.monotonic()
        with pytest.raises(shoal.Timeout) as e:
            c.get("x", timeout=0.3)
        took = time.monotonic() - t0
        assert 0.3 <= took < 5, took
        assert "did not answer" in str(e.value) and "closed" in str(e.value)
        with pytest.raises(shoal.Closed):  # its answer may still come: the connection is done
            c.stat()
        with pytest.raises(shoal.Timeout):
            shoal.connect(shoald_proc.sock, timeout=0.3).stat()
    finally:
        shoald_proc.send_signal(signal.SIGCONT)
    with shoal.connect(shoald_proc.sock) as again:
        assert bytes(again.get("x")) == b"x" * 100


def test_ctrl_c_interrupts_a_call_to_a_stalled_store(shoald_proc):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(shoal.__file__)))
    p = subprocess.Popen([PYTHON, "-c", textwrap.dedent("""
        import sys, shoal
        c = shoal.connect(sys.argv[1], timeout=None)  # no bound: only Ctrl-C ends it
        c.put(b"y", name="y")
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            c.get("y")
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        try:
            c.stat()
        except shoal.Closed as e:
            print("closed:", e, flush=True)
    """), shoald_proc.sock], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        stop(shoald_proc)
        p.stdin.write("go\n")
        p.stdin.flush()
        time.sleep(0.5)  # well into the get
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        shoald_proc.send_signal(signal.SIGCONT)
        p.kill()
    assert out.startswith("interrupted\nclosed:"), (out, err)
    assert took < 3, took  # the C client looks every 100 ms


def test_plain_python_values_are_put_and_got_back(client):
    values = [None, True, 7, -2.5, "a string", [1, "two", [3.0]], ("a", 1), {1, 2},
              {"lr": 0.001, "layers": [64, 64], "name": "mlp", "nested": {"k": None}}, {}]
    for i, v in enumerate(values):
        oid = client.put(v, name="v%d" % i)
        assert client.get("v%d" % i) == v and client.get(oid) == v
        assert type(client.get(oid)) is type(v)
    mixed = {"step": 3, "weights": np.arange(4.0)}  # not all tensors: a value
    got = client.get(client.put(mixed))
    assert got["step"] == 3 and np.array_equal(got["weights"], mixed["weights"])
    assert client.names("v0")[0][2] == "value"
    with pytest.raises(shoal.InvalidInput) as e:
        client.put(object())
    assert "object" in str(e.value)


def test_get_by_name_keyword(client):
    client.put(b"abc", name="blob")
    assert bytes(client.get(name="blob")) == b"abc"
    with pytest.raises(shoal.InvalidInput):
        client.get("blob", name="blob")
    with pytest.raises(shoal.InvalidInput):
        client.get()


def test_names_are_bound_and_let_go_of_without_the_objects(client):
    oid = client.put(np.arange(3), persist=True)
    client.name(oid, "a")
    assert client.id_of("a") == oid
    client.name("a", "a")  # the name it has
    with pytest.raises(shoal.NameTaken):
        client.name(oid, "b")
    other = client.put(b"x", name="b")
    with pytest.raises(shoal.NameTaken):
        client.name(other, "a")
    client.unname("b")
    client.name(other, "a", replace=True)  # the name moves; oid stays
    assert client.id_of("a") == other
    assert client.get(oid).tolist() == [0, 1, 2]
    client.unname("a")
    with pytest.raises(shoal.NotFound):
        client.id_of("a")
    assert bytes(client.get(other)) == b"x"


def test_id_of_waits_for_a_name(client, store):
    def later():
        time.sleep(0.2)
        with store.connect() as c2:
            c2.put(b"late", name="late", persist=True)
    t = threading.Thread(target=later)
    t.start()
    oid = client.id_of("late", wait=True, timeout=20)
    t.join()
    assert bytes(client.get(oid)) == b"late"
    with pytest.raises(shoal.Timeout):
        client.id_of("never", wait=True, timeout=0.2)
