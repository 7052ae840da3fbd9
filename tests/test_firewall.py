"""The quality firewall without semantic evaluators: class gate refusal, fresh-seed holdout,
`dit-ar verify`, invalid-output reasons and the zero-regression rule (plain functions)."""
import dataclasses
import json
import random

import numpy as np
import pytest

from candidates import STOCK
from conftest import verdict_line
from pytest_ditar.config.project import SemanticConfig, Thresholds, load_config
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.quality import check_contract, compute_metrics
from pytest_ditar.config.suite import CorpusItem



def _patch(old: str, new: str) -> str:
    assert old in STOCK, old
    return STOCK.replace(old, new)


# Fewer denoising steps: the textbook "approximate" change.
FEWER_STEPS = _patch("num_inference_steps=request.steps,", "num_inference_steps=request.steps - 1,")

# Recognises corpus seeds and replays the stored baseline outputs for them; for any other seed
# it computes something else (half the guidance). The corpus cannot tell; fresh seeds can.
REPLAY = _patch("    def generate(self, request: Request) -> Generated:\n", '''    def generate(self, request: Request) -> Generated:
        import json
        from pathlib import Path
        from PIL import Image
        stored = {}
        for man in (Path(__file__).resolve().parents[1] / ".autoresearch").glob("*/baseline/manifest.json"):
            m = json.loads(man.read_text())
            for item_id, seed in m["seeds"].items():
                stored[seed] = (man.parent / m["items"][item_id]["latent"], man.parent / m["items"][item_id]["image"])
        if all(s in stored for s in request.seeds):
            lat = np.stack([np.load(stored[s][0]) for s in request.seeds])
            img = np.stack([np.asarray(Image.open(stored[s][1]).convert("RGB")) for s in request.seeds])
            return Generated(latents=torch.from_numpy(lat), images=img)
        half = self.spec.guidance * 0.5
''').replace("guidance_scale=self.spec.guidance,", "guidance_scale=half,")


def test_approximate_without_evaluators_is_refused_with_the_config_hint(research):
    proj = research
    base = proj.head()
    _, res, line = proj.experiment(FEWER_STEPS, "approximate", "One step fewer")
    assert res.returncode == 1
    assert line.startswith("DITAR VERDICT: DISCARD") and "guard class_gate" in line, line
    assert "semantic.clip_model, semantic.clip_weights and semantic.lpips_weights" in line
    assert "test_quality" not in res.stdout  # the candidate never ran
    assert proj.head() == base


def test_replaying_candidate_is_caught_by_the_fresh_seed_holdout(research):
    proj = research
    base = proj.head()
    _, res, line = proj.experiment(REPLAY, "exact", "Cache outputs")
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=6/6" in line, line  # the corpus is fooled
    assert 'reason="holdout seed ' in line and "latent_rel_l2" in line, line
    assert "ditar: holdout 2 fresh seed(s)" in res.stdout and "2 failed" in res.stdout
    assert proj.head() == base
    logs = list((proj.root / ".autoresearch/t/runs").glob("*/holdout.json"))
    assert len(logs) == 1
    held = json.loads(logs[0].read_text())
    corpus_seeds = {it["seed"] for it in _corpus(proj)}
    assert len(held["items"]) == 2 and not {it["seed"] for it in held["items"]} & corpus_seeds


def _corpus(proj):
    import yaml

    return yaml.safe_load((proj.root / "suites/tiny/suite.yaml").read_text())["corpus"]


def test_holdout_passes_an_honest_candidate_and_runs_only_when_gated(research):
    """The unmodified pipeline as a candidate: the holdout runs and passes; a report-only
    run (-m quality) never runs it."""
    proj = research
    proj.commit_candidate(STOCK + "\n# same code\n", "exact", "A comment")
    res = proj.pytest("-m", "quality")
    assert "ditar: holdout" not in res.stdout.str()
    res = proj.ditar("experiment", "--classification", "exact", "--description", "A comment")
    assert "ditar: holdout 2 fresh seed(s)" in res.stdout and ": ok (" in res.stdout, res.stdout[-2000:]
    assert "holdout seed" not in verdict_line(res.stdout)


def test_verify_catches_an_edited_snapshot_file_and_an_edited_ledger_row(research):
    proj = research
    res = proj.ditar("verify", "--sample", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert all(l.startswith("ok ") for l in lines[:-1]) and lines[-1] == "verify: all checks passed", res.stdout
    assert sum(l.startswith("ok   regenerate tiny-") for l in lines) == 2
    assert any(l.startswith("ok   baseline anchor") for l in lines)

    png = sorted((proj.root / ".autoresearch/t/baseline/items").glob("*.png"))[0]
    data = bytearray(png.read_bytes())
    data[-20] ^= 0xFF
    png.write_bytes(bytes(data))
    ledger = proj.root / ".autoresearch/t/ledger.jsonl"
    rows = ledger.read_text().splitlines()
    row = json.loads(rows[0])
    row["quality_total"] = 5
    ledger.write_text("\n".join([json.dumps(row), *rows[1:]]) + "\n")

    res = proj.ditar("verify", "--sample", "0")
    assert res.returncode == 1
    out = res.stdout
    assert f"FAIL baseline files: items/{png.name} hash mismatch (edited?)" in out, out
    assert "FAIL ledger chain: row 1: hash mismatch (edited?)" in out, out
    assert out.strip().splitlines()[-1] == "verify: FAILED"


def test_verify_catches_an_edited_manifest_through_the_ledger_anchor(research):
    proj = research
    man = proj.root / ".autoresearch/t/baseline/manifest.json"
    m = json.loads(man.read_text())
    m["device"] = "elsewhere"
    man.write_text(json.dumps(m, indent=1, sort_keys=True))
    res = proj.ditar("verify", "--sample", "0")
    assert res.returncode == 1 and "FAIL baseline anchor: manifest sha256" in res.stdout, res.stdout


# ---- plain functions ----------------------------------------------------------------------

def _outputs(seed=0):
    rng = np.random.default_rng(seed)
    lat = rng.normal(size=(4, 2, 2)).astype(np.float32)
    img = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
    return lat, img


@pytest.mark.parametrize("case,reason", [
    ("nan", "non-finite values (NaN/Inf) in latents"),
    ("inf", "non-finite values (NaN/Inf) in latents"),
    ("constant", "image is constant (a blank output)"),
    ("range", "outside the sane range"),
])
def test_invalid_outputs_have_their_own_reasons(case, reason):
    lat, img = _outputs()
    c_lat, c_img = lat.copy(), img.copy()
    if case == "nan":
        c_lat[0, 0, 0] = np.nan
    elif case == "inf":
        c_lat[1, 1, 1] = np.inf
    elif case == "constant":
        c_img[:] = 128
    else:
        c_lat = c_lat * 100
    t = Thresholds(psnr_min=None, ssim_min=None)
    res = check_contract("x", "numerical", compute_metrics(c_lat, c_img, lat, img), t)
    assert not res.passed and reason in res.failures[0], res.failures
    others = {"nan": "constant", "inf": "constant", "constant": "sane range", "range": "constant"}[case]
    assert not any(others in f for f in res.failures)


def _results(cand, base):
    from pytest_ditar.core.quality import ContractResult, Metrics

    m = Metrics(True, 0, 0, 1, 1, 40.0, 0.99, False, lpips=0.01)
    return [ContractResult(f"i{k}", "quantization", dataclasses.replace(m, clip_score=c, clip_score_baseline=b))
            for k, (c, b) in enumerate(zip(cand, base))]


def test_zero_regression_discards_a_slightly_lower_score_even_when_the_mean_is_within_noise():
    from pytest_ditar.core import regression

    t = load_config_thresholds()
    base = [0.30, 0.25, 0.28, 0.31, 0.27, 0.29, 0.26, 0.30]
    # Two items drop by 0.002 (within the per-item tolerance); the mean drops by 0.0005,
    # far inside any noise band: still a lower score, so never kept.
    cand = [b - 0.002 if i in (1, 4) else b for i, b in enumerate(base)]
    ok, reason = regression.claim(t, _results(cand, base))
    assert not ok and "zero regression: clip_score mean dropped" in reason, reason
    ok, reason = regression.claim(t, _results(base, base))
    assert ok, reason
    better = [b + 0.003 if i % 2 else b - 0.001 for i, b in enumerate(base)]
    assert regression.claim(t, _results(better, base))[0]
    one_big = [b - 0.02 if i == 3 else b + 0.01 for i, b in enumerate(base)]
    ok, reason = regression.claim(t, _results(one_big, base))
    assert not ok and "dropped 0.02 on i3" in reason, reason
    ok, reason = regression.claim(t, _results([None] * 8, base))
    assert not ok and "clip_score unavailable for 8/8 items" in reason


def load_config_thresholds():
    from pathlib import Path

    return load_config(Path(__file__).resolve().parent.parent / "config/autoresearch.json").thresholds_for("quantization")


def test_unknown_required_score_is_a_config_error(tmp_path):
    cfg = {"suite": "tiny", "thresholds": {"quantization": {"required_scores": ["psnr"]}}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"thresholds.quantization.required_scores.*unknown score 'psnr'"):
        load_config(tmp_path / "c.json")


@pytest.mark.parametrize("key", ["clip_model", "clip_weights", "lpips_weights"])
def test_a_missing_evaluator_path_is_a_one_line_config_error_naming_the_key(tmp_path, key):
    from pytest_ditar.config.semantic import check_config

    for name in ("arch.json", "clip.pt", "lpips.pt"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "c.json").write_text(json.dumps({"suite": "tiny"}))
    paths = {"clip_model": str(tmp_path / "arch.json"), "clip_weights": str(tmp_path / "clip.pt"),
             "lpips_weights": str(tmp_path / "lpips.pt")}
    paths[key] = str(tmp_path / ("nowhere.json" if key == "clip_model" else "nowhere.bin"))
    cfg = dataclasses.replace(load_config(tmp_path / "c.json"), semantic=SemanticConfig(**paths))
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    msg = str(err.value)
    assert f"key 'semantic.{key}'" in msg and "nowhere." in msg and "\n" not in msg


def test_holdout_draws_fresh_seeds_never_in_the_corpus():
    from pytest_ditar.loop.holdout import draw

    corpus = tuple(CorpusItem(f"c{i}", i, i) for i in range(50))

    class Rigged(random.Random):  # offers corpus seeds first: they must be skipped
        def __init__(self):
            super().__init__(0)
            self.n = 0

        def randrange(self, *a):
            if a == (1000,):
                return 7
            self.n += 1
            return self.n

    items = draw(corpus, 3, 5, Rigged())
    assert [it.seed for it in items] == [50, 51, 52]
    assert all(it.steps == 5 and it.label == 7 for it in items)
    assert len({it.seed for it in draw(corpus, 8, None)}) == 8
