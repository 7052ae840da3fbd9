"""`dit-ar profile` (issue 28): one call of the candidate under torch.profiler, attributed to the
pipeline's phases (core.attribution), with a Chrome trace and a JSON summary; it times no lane,
records nothing and leaves git alone.

The command on the tiny suite: the trace is parsed here and the coverage computed from what was
written, not taken on trust. The attribution itself, on hand-made spans (no torch):
tests/unit/core/test_attribution.py."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

# ---- the command, on the tiny suite (CPU) --------------------------------------------------

def _out_dir(stdout: str) -> Path:
    m = re.search(r"^summary\s+(\S+)", stdout, re.MULTILINE)
    assert m, stdout[-3000:]
    return Path(m.group(1)).parent


def test_profile_prints_the_phases_writes_trace_and_summary_and_records_nothing(research):
    proj = research
    base, rows, ref = proj.head(), proj.ledger(), proj.git("show-ref")
    proj.write("mutable/pipeline.py", (proj.root / "mutable/pipeline.py").read_text() + "\n# an edit\n")
    res = proj.ditar("profile")
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-3000:]
    assert "lane latency_b1 (batch 1, 10 steps)" in out and "uncommitted changes" in out, out[-3000:]
    for label in ("setup: noise, labels, timesteps", "attention", "MLP (feed-forward)", "adaLN", "norms (LayerNorm)",
                  "conditioning: timestep + class embedding", "guidance combine", "scheduler step", "VAE decode",
                  "host gaps", "call (wall)", "top 10 operators by self CPU time", "FLOP/s achieved"):
        assert label in out, (label, out[-3000:])
    assert "ditar: profile: no lane timed, nothing recorded, git untouched\nditar: next: the largest phase above" in out
    # on a CPU no kernel ran: said, and no share of device time printed (issue 52)
    assert "device time by launch: none on a CPU (no kernels" in out and "device time in named phases" not in out
    d = proj.root / _out_dir(out)
    assert d.parent == proj.root / ".autoresearch/t/profiles" and d.name.endswith("-" + base[:7])

    summary = json.loads((d / "summary.json").read_text())
    trace = json.loads((d / "trace.json").read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    marks = [e for e in events if e["name"].startswith("ditar::")]
    (call,) = [e for e in marks if e["name"] == "ditar::call"]
    wall_ms = call["dur"] / 1e3
    assert summary["call_wall_ms"] == pytest.approx(wall_ms, abs=0.01)
    inside = [e for e in events if call["ts"] <= e["ts"] <= call["ts"] + call["dur"]]
    assert sum(1 for e in inside if e["name"] == "ditar::scheduler.step") == summary["steps"] == 10
    phases = {p["key"]: p for p in summary["phases"]}
    for key, name in (("transformer", "ditar::transformer"), ("vae", "ditar::vae")):  # the table rests on the trace
        traced = sum(e["dur"] for e in inside if e["name"] == name) / 1e3
        assert phases[key]["host_ms"] == pytest.approx(traced, rel=1e-3, abs=0.01), key
    assert sum(p["host_ms"] for p in summary["phases"] if p["parent"] is None) == pytest.approx(wall_ms, rel=1e-3)
    coverage = 1 - phases["gaps"]["host_ms"] / wall_ms
    assert coverage >= 0.80, summary["phases"]  # host preemption between phases lands in gaps: 0.89 seen under load
    assert summary["coverage"] == pytest.approx(coverage, abs=1e-6)
    assert len(summary["top_ops"]) == 10 and all(not o["name"].startswith("ditar::") for o in summary["top_ops"])
    assert summary["flops"] > 0 and summary["achieved_flops_per_s"] > 0
    assert summary["candidate"] == {**summary["candidate"], "source": "working tree", "commit": base, "dirty": True}
    # every CUDA graph's replay was wrapped while the marks were on (torch.cuda.CUDAGraph.replay, once)
    assert summary["marks"]["graph"] == 1 and summary["device_attribution"] is None

    assert proj.ledger() == rows and proj.head() == base and proj.git("show-ref") == ref
    assert proj.git("status", "--porcelain") == "M mutable/pipeline.py"


def test_profile_of_a_stored_commit_into_a_folder(research, tmp_path):
    proj = research
    base = proj.head()
    proj.write("mutable/pipeline.py", "this is not python\n")  # the working tree is not what runs
    res = proj.ditar("profile", "--commit", "HEAD", "--lane", "throughput_b8", "--steps", "2", "--warmup", "0",
                     "--out", str(tmp_path / "p"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"commit {base[:7]}, lane throughput_b8 (batch 4, 2 steps)" in res.stdout, res.stdout[-3000:]
    summary = json.loads((tmp_path / "p/summary.json").read_text())
    assert summary["candidate"]["source"] == "commit" and summary["candidate"]["commit"] == base
    assert summary["steps_seen"] == 2 and len(summary["request"]["seeds"]) == 4
    json.loads((tmp_path / "p/trace.json").read_text())
    assert proj.head() == base and not (proj.root / ".autoresearch/t/profiles").exists()


def test_an_unknown_lane_or_commit_is_a_usage_error(project):
    res = project.ditar("profile", "--lane", "nope")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "no lane named 'nope'" in res.stderr and "latency_b1, throughput_b8" in res.stderr, res.stderr
    res = project.ditar("profile", "--commit", "deadbeef")
    assert res.returncode == 2 and "--commit deadbeef: no such commit" in res.stderr, res.stderr


# ---- issue 41: unmarked phases, the kernel table, --against ----------------------------------

def test_a_pipeline_that_bypasses_the_marked_modules_gets_those_phases_named_unmarked(research):
    from tests.candidates import BYPASSES_MODULES

    proj = research
    proj.write("mutable/pipeline.py", BYPASSES_MODULES)
    res = proj.ditar("profile", "--steps", "2")
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-3000:]
    summary = json.loads((proj.root / _out_dir(out) / "summary.json").read_text())
    phases = {p["key"]: p for p in summary["phases"]}
    assert phases["attention"]["unmarked"] == phases["mlp"]["unmarked"] == "bypass", summary["phases"]
    assert phases["attention"]["calls"] == phases["mlp"]["calls"] == 0
    assert summary["marks"]["attention"] > 0 and summary["marks"]["mlp"] > 0  # marked, never fired
    assert phases["adaln"]["unmarked"] is None and phases["adaln"]["calls"] > 0  # the rest still fires
    rows = {line.strip().split("  ")[0]: line for line in out.splitlines()}
    for label in ("attention", "MLP (feed-forward)"):
        assert "unmarked: the pipeline bypasses the module" in rows[label], (label, out[-3000:])
        assert "0.00" not in rows[label]
    # the kernel table on a CPU: every operator's self time by family, the rest of the wall beside it
    k = summary["kernels"]
    assert sum(k["families"].values()) == pytest.approx(summary["call_wall_ms"], rel=1e-6)
    assert k["families"]["GEMM"] > 0 and k["families"]["norm"] > 0 and k["families"]["attention"] > 0
    assert "by kernel family (operators' self CPU time; they add up to the wall)" in out


def test_profile_against_the_champion_gives_deltas_that_add_up_to_the_calls_difference(research):
    from tests.candidates import SLOW_VAE, SLOW_VAE_S

    proj = research
    base = proj.head()  # the champion: nothing kept yet, so the baseline's commit
    sha = proj.commit_candidate(SLOW_VAE, subject="a slower VAE decode")
    res = proj.ditar("profile", "--against", "champion", "--steps", "2")
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-3000:]
    d = proj.root / _out_dir(out)
    summary = json.loads((d / "summary.json").read_text())
    a = summary["against"]
    assert a["ref"] == "champion" and a["commit"] == base and summary["candidate"]["commit"] == sha
    ref = a["summary"]
    assert (d / "trace-ref.json").is_file() and ref["trace"] == "trace-ref.json"
    walls = summary["call_wall_ms"] - ref["call_wall_ms"]
    assert walls > 0.5 * SLOW_VAE_S * 1e3, (walls, out[-3000:])
    for key in ("phases", "families"):
        deltas = sum(r["delta_ms"] for r in a[key]["rows"])
        assert deltas == pytest.approx(walls, rel=0.10), (key, a[key])
    top = a["phases"]["rows"][0]
    assert top["key"] == "vae" and top["delta_ms"] > 0.5 * SLOW_VAE_S * 1e3, a["phases"]["rows"][:3]
    assert a["headline"].startswith("slower by ") and "VAE decode +" in a["headline"]
    assert f"against champion ({base[:7]}), the same request" in out and "by kernel family (deltas add up" in out
    assert a["device_phases"] is None and "sum check" not in out  # no kernels on a CPU: no device deltas
