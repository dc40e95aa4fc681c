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
    with pytest.raises(shoal.InvalidInput) as e:
        client.get("bf")
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
