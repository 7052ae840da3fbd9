"""Attacks on the contract itself: a looser config, outside the repository or committed."""
from __future__ import annotations

import json

import pytest

from .attacks import HALF_STEPS
from .conftest import (
    KEYS,
    assert_decided_and_reverted,
    assert_refused,
    assert_verdict,
    experiment,
    run_experiment,
)

pytestmark = pytest.mark.adversarial

LOOSE_EXACT = {"latent_rel_l2_max": 100.0, "psnr_min": 0.0, "ssim_min": -1.0, "latent_range_factor": 1000.0}


def test_10_loose_config_outside_the_repo_is_refused(research, scratch):
    """`dit-ar --config /tmp/.../loose.json experiment`: the repository's own config file is
    untouched (the fixed-path guard sees nothing), the loose one points its root at the project."""
    proj = research
    cfg = proj.config()
    cfg["root"] = str(proj.root)
    cfg["thresholds"]["exact"] = LOOSE_EXACT
    loose = scratch / "loose.json"
    loose.write_text(json.dumps(cfg, indent=1))
    before = proj.ledger()
    proj.commit_candidate(HALF_STEPS, "exact", "half the steps (exact, by the loose config)")
    j = run_experiment(proj, "half the steps (exact, by the loose config)", config=loose)
    assert_refused(proj, j, KEYS["config"], before)


def test_11_config_loosened_in_the_candidate_commit_is_discarded_or_refused(research):
    proj = research
    original = (proj.root / "config/autoresearch.json").read_text()
    base, before = proj.head(), proj.ledger()
    cfg = proj.config()
    cfg["thresholds"]["exact"] = LOOSE_EXACT
    proj.set_config(thresholds=cfg["thresholds"])
    j = experiment(proj, HALF_STEPS, "half the steps, and an exact that allows it")
    if j.status == "REFUSED":
        assert_refused(proj, j, KEYS["config"], before)
        return
    assert_verdict(j, ("DISCARD",), KEYS["fixed"])
    assert_decided_and_reverted(proj, j, base, before)
    assert (proj.root / "config/autoresearch.json").read_text() == original
