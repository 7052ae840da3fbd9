"""The quality firewall's rules as plain functions: invalid-output reasons (core.quality), the
zero-regression rule (core.regression), the semantic keys' config errors (config.project,
config.semantic) and the fresh-seed holdout draw (loop.run.holdout). Through `dit-ar experiment` and
`dit-ar verify`: tests/e2e/test_firewall.py."""
import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from pytest_ditar.config.project import SemanticConfig, Thresholds, load_config
from pytest_ditar.config.suite import CorpusItem
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.quality import check_contract, compute_metrics

REPO = Path(__file__).resolve().parents[3]


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
    return load_config(REPO / "config/autoresearch.json").thresholds_for("quantization")


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
    from pytest_ditar.loop.run.holdout import draw

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
