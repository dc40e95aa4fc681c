"""torch tensors through the store: state dicts, bfloat16, zero-copy DLPack views."""
import gc

import pytest

import shoal

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


@pytest.fixture
def client(tmp_path):
    with shoal.Store(size=512 << 20, socket=str(tmp_path / "s.sock")) as s, s.connect() as c:
        yield c


def test_a_state_dict_of_1100_tensors(client):
    g = torch.Generator().manual_seed(0)
    sd = {}
    for i in range(1100):
        dt = (torch.float32, torch.float16, torch.bfloat16, torch.int64)[i % 4]
        sd["layer%d.weight" % i] = (torch.rand((i % 7) + 1, 3, generator=g) * 10).to(dt)
    client.put(sd, name="sd")
    got = client.get("sd", framework="torch")
    assert list(got) == list(sd)
    for k, v in sd.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


def test_bfloat16_goes_through_torch_not_numpy(client):
    t = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    client.put(t, name="bf")
    assert torch.equal(client.get("bf", framework="torch"), t)
    assert torch.equal(client.get("bf"), t)  # put from torch: torch back
    with pytest.raises(shoal.InvalidInput) as e:
        client.get("bf", framework="numpy")
    assert "bfloat16" in str(e.value) and "torch" in str(e.value)


def test_torch_views_share_the_store(client):
    t = torch.arange(1 << 16, dtype=torch.float32)
    client.put(t, name="t")
    raw = client.get("t", framework=None)
    a = torch.from_dlpack(raw)
    assert a.data_ptr() == raw._address
    c = client.get("t", framework="torch", copy=True)
    c += 1  # a copy is the caller's
    assert torch.equal(client.get("t", framework="torch"), t)


def test_non_contiguous_and_gpu_less_tensors(client):
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4).t()
    client.put(t, name="nc")
    assert torch.equal(client.get("nc", framework="torch"), t)
    with pytest.raises(shoal.InvalidInput):
        client.put(torch.zeros(2, dtype=torch.complex64))


def test_views_keep_the_object_until_collected(client):
    base = client.stat()["used"]
    client.put(torch.ones(1 << 20), name="x")
    v = client.get("x", framework="torch")
    client.delete("x")
    assert float(v.sum()) == float(1 << 20)
    del v
    gc.collect()
    assert client.stat()["used"] == base


def test_a_state_dict_holds_the_object_until_its_last_tensor_goes(client):
    base = client.stat()["used"]
    sd = {"w%d" % i: torch.full((256,), float(i)) for i in range(50)}
    sd["mask"] = torch.tensor([True, False, True])
    client.put(sd, name="sd")
    got = client.get("sd", framework="torch")
    assert got["mask"].dtype == torch.bool and got["mask"].tolist() == [True, False, True]
    client.delete("sd")
    keep = got["w7"]
    del got
    gc.collect()
    assert client.stat()["used"] > base  # one tensor still maps it
    assert float(keep.sum()) == 7.0 * 256
    del keep
    gc.collect()
    assert client.stat()["used"] == base


def test_getting_state_dicts_does_not_leak(client):
    import tracemalloc
    base = client.stat()["used"]
    client.put({"w%d" % i: torch.ones(64) for i in range(100)}, name="sd")
    for _ in range(20):
        client.get("sd", framework="torch")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(300):
        d = client.get("sd", framework="torch")
        assert float(d["w99"].sum()) == 64.0
        del d
    gc.collect()
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert grown < 64 << 10, "Python memory grew by %d bytes in 300 gets" % grown
    client.delete("sd")  # freed only if no get left a reference behind
    assert client.stat()["used"] == base


# A reader that writes in place: before copy-on-write views the pages were mapped
# read-only and t.add_(1) killed the process with SIGSEGV.
_WRITER = r"""
import sys, torch, shoal
c = shoal.connect(sys.argv[1])
t = c.get("t", framework="torch")
t.add_(1)
sd = c.get("sd", framework="torch")
sd["w"].mul_(-1)
print(int(t.sum()), float(sd["w"].sum()), int(c.get("t", framework="torch").sum()))
"""


def test_a_write_to_a_tensor_got_from_the_store_is_the_writers_own(client, tmp_path):
    import subprocess
    import sys
    t = torch.arange(1 << 20, dtype=torch.int64)  # 8 MiB: a segment of its own
    w = torch.ones(1000, dtype=torch.float64)
    client.put(t, name="t")
    client.put({"w": w, "b": torch.zeros(3)}, name="sd")
    # another process writes to what it got: it lives, and sees its own writes
    out = subprocess.run([sys.executable, "-c", _WRITER, client.socket], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    s_t, s_w, again = out.stdout.split()
    assert int(s_t) == int(t.sum()) + t.numel() and float(s_w) == -1000.0
    assert int(again) == int(t.sum())  # its next get maps the original again
    # here, in this process: a write to one get is seen by no other get
    a = client.get("t", framework="torch")
    b = client.get("t", framework="torch")
    n = client.get("t", framework="numpy")  # read-only, the same sealed bytes
    a.add_(1)
    a[0] = 42
    assert torch.equal(b, t) and np.array_equal(n, t.numpy())
    assert a[0].item() == 42 and a[1].item() == 2
    sd = client.get("sd", framework="torch")
    sd["w"].zero_()
    assert torch.equal(client.get("sd", framework="torch")["w"], w)
    assert torch.equal(torch.from_numpy(client.get("sd", framework="numpy")["w"].copy()), w)
    del a, b, n, sd
    gc.collect()


def test_a_written_tensor_lets_go_of_its_pages(client):
    base = client.stat()["used"]
    client.put(torch.zeros(1 << 20), name="z")
    a = client.get("z", framework="torch")
    a.fill_(3)
    client.delete("z")
    assert client.stat()["used"] > base  # the view holds the object
    del a
    gc.collect()
    assert client.stat()["used"] == base


def test_what_was_put_from_torch_comes_back_as_torch(client):
    sd = {"w": torch.ones(3), "b": torch.zeros(2, dtype=torch.bfloat16)}
    client.put(sd, name="sd")
    client.put(torch.arange(5), name="t")
    client.put({"w": np.ones(3)}, name="np")
    got = client.get("sd")
    assert all(isinstance(v, torch.Tensor) for v in got.values())
    assert torch.equal(got["b"], sd["b"])
    assert isinstance(client.get("t"), torch.Tensor)
    assert isinstance(client.get("np")["w"], np.ndarray)
    assert isinstance(client.get("t", framework="numpy"), np.ndarray)
    # torch's mark is safetensors' own: a file torch saved comes back as torch too
    obj = client._c.get("sd")
    try:
        assert obj.fields() == {"format": "pt"}
    finally:
        obj.release()
