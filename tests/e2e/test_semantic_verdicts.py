"""The semantic gates through real gated runs: fewer steps and a quantized candidate against their
thresholds (long: the evaluators on every item)."""
import json
import statistics

from integration.loop.test_semantic_gates import QUANTIZED, _run, semantic_research, steps  # noqa: F401 - the fixture


def test_approximate_fewer_steps_passes_or_fails_the_semantic_gate_by_its_thresholds(semantic_research):  # noqa: F811
    proj = semantic_research
    line, summary = _run(proj, steps("request.steps - 1"), "approximate", "One step fewer")
    q = summary["quality"]
    assert "quality=6/6 class=approximate" in line, line
    assert all(m["clip_score"] is not None and m["lpips"] is not None and m["clip_score_baseline"] is not None
               for m in q.values())
    assert not any("holdout" in r or "class claim" in r for r in summary["reasons"]), summary["reasons"]
    held = json.loads(sorted((proj.root / ".autoresearch/t/runs").glob("*/holdout.json"))[-1].read_text())
    assert len(held["results"]) == 2 and all(r["lpips"] is not None and r["passed"] for r in held["results"].values())

    # Kept or not (one step fewer is a small speedup), the next candidate builds on the branch as it is.
    line, summary = _run(proj, steps("request.steps // 2"), "approximate", "Half the steps")
    assert line.startswith("DITAR VERDICT: DISCARD") and "class=approximate" in line, line
    fails = [f for m in summary["quality"].values() for f in m["failures"]]
    assert any(f.startswith("lpips ") or f.startswith("clip_score dropped") for f in fails), fails
    assert "quality=6/6" not in line


def test_quantization_with_a_slightly_lower_score_on_some_items_is_discarded(semantic_research):  # noqa: F811
    proj = semantic_research
    line, summary = _run(proj, QUANTIZED, "quantization", "Quantize latents to 1/8")
    q = summary["quality"]
    drops = [m["clip_score_baseline"] - m["clip_score"] for m in q.values()]
    mean, sd = statistics.mean(drops), statistics.stdev(drops)
    assert "quality=6/6" in line, line  # every per-item contract holds...
    assert any(d > 0 for d in drops) and any(d < 0 for d in drops), drops  # ...some items a little lower...
    assert 0 < mean < sd / len(drops) ** 0.5, (mean, sd)  # ...a lower mean, but well within the noise
    assert line.startswith("DITAR VERDICT: DISCARD") \
        and 'reason="class claim: zero regression: clip_score' in line, line
    assert [r["status"] for r in proj.ledger()][-1] == "DISCARD"
