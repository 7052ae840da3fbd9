"""Issue 29's side-by-side reference on the CPU: torch.compile of the stock pipeline
(demo/candidates/compiled_stock.py) timed beside a ladder workspace's champion in one call, with
the gate's lane code, its compile apart from the timed rounds (benchmarks/compile_reference.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_champion_is_timed_beside_torch_compile_with_the_compile_apart(tmp_path):
    ws, out = tmp_path / "ws", tmp_path / "out"
    # a ladder workspace with its baseline and no rung: the champion is the stock pipeline
    # (its baseline stored whatever the box's A/A noise: on a loaded CI box the bound refused it)
    res = subprocess.run([sys.executable, str(REPO / "benchmarks/ladder.py"), "--suite", "tiny", "--accept-noise",
                          "--rungs", "", "--workdir", str(ws), "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = subprocess.run([sys.executable, str(REPO / "benchmarks/compile_reference.py"), "--workdir", str(ws),
                          "--rounds", "4", "--lanes", "latency_b1", "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads((out / "compile_reference.json").read_text())
    assert report["device"] == "cpu" and len(report["rows"]) == 1, report
    row = report["rows"][0]
    assert row["mode"] == "reduce-overhead" and row["lane"] == "latency_b1" and row["rounds"] == 4, row
    low, high = row["ci95"]
    assert low <= row["speedup"] <= high and row["champion_median_s"] > 0 and row["compiled_median_s"] > 0, row
    # the compile lands in the compiled side's warm-up, not in its timed rounds
    assert row["compiled_compile_s"] > 5 * row["compiled_median_s"], row
    assert "reduce-overhead  latency_b1" in res.stdout, res.stdout[-2000:]
    assert (ws / ".autoresearch/compiled-reduce-overhead/pipeline.py").read_text().count(
        "COMPILE_MODE = 'reduce-overhead'") == 1


def test_a_folder_that_is_no_ladder_workspace_is_named(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "benchmarks/compile_reference.py"), "--workdir",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and f"{tmp_path}: not a ladder workspace" in res.stderr, res.stderr
