"""A vineyard user's program, run unchanged but for its imports through
shoal.compat.vineyard: the vineyard seed's script (put a torch state dict under a name
in one host's store, get it by name with fetch=True in another's), names, plain values.
vineyard is not packaged by Debian (and PyPI is not reachable here), so the program
runs against shoal only; it is written against vineyard's documented client API."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

# The user's program: vineyard's calls as its documentation shows them. Only the two
# import lines differ from what runs against vineyard itself.
PROGRAM = textwrap.dedent('''
    import sys
    import torch
    import shoal.compat.vineyard as vineyard
    from shoal.compat.vineyard.contrib.ml.torch import torch_context

    sock_a, sock_b, peer_host, peer_port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    g = torch.Generator().manual_seed(0)
    state_dict = {"layer%d.weight" % i: torch.rand(64, 32, generator=g) for i in range(40)}
    state_dict["emb"] = torch.rand(100, 8, generator=g).to(torch.bfloat16)

    client = vineyard.connect(sock_a)
    with torch_context(client):
        obj = client.put(state_dict, persist=True, name="state_dict")
    assert isinstance(obj, vineyard.ObjectID)

    client2 = vineyard.connect(sock_b)
    try:
        client2.get(name="state_dict")  # in the other host's store: not fetched
        raise SystemExit("a get without fetch=True fetched")
    except Exception as e:
        where = str(e)
    with torch_context(client2):
        data2 = client2.get(name="state_dict", fetch=True)
    assert len(state_dict) == len(data2), "State dict and data2 have different lengths"
    for k, v in state_dict.items():
        assert torch.equal(v, data2[k]), f"Tensors for key {k} do not match."
    assert client2.get(obj) is not None  # by id, here now

    # the RPC client: another host's store through its port
    rpc_client = vineyard.connect(host=peer_host, port=peer_port)
    with torch_context(rpc_client):
        data3 = rpc_client.get(name="state_dict")
    assert len(state_dict) == len(data3), "State dict and data3 have different lengths"
    for k, v in state_dict.items():
        assert torch.equal(v, data3[k]), f"Tensors for key {k} do not match."
    with torch_context(rpc_client):
        obj1 = rpc_client.put(state_dict, persist=True, name="state_dict_1")
    with torch_context(client2):
        again = client2.get(name="state_dict_1", fetch=True)
    assert all(torch.equal(v, again[k]) for k, v in state_dict.items())

    # names: put_name, get_name, list_names, drop_name
    cfg = client.put({"lr": 0.001, "layers": [64, 32], "name": "mlp"})
    client.put_name(cfg, "config")
    assert client.get_name("config") == cfg
    assert client.get(name="config") == {"lr": 0.001, "layers": [64, 32], "name": "mlp"}
    assert set(client.list_names("*", limit=10)) == {"state_dict", "state_dict_1", "config"}
    assert list(client.list_names("conf.*", regex=True)) == ["config"]
    client.drop_name("config")
    assert client.exists(cfg) and "config" not in client.list_names()
    client.put("a string", name="greeting")
    assert client.get(name="greeting") == "a string"
    client.delete(client.get_name("greeting"))
    assert not client.list_names("greet*")
    print("OK", where)
''')


def test_the_vineyard_seed_program_runs_with_its_imports_changed(etcd_stores, tmp_path):
    a, b = etcd_stores
    prog = tmp_path / "user_program.py"
    prog.write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    host, port = a.peer.rsplit(":", 1)
    env["SHOAL_SECRET"] = a.secret
    out = subprocess.run([sys.executable, str(prog), a.sock, b.sock, host, port],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK ")
    assert a.peer in out.stdout and "fetch" in out.stdout  # the error said where


def test_what_is_not_covered_says_what_to_use(tmp_path):
    import shoal
    import shoal.compat.vineyard as vineyard
    with shoal.Store(size=64 << 20, socket=str(tmp_path / "s.sock")) as s:
        c = vineyard.connect(s.socket)
        with pytest.raises(NotImplementedError) as e:
            c.get_meta(vineyard.ObjectID(1))
        assert "shoal.Client.get" in str(e.value)
        with pytest.raises(NotImplementedError) as e:
            c.clear()
        assert "delete" in str(e.value)
        with pytest.raises(NotImplementedError):
            c.put(b"x", builder=object())
        with pytest.raises(NotImplementedError):
            vineyard.ObjectMeta  # noqa: B018
        with pytest.raises(NotImplementedError):
            vineyard.connect(s.socket, session=3)
        # vineyard's text form of ids
        assert vineyard.ObjectID("o%016x" % 255) == 255 and repr(vineyard.ObjectID(255)) \
            == "o00000000000000ff"
        c.close()
