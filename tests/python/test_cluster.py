"""Objects of another host's store from Python: Client.migrate and get(fetch=True),
between two real shoalds on loopback ports."""
import numpy as np
import pytest

import shoal


def test_migrate_copies_a_dict_with_its_id(two_stores):
    a, b = two_stores
    state = {"layer.%d" % i: np.arange(i * 1000, dtype=np.float32) for i in range(1, 50)}
    with shoal.Client(a.sock) as ca, shoal.Client(b.sock) as cb:
        oid = ca.put(state, name="model")
        assert cb.migrate("model", a.peer) == oid
        got = cb.get("model")
        assert set(got) == set(state)
        for k, v in state.items():
            np.testing.assert_array_equal(got[k], v)
        # here now: a second ask costs nothing, by name or id
        assert cb.migrate(oid, a.peer) == oid
        assert ca.stat()["sent"] == 1
        assert cb.stat()["fetched"] == 1


def test_get_fetch_from_a_source(two_stores):
    a, b = two_stores
    with shoal.Client(a.sock) as ca, shoal.Client(b.sock) as cb:
        arr = np.arange(1 << 20, dtype=np.int64)
        ca.put(arr, name="big")
        with pytest.raises(shoal.NotFound):
            cb.get("big")  # not here, and this store has no registry
        np.testing.assert_array_equal(cb.get("big", fetch=True, source=a.peer), arr)
        np.testing.assert_array_equal(cb.get("big"), arr)  # local from now on
        with pytest.raises(shoal.InvalidInput):
            cb.get("big", source=a.peer)  # a source without fetch


def test_migrate_of_nothing_says_where_it_looked(two_stores):
    a, b = two_stores
    with shoal.Client(b.sock) as cb:
        with pytest.raises(shoal.NotFound) as e:
            cb.migrate("nothing", a.peer)
        assert a.peer in str(e.value)
        with pytest.raises(shoal.Error):
            cb.migrate("nothing", "127.0.0.1:1")  # nobody there


def test_migrate_reports_progress_and_its_callbacks_errors(two_stores):
    a, b = two_stores
    with shoal.Client(a.sock) as ca, shoal.Client(b.sock, timeout=120) as cb:
        big = np.ones(384 << 20, dtype=np.uint8)  # longer than a report's 100 ms here
        ca.put(big, name="big")
        seen = []
        cb.migrate("big", a.peer, progress=lambda got, total: seen.append((got, total)))
        assert seen, "no progress in a transfer of 384 MiB"
        assert all(t == big.nbytes and 0 <= g <= t for g, t in seen)
        assert [g for g, _ in seen] == sorted(g for g, _ in seen)
        cb.delete("big")

        def fails(got, total):
            raise KeyError("from the callback")
        with pytest.raises(KeyError, match="from the callback"):
            cb.migrate("big", a.peer, progress=fails)
        # the copy itself went on and landed
        assert cb.get("big").nbytes == big.nbytes
        with pytest.raises(TypeError):
            cb.migrate("big", a.peer, progress=42)
        with pytest.raises(shoal.InvalidInput):
            cb.get("big", progress=print)  # progress without fetch and a source


def test_a_get_without_fetch_says_where_the_object_is(etcd_stores):
    """vineyard's meaning: only fetch=True copies an object from another host (the
    store used to fetch on any get); the error names the store that has it."""
    a, b = etcd_stores
    with shoal.Client(a.sock) as ca, shoal.Client(b.sock) as cb:
        arr = np.arange(1 << 16, dtype=np.int64)
        oid = ca.put(arr, name="weights", persist=True)
        with pytest.raises(shoal.NotFound) as e:
            cb.get("weights")
        assert a.peer in str(e.value) and "fetch" in str(e.value)
        with pytest.raises(shoal.NotFound) as e:
            cb.get(oid)
        assert a.peer in str(e.value)
        assert cb.stat()["fetched"] == 0
        np.testing.assert_array_equal(cb.get(name="weights", fetch=True), arr)
        np.testing.assert_array_equal(cb.get("weights"), arr)  # here now
        assert cb.stat()["fetched"] == 1


def test_names_bound_and_let_go_of_are_the_clusters(etcd_stores):
    a, b = etcd_stores
    with shoal.Client(a.sock) as ca, shoal.Client(b.sock) as cb:
        oid = ca.put({"w": np.ones(10)}, persist=True)
        ca.name(oid, "model")
        assert ca.id_of("model") == oid
        assert list(cb.get("model", fetch=True)) == ["w"]
        with pytest.raises(shoal.NameTaken):
            ca.name(oid, "other")  # one name an object
        ca.unname("model")
        with pytest.raises(shoal.NotFound):
            ca.id_of("model")
        assert ca.get(oid)["w"].sum() == 10  # the object stays
        with pytest.raises(shoal.NotFound):
            cb.get("model", fetch=True)  # let go of in the cluster too
