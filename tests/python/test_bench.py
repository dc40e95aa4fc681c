"""The benchmarks' rules from Python (python3 -m shoal.bench SUITE), as every C suite
applies them: a run fails only when one of shoal's own rows failed; a baseline or a peer
that could not run is a failed row, and the run passes. Parameters keep JSON's types."""
import json

import pytest

from shoal import bench as B


@pytest.fixture
def rows():
    saved = list(B.RESULTS)
    B.RESULTS.clear()
    yield B.RESULTS
    B.RESULTS[:] = saved


def test_a_failed_peer_row_leaves_the_run_passing(rows):
    B.result("flood", {"n": 256}, {"per_s": 1000.0})
    B.result("flood", {"n": 256}, {}, impl="ipyparallel", baseline=True, status="failed",
             why="ipcluster: no engine registered")
    assert B.exit_status() == 0
    line = json.loads(json.dumps(rows[1]))
    assert line["status"] == "failed" and line["error"] == "ipcluster: no engine registered"


def test_a_failed_shoal_row_fails_the_run(rows):
    B.result("flood", {"n": 256}, {}, status="failed", why="no engine")
    B.result("flood", {"n": 256}, {"per_s": 10.0}, impl="ipyparallel", baseline=True)
    assert B.exit_status() == 1


def test_booleans_stay_booleans(rows, capsys):
    B.result("idle_extension", {"n": 1, "torch": False}, {"uss_kib": 900.0})
    B.emit(True, "")
    line = json.loads(capsys.readouterr().out)
    assert line["params"] == {"n": 1, "torch": False}
    B.emit(False, "title")
    assert "torch=false" in capsys.readouterr().out


def test_rpc_runs_only_the_part_asked_for(tmp_path):
    """--only runs one part of the rpc suite (the others' rows are absent), and an
    unknown part is refused, naming the parts there are."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(B.__file__)))
    r = subprocess.run([sys.executable, "-m", "shoal.bench", "rpc", "--only", "bogus"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "calls, shared, readers, start, idle" in r.stderr
    r = subprocess.run([sys.executable, "-m", "shoal.bench", "rpc", "--quick", "--json",
                        "--only", "start"], capture_output=True, text=True, env=env,
                       timeout=600)
    tests = {json.loads(line)["test"] for line in r.stdout.splitlines()}
    assert r.returncode == 0, r.stderr
    assert tests == {"extension_start"}, tests


def test_fibers_suite_runs_every_row(tmp_path):
    """python3 -m shoal.bench fibers at its tiny sizes (one run each), and the same through
    `shoal bench py-fibers` when this build's program is there: every test has shoal's
    row, ok, and a row for each peer (ok, or skipped when it is not installed), with the
    metrics the issue names (best_s, ns, uss_bytes)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(B.__file__)),
               SHOAL_BENCH_TINY="1")
    cmds = [[sys.executable, "-m", "shoal.bench", "fibers", "--json"]]
    tool = os.path.join(os.environ.get("SHOAL_TEST_BINDIR", ""), "tools", "shoal")
    if os.environ.get("SHOAL_TEST_BINDIR") and os.access(tool, os.X_OK):
        cmds.append([tool, "bench", "py-fibers", "--json", "--plot",
                     str(tmp_path / "f.svg")])
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        got = {(x["test"], x["impl"]): x for x in rows}
        key = {"hackysack": "best_s", "hop": "ns", "spawn": "ns", "idle": "uss_bytes"}
        for test, metric in key.items():
            mine = got[(test, "shoal")]
            assert mine["status"] == "ok" and mine["metrics"][metric] > 0, mine
            for impl in ("greenlet", "gevent", "asyncio", "generator"):
                x = got[(test, impl)]
                assert x["baseline"] is True
                assert x["status"] in ("ok", "skipped"), x
                if x["status"] == "ok":
                    assert x["metrics"][metric] > 0, x
    if len(cmds) > 1:
        assert (tmp_path / "f.svg").read_text().startswith("<svg")
