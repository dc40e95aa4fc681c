"""Spilling from Python: a shoald with --spill-dir on a disk takes more than its --size
from one client, arrays and a state dict come back equal, and stat() reports the spill."""

import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import shoal
from conftest import start_shoald


@pytest.fixture
def spilling(tmp_path):
    """A shoald of 32 MiB spilling into a directory on a disk (/var/tmp: /tmp may be
    tmpfs, which it refuses); its socket."""
    spill = tempfile.mkdtemp(prefix="shoal-spill-py-", dir="/var/tmp")
    sock = str(tmp_path / "s.sock")
    p = start_shoald(["--socket", sock, "--size", "32M", "--spill-dir", spill + "/d"],
                     stderr=subprocess.PIPE)
    try:
        yield sock
    finally:
        p.terminate()
        _, err = p.communicate(timeout=60)
        shutil.rmtree(spill)
        assert p.returncode == 0, err.decode(errors="replace")


def test_one_client_puts_three_times_the_store_and_gets_it_all_back(spilling):
    c = shoal.connect(spilling)
    arrays = {"a%d" % k: np.arange(k, k + (1 << 20), dtype=np.float32) for k in range(24)}
    for name, a in arrays.items():  # 4 MiB each: 96 MiB into 32
        c.put(a, name=name)
    st = c.stat()
    assert st["used"] <= st["capacity"]
    assert st["spilled"] >= 12 and st["spill_objects"] >= 12
    assert st["spill_file_bytes"] >= st["spill_bytes"] >= 12 * (4 << 20)
    for name, a in arrays.items():
        back = c.get(name)
        assert back.dtype == a.dtype and np.array_equal(back, a)
        del back
    st = c.stat()
    assert st["restored"] >= 12 and st["restore_rate"] > 0 and st["spill_rate"] > 0


def test_a_state_dict_spilled_comes_back_equal(spilling):
    c = shoal.connect(spilling)
    sd = {"layer.%d.weight" % i: np.full((256, 1024), i, dtype=np.float32) for i in range(24)}
    c.put(sd, name="model")  # 24 MiB: most of the store
    c.put(np.zeros(6 << 20, dtype=np.uint8), name="pressure")
    c.put(np.ones(6 << 20, dtype=np.uint8), name="more")
    assert c.stat()["spill_objects"] >= 1
    back = c.get("model")
    assert sorted(back) == sorted(sd)
    for k, v in sd.items():
        assert np.array_equal(back[k], v)
