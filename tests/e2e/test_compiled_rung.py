"""Issue 29's compiled rung through the real loop on the CPU: the ladder commits the lean loop, then
the DiT block compiled once by Inductor (faster_exact.py's REGIONAL_COMPILE), each judged by
`dit-ar experiment`. Whatever the CPU lane says of its speed, the compiled candidate must hold the
exact class against the baseline, and its compile must land in the quality phase and the warm-up,
never in the timed rounds. `--profile-lanes` then profiles the champion through `dit-ar profile`."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_compiled_block_holds_exact_and_compiles_outside_the_timed_rounds(tmp_path):
    ws, out = tmp_path / "ws", tmp_path / "out"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks/ladder.py"), "--suite", "tiny", "--accept-noise",
                          "--rungs", "lean,regional_compile", "--workdir", str(ws), "--out", str(out),
                          "--profile-lanes", "latency_b1"], capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = {r["rung"]: r for r in json.loads((out / "ladder.json").read_text())["rows"]}
    lean, compiled = rows["lean"], rows["regional_compile"]
    assert lean["verdict"] == "KEEP", lean
    # judged, not crashed: exact held on every corpus item whatever the lane said
    verdict = re.search(r"DITAR VERDICT: (\w+) .*quality=(\d+)/(\d+) class=exact",
                        (out / "02_regional_compile.log").read_text())
    assert verdict and verdict.group(1) in ("KEEP", "DISCARD") and verdict.group(2) == verdict.group(3), \
        (out / "02_regional_compile.log").read_text()[-3000:]
    assert compiled["worst_psnr"] >= 38.0, compiled

    def untimed(row: dict) -> float:  # where a lazy compile lands: the corpus batch, the lanes' warm-up
        t = row["timings"]
        return (t.get("group.quality") or 0.0) + (t.get("perf.warmup") or 0.0)

    assert untimed(compiled) > untimed(lean) + 5.0, (lean["timings"], compiled["timings"])
    # ... and not in the timed rounds: the compiled side's calls stay of the eager ones' order
    b1 = compiled["lanes"]["latency_b1"]["median_s"]
    assert b1 < 3 * lean["lanes"]["latency_b1"]["median_s"] and b1 < 1.0, (lean["lanes"], compiled["lanes"])
    assert re.search(r"^regional_compile +\d", res.stdout, re.M), res.stdout[-3000:]  # the fixed-cost table
    summary = json.loads((out / "profile-latency_b1/summary.json").read_text())
    assert summary["lane"] == "latency_b1" and summary["kind"] == "ditar-profile", summary
