"""The benchmarks under benchmarks/ keep up with the package's API (they run on a GPU, rarely here).

Every script imports and parses --help; the ladder renders each rung from the candidate template;
worker_overhead.py runs end to end on the tiny suite with a handful of rounds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = ["perf_lanes.py", "multi_gpu.py", "ladder.py", "worker_overhead.py", "report_speed.py", "fixed_cost.py",
           "profile_rungs.py", "compile_reference.py", "chained_vs_outside.py", "gpu_evidence.py", "profile_graphs.py"]

# One interpreter for all of them: torch and diffusers are imported once.
HELP_ALL = r"""
import contextlib, io, runpy, sys
from pathlib import Path
bench = Path(sys.argv[1])
for name in sys.argv[2:]:  # the slice is taken once; sys.argv is reset per script
    sys.argv = [str(bench / name), "--help"]
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_path(str(bench / name), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), (name, exc.code)
    assert "usage:" in buf.getvalue(), (name, buf.getvalue()[:500])
    print("ok", name)
"""


def test_every_benchmark_imports_and_parses_help() -> None:
    res = subprocess.run([sys.executable, "-c", HELP_ALL, str(REPO / "benchmarks"), *SCRIPTS], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert res.stdout.split() == [w for s in SCRIPTS for w in ("ok", s)]


def test_ladder_renders_every_rung(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "benchmarks/ladder.py", "--write-patches", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    patches = sorted(tmp_path.glob("*.patch"))
    assert len(patches) >= 8
    assert all("+++ b/mutable/pipeline.py" in p.read_text() for p in patches)


def test_worker_overhead_runs_on_the_tiny_suite(tmp_path: Path, model_cache: Path) -> None:
    out = tmp_path / "wo.json"
    env = {**os.environ, "DITAR_CACHE": str(model_cache), "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "benchmarks/worker_overhead.py", "--suite", "tiny", "--lanes", "latency_b1",
                          "--rounds", "4", "--warmup", "1", "--pause-reps", "3", "--transport-reps", "3",
                          "--transport-shape", "2,64", "--device", "cpu", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    data = json.loads(out.read_text())
    lane = data["lanes"]["latency_b1"]
    assert lane["outputs_identical"] is True  # the same pipeline on both sides
    assert len(lane["samples"]["inprocess_s"]) == len(lane["samples"]["worker_judge_s"]) == 4
    assert lane["paired_ci95"][0] <= lane["paired_ratio"] <= lane["paired_ci95"][1]
    assert lane["round_trip_median_ms"] > 0
    assert data["transport"]["bytes"] == 2 * 64 * 64 * 3 + 2 * 4 * 8 * 8 * 4
    assert "worker/in-proc" in res.stdout and "transport alone" in res.stdout


def test_chained_vs_outside_plans_three_exact_wins() -> None:
    """The baseline runs two redundant passes; each step removes work, the last is the lean rung."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import chained_vs_outside as cvo
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    stock = (REPO / "mutable/pipeline.py").read_text()
    base = cvo.stock_with(2, stock)
    steps = cvo.plan(stock)
    assert base.count("# thrown away") == 2
    assert [n for n, _, _ in steps] == ["drop_one", "drop_two", "lean"]
    assert steps[0][2].count("# thrown away") == 1 and steps[1][2] == stock
    assert "LEAN = True" in steps[2][2] and "# thrown away" not in steps[2][2]
    assert cvo.not_judged("DITAR VERDICT: DISCARD lane=latency_b1 unstable")
    assert not cvo.not_judged("DITAR VERDICT: KEEP")


def test_gpu_evidence_states_each_figure_of_issue_52() -> None:
    """The one-call GPU script's table: each Done-when figure from the call's results, met or not."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_evidence as ge

    rows = [{"rung": "exact_stack", "class": "exact", "verdict": "KEEP", "judged": True, "lanes": {}, "wall_s": 9},
            {"rung": "regional_compile", "class": "exact", "verdict": "KEEP", "judged": True, "lanes": {}, "wall_s": 9},
            {"rung": "vae_compile", "class": "exact", "verdict": "DISCARD", "judged": True, "lanes": {}, "wall_s": 9},
            {"rung": "sdpa", "class": "exact", "verdict": "DISCARD", "judged": False, "lanes": {}, "wall_s": 9}]
    assert ge.judged_after_compiled_keep(rows) == (1, 2)  # the host's UNSTABLE is no judgment
    figures = (("latency_b1", 1.6, 0.2), ("throughput_b8", 1.2, 0.5))
    cmp = [{"mode": "reduce-overhead", "lane": lane, "rounds": 10, "champion_median_s": 0.1,
            "compiled_median_s": x / 10, "speedup": x, "ci95": [x - 0.1, x + 0.1], "compiled_compile_s": 50.0,
            "champion_tflops": 400.0, "measured_ceiling_share": share} for lane, x, share in figures]
    ev = {"suite": "dit-xl-2-256", "budget_s": 530, "wall_s": 500, "gpu": {"card": "NVIDIA H100"},
          "aa_noise": {"latency_b1": {"ci_half_width": 0.1, "paired": 0.05, "median_ms": 950.0}},
          "steps": [{"step": "ladder", "wall_s": 300}], "ladder": {"rows": rows},
          "judged_after_compiled_keep": ge.judged_after_compiled_keep(rows), "compile": {"rows": cmp},
          "profile": {"lane": "latency_b1", "device_attribution": {"named_share": 0.93}}}
    met = {c["what"].split(" (")[0]: c["met"] for c in ge.criteria(ev)}
    assert met == {"runs after a compiled KEEP judged": False, "champion vs reduce-overhead, latency_b1": True,
                   "champion vs reduce-overhead, throughput_b8": False,
                   "b8 share of the measured dense fp16 ceiling": False,
                   "profile: device time in named phases": True}
    ev["criteria"] = ge.criteria(ev)
    text = ge.table(ev)
    assert "NVIDIA H100" in text and "CI half-width 10.00%" in text and "1 of 2" in text
    assert len(text) < 12000


def test_profile_graphs_needs_cuda_and_says_so_on_a_cpu() -> None:
    res = subprocess.run([sys.executable, str(REPO / "benchmarks/profile_graphs.py"), "--suite", "tiny"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 0 and "needs CUDA" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
