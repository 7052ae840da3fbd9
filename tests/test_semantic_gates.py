"""Approximate and quantization candidates through the semantic gate, end to end.

The evaluators here are RANDOM-INIT (see tests/evaluators.py): a tiny open_clip architecture
and an LPIPS module with a random trunk, saved to local files and configured through the
`semantic.*` keys, so the real loading and batched scoring paths run without any download.
Their scores mean nothing about image content; the thresholds below were set from measured
values of these models on the tiny suite. Needs open-clip-torch and lpips (the `clip` extra).
"""
import json

import pytest

pytest.importorskip("open_clip")
pytest.importorskip("lpips")

from candidates import STOCK  # noqa: E402
from conftest import make_project  # noqa: E402
from evaluators import write_random_evaluators  # noqa: E402


def _patch(old: str, new: str) -> str:
    assert old in STOCK, old
    return STOCK.replace(old, new)


def steps(expr: str) -> str:
    return _patch("num_inference_steps=request.steps,", f"num_inference_steps={expr},")


# "Quantize" the final latents to a 1/8 grid before decoding: small changes on every item,
# some CLIP scores up, some down.
QUANTIZED = _patch("            self._latents = z\n",
                   "            z = torch.round(z * 8) / 8\n            self._latents = z\n")

APPROXIMATE = {"psnr_min": 14.0, "ssim_min": 0.5, "lpips_max": 0.03, "clip_drop_max": 0.02, "semantic_required": True}
QUANTIZATION = {"psnr_min": 14.0, "ssim_min": 0.5, "lpips_max": 0.05, "clip_drop_max": 0.05, "semantic_required": True,
                "zero_regression": True, "required_scores": ["clip_score"], "clip_score_item_tolerance": 0.05}


@pytest.fixture
def semantic_research(pytester, model_cache, tmp_path_factory):
    sem = write_random_evaluators(tmp_path_factory.mktemp("evaluators"))
    base = json.loads((make_project.__globals__["REPO"] / "config/autoresearch.json").read_text())
    thresholds = {**base["thresholds"], "approximate": APPROXIMATE, "quantization": QUANTIZATION}
    proj = make_project(pytester, config={"semantic": sem, "thresholds": thresholds})
    assert proj.ditar("init", "--tag", "t").returncode == 0
    res = proj.ditar("baseline")
    assert res.returncode == 0, res.stdout + res.stderr
    return proj


def _run(proj, source: str, cls: str, subject: str):
    proj.commit_candidate(source, cls, subject)
    res = proj.ditar("experiment", "--classification", cls, "--description", subject)
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("DITAR VERDICT: "), res.stdout[-3000:]
    summary = json.loads(sorted((proj.root / ".autoresearch/t/runs").glob("*/summary.json"))[-1].read_text())
    return line, summary


def test_approximate_fewer_steps_passes_or_fails_the_semantic_gate_by_its_thresholds(semantic_research):
    proj = semantic_research
    line, summary = _run(proj, steps("request.steps - 1"), "approximate", "One step fewer")
    q = summary["quality"]
    assert "quality=6/6 class=approximate" in line, line
    assert all(m["clip_score"] is not None and m["lpips"] is not None and m["clip_score_baseline"] is not None
               for m in q.values())
    assert not any("holdout" in r or "class claim" in r for r in summary["reasons"]), summary["reasons"]

    if summary["decision"] == "KEEP":  # a kept approximation raises the branch's class; start again from main
        proj.git("reset", "-q", "--hard", "HEAD^")
    line, summary = _run(proj, steps("request.steps // 2"), "approximate", "Half the steps")
    assert line.startswith("DITAR VERDICT: DISCARD") and "class=approximate" in line, line
    fails = [f for m in summary["quality"].values() for f in m["failures"]]
    assert any(f.startswith("lpips ") or f.startswith("clip_score dropped") for f in fails), fails
    assert "quality=6/6" not in line


def test_quantization_with_a_slightly_lower_score_on_some_items_is_discarded(semantic_research):
    proj = semantic_research
    line, summary = _run(proj, QUANTIZED, "quantization", "Quantize latents to 1/8")
    q = summary["quality"]
    drops = [m["clip_score_baseline"] - m["clip_score"] for m in q.values()]
    assert "quality=6/6" in line, line  # every per-item contract holds...
    assert any(d > 0 for d in drops) and max(drops) < 0.05  # ...some items drop a little...
    assert line.startswith("DITAR VERDICT: DISCARD") and 'reason="class claim: zero regression: clip_score' in line, line
    assert [r["status"] for r in proj.ledger()][-1] == "DISCARD"
