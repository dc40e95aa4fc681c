"""shoal.remote.RemoteClient: a store of another host used over its peer port, against a
real shoald on a loopback port (its secret in this process's environment)."""
import os
import socket
import time

import numpy as np
import pytest

import shoal
from shoal.remote import RemoteClient

from conftest import start_peer_store

SECRET = "python-remote-test-secret-0123"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOAL_SECRET", SECRET)
    monkeypatch.delenv("SHOAL_SECRET_FILE", raising=False)
    p = start_peer_store(tmp_path, "a", SECRET)
    yield p
    p.terminate()
    assert p.wait(10) == 0


def host_port(p):
    host, port = p.peer.rsplit(":", 1)
    return host, int(port)


def test_get_what_a_local_client_put(store):
    arr = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    state = {"layer.%d" % i: np.arange(i * 100, dtype=np.int64) for i in range(1, 30)}
    with shoal.Client(store.sock) as c:
        aid = c.put(arr, name="arr", persist=True)
        c.put(state, name="state", metadata={"format": "pt"}, persist=True)
        c.put(b"hello remote", name="blob", persist=True)
    with RemoteClient(*host_port(store)) as rc:
        got = rc.get("arr")
        assert isinstance(got, np.ndarray) and got.shape == arr.shape
        np.testing.assert_array_equal(got, arr)
        np.testing.assert_array_equal(rc.get(aid), arr)  # by id
        d = rc.get("state")
        assert set(d) == set(state)
        for k, v in state.items():
            np.testing.assert_array_equal(d[k], v)
        assert bytes(rc.get("blob")) == b"hello remote"
        assert rc.get("blob", copy=True) == b"hello remote"
        with pytest.raises(shoal.NotFound, match="no object named"):
            rc.get("missing")
        with pytest.raises(shoal.InvalidInput):
            rc.get("arr", framework="jax")
    # what was got stays valid after the client closed: it is this process's memory
    np.testing.assert_array_equal(got, arr)


def test_put_then_get_back_here_and_through_the_local_socket(store):
    arr = np.random.default_rng(1).standard_normal((333, 77)).astype(np.float64)
    state = {"w": np.ones((64, 64), dtype=np.float16), "b": np.arange(7, dtype=np.uint8)}
    with RemoteClient(address=store.peer) as rc:
        i = rc.put(arr, name="arr", persist=True)
        assert isinstance(i, shoal.ObjectID)
        rc.put(state, name="state", persist=True, metadata={"format": "pt"})
        rc.put(b"x" * 100000, name="blob", persist=True)
        with pytest.raises(shoal.NameTaken):
            rc.put(b"y", name="blob")
        rc.put(b"y", name="blob", replace=True, persist=True)
        np.testing.assert_array_equal(rc.get("arr"), arr)
        assert [n for n, *_ in rc.names()] == ["arr", "blob", "state"]
        assert [(n, t) for n, _, t, _ in rc.names("st")] == [("state", "tensor_dict")]
    with shoal.Client(store.sock) as c:
        np.testing.assert_array_equal(c.get("arr"), arr)
        d = c.get("state")
        for k, v in state.items():
            np.testing.assert_array_equal(d[k], v)
        assert bytes(c.get("blob")) == b"y"


def test_torch_round_trip(store):
    torch = pytest.importorskip("torch")
    sd = {"a": torch.randn(16, 16), "b": torch.ones(5, dtype=torch.bfloat16),
          "m": torch.tensor([True, False])}
    with RemoteClient(address=store.peer) as rc:
        rc.put(sd, name="sd")
        got = rc.get("sd", framework="torch")
        for k, v in sd.items():
            assert got[k].dtype == v.dtype
            assert torch.equal(got[k], v)
        t = rc.get("sd", framework="torch")["a"]
        t.add_(1)  # its own memory: nothing changes in the store
        assert torch.equal(rc.get("sd", framework="torch")["a"], sd["a"])


def test_transient_puts_go_with_the_client_and_delete(store):
    with shoal.Client(store.sock) as c:
        rc = RemoteClient(address=store.peer)
        rc.put(b"tmp", name="tmp")
        rc.put(b"kept", name="kept", persist=True)
        assert bytes(c.get("tmp")) == b"tmp"
        rc.close()
        assert rc.closed
        with pytest.raises(shoal.Closed):
            rc.get("kept")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                c.get("tmp")
            except shoal.NotFound:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("a transient put outlived its client")
        assert bytes(c.get("kept")) == b"kept"
        with RemoteClient(address=store.peer) as rc:
            rc.delete("kept")
            with pytest.raises(shoal.NotFound):
                rc.delete("kept")
        with pytest.raises(shoal.NotFound):
            c.get("kept")


def test_a_wrong_secret_is_refused(store, monkeypatch):
    monkeypatch.setenv("SHOAL_SECRET", "another-secret-entirely-0000")
    with pytest.raises(shoal.Error, match="secret"):
        RemoteClient(address=store.peer)
    with pytest.raises(shoal.InvalidInput):
        RemoteClient("127.0.0.1")


def wait_used(c, used):
    deadline = time.monotonic() + 20
    while c.stat()["used"] != used and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.stat()["used"] == used


def test_a_store_full_says_so_and_keeps_no_room(store):
    with shoal.Client(store.sock) as c:
        used = c.stat()["used"]
        with RemoteClient(address=store.peer) as rc:
            with pytest.raises(shoal.StoreFull):
                rc.put(np.zeros(600 << 20, dtype=np.uint8), name="huge")  # 512M store
            rc.put(np.ones(1 << 20, dtype=np.uint8), name="after")  # the link goes on
            assert c.stat()["used"] >= used + (1 << 20)
        wait_used(c, used)  # the transient put went with the client, the refused one held none


def test_garbage_on_the_port_does_not_hurt_the_store(store):
    host, port = host_port(store)
    for junk in (b"", b"\x16\x03\x01" + os.urandom(3000), os.urandom(64)):
        with socket.create_connection((host, port)) as s:
            s.sendall(junk)
    with RemoteClient(address=store.peer) as rc:
        rc.put(b"still here", name="x")
        assert bytes(rc.get("x")) == b"still here"
