"""What the agent is told up front, without running a candidate: `dit-ar suite`, the classes this
session can judge (doctor, status, the class gate's words) and a session's bound."""
import dataclasses
import importlib.util
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pytest_ditar import interface
from pytest_ditar.cli.doctor import class_rows
from pytest_ditar.cli.suite import describe, resolution
from pytest_ditar.config.project import SemanticConfig, load_config
from pytest_ditar.config.semantic import OWNER, availability, class_refusal
from pytest_ditar.config.suite import load_suite
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.loop.perf.bound import (
    SessionBound,
    bound_refusal,
    parse_deadline,
    read_bound,
    write_bound,
)

from conftest import REPO
from e2e.test_loop_agent import EDIT_A_FIXED_PATH


@pytest.fixture(scope="module")
def cfg():
    return load_config(REPO / "config/autoresearch.json")


def test_suite_shows_the_settings_every_contract_field_and_the_class_floors(cfg):
    out = "\n".join(describe(cfg, load_suite(REPO / "suites/tiny")))
    assert "model     embedded-tiny, arch tiny, seed 0: " in out
    from pytest_ditar.runtime.models import model_location

    assert f": {model_location(load_suite(REPO / 'suites/tiny'))}" in out  # where PipelineSpec.model_dir points
    assert re.search(r"worker    torch intra-op threads: 1 on CPU, \d+ on a GPU \(DITAR_CPU_THREADS unset: "
                     r"the host's cores / 4\)", out), out
    assert "pipeline  dpm-solver-multistep, 10 steps, guidance 4, 16 px, quality batch 4" in out
    assert "dtype     cpu float32, cuda float32" in out
    assert "corpus    12 items: labels 0..913, seeds 1000..1011; plus 2 fresh holdout seed(s)" in out
    assert "latency_b1 (objective): batch 1, 20 rounds, 2 warm-up; throughput_b8: batch 8, 12 rounds" in out
    for name in ("PipelineSpec", "Request", "Generated"):  # every field, as the dataclass has it
        fields = ", ".join(f.name for f in dataclasses.fields(getattr(interface, name)))
        assert f"  {name}({fields}): " in out, out
    assert "  exact         latent rel-L2 <= 0.01, PSNR >= 38 dB, SSIM >= 0.98  [can judge]" in out
    assert "  quantization  PSNR >= 25 dB, SSIM >= 0.85, LPIPS <= 0.15, CLIP drop <= 0.01, " \
           "no regression of clip_score  [CANNOT judge here: no CLIP/LPIPS evaluators configured" in out


def test_what_the_tiny_suite_cannot_tell_apart_follows_the_configured_floors(cfg):
    tiny = load_suite(REPO / "suites/tiny")
    said = " ".join(resolution(cfg, tiny))
    assert "CANNOT catch a mislabelled class" in said and "a bf16 transformer (numerical;" in said
    assert "passes as 'exact'" in said and "one step fewer (approximate;" in said and "passes as 'numerical'" in said
    # Floors tight enough to see every measured change: nothing left to confess.
    tight = {**cfg.thresholds, "exact": dataclasses.replace(cfg.thresholds["exact"], latent_rel_l2_max=0.001),
             "numerical": dataclasses.replace(cfg.thresholds["numerical"], latent_rel_l2_max=0.001)}
    said = " ".join(resolution(dataclasses.replace(cfg, thresholds=tight), tiny))
    assert "CANNOT catch" not in said and "fails the exact and numerical floors" in said
    xl = " ".join(resolution(cfg, load_suite(REPO / "suites/dit-xl-2-256")))
    assert "is not measured" in xl and "real DiT-XL/2 shapes and FLOPs" in xl and "CANNOT catch" not in xl


def test_without_evaluators_the_semantic_classes_are_unavailable_and_the_reason_names_no_edit(cfg):
    assert availability(cfg) == [("exact", None), ("numerical", None),
                                 ("approximate", "no CLIP/LPIPS evaluators configured"),
                                 ("quantization", "no CLIP/LPIPS evaluators configured")]
    why = class_refusal(cfg, "approximate")
    assert why == ("class 'approximate' cannot be judged in this session: no CLIP/LPIPS evaluators configured "
                   "(semantic.clip_model, semantic.clip_weights and semantic.lpips_weights); " + OWNER +
                   ": choose a class this session can judge (exact, numerical) or stop")
    assert class_refusal(cfg, "exact") is None and not EDIT_A_FIXED_PATH.search(why)
    rows = class_rows(cfg)
    assert rows[0] == ("class exact", "pass", "available (latent and pixel floors)")
    assert rows[2] == ("class approximate", "warn", f"unavailable: no CLIP/LPIPS evaluators configured; {OWNER}")


def test_configured_evaluators_make_the_classes_available_and_a_missing_file_says_which(cfg, tmp_path):
    for name in ("clip.bin", "lpips.pth"):
        (tmp_path / name).write_bytes(b"")
    sem = SemanticConfig(clip_model="ViT-B-32", clip_weights=str(tmp_path / "clip.bin"),
                         lpips_weights=str(tmp_path / "gone.pth"))
    broken = dataclasses.replace(cfg, semantic=sem)
    why = dict(availability(broken))["approximate"]
    assert why.startswith("its CLIP/LPIPS evaluators do not load (") and "semantic.lpips_weights" in why, why
    refusal = class_refusal(broken, "quantization")
    assert refusal.endswith(f"{OWNER}: choose a class this session can judge (exact, numerical) or stop"), refusal
    assert not EDIT_A_FIXED_PATH.search(refusal), refusal
    if not (importlib.util.find_spec("open_clip") and importlib.util.find_spec("lpips")):
        pytest.skip("the clip extra is not installed")
    ok = dataclasses.replace(cfg, semantic=dataclasses.replace(sem, lpips_weights=str(tmp_path / "lpips.pth")))
    assert all(why is None for _, why in availability(ok))
    assert class_rows(ok)[3] == ("class quantization", "pass", "available (CLIP score and LPIPS from local files)")


def test_a_bound_counts_experiments_from_when_it_was_set_and_ends_at_its_deadline(tmp_path):
    state = tmp_path / "t"
    state.mkdir()
    (state / "session.json").write_text(json.dumps({"tag": "t", "start_commit": "abc"}))
    assert read_bound(state) == SessionBound() and bound_refusal(state) is None
    soon = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    bound = write_bound(state, 3, soon)
    assert json.loads((state / "session.json").read_text())["start_commit"] == "abc"  # the rest is kept
    assert read_bound(state) == bound and bound.counted_from == 0
    assert bound.reached(2) is None and bound.reached(3) == "3 of 3 experiments run"
    assert bound.describe(1) == f"1 of 3 experiments run, until {bound.until}"
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    assert bound.reached(0, now=later) == f"the deadline {bound.until} has passed"
    assert bound_refusal(state, now=later).startswith(f"session bound reached: the deadline {bound.until} has passed")
    assert SessionBound(2, counted_from=5).reached(6) is None  # set after five experiments: two more


def test_a_deadline_without_an_offset_is_local_time_and_one_in_the_past_is_refused():
    local = datetime(2099, 1, 1, 6, 0).astimezone()
    assert parse_deadline("2099-01-01T06:00") == local.isoformat(timespec="minutes")
    assert parse_deadline("2099-01-01T06:00+00:00") == "2099-01-01T06:00+00:00"
    with pytest.raises(ConfigError, match="already passed"):
        parse_deadline("2001-01-01T00:00")
    with pytest.raises(ConfigError, match="not an ISO 8601 time"):
        parse_deadline("tomorrow")
    with pytest.raises(ConfigError, match="--max-experiments 0: give at least 1"):
        write_bound(Path("/nonexistent"), 0, None)


def test_doctor_names_the_model_directory_and_fails_on_missing_local_weights(tmp_path, monkeypatch):
    """The model row: where the workers load the pipeline from, their CPU threads, and a FAIL (with
    the fix) for a local weights directory that is not there, before any candidate runs."""
    from pytest_ditar.cli.doctor import model_row

    suite = load_suite(REPO / "suites/tiny")
    monkeypatch.setenv("DITAR_CPU_THREADS", "3")
    name, status, text = model_row(suite)
    assert (name, status) == ("model", "pass") and "torch threads: 3 on CPU, 3 on a GPU" in text, text
    monkeypatch.setenv("DITAR_CPU_THREADS", "many")  # a bad setting fails here, named, with the fix
    name, status, text = model_row(suite)
    assert status == "FAIL" and "DITAR_CPU_THREADS='many': give a whole number" in text, text
    monkeypatch.setenv("DITAR_CPU_THREADS", "3")
    monkeypatch.setenv("DITAR_WEIGHTS_DIR", str(tmp_path / "no-such-dit"))
    name, status, text = model_row(suite)
    assert status == "FAIL" and "no-such-dit" in text and "model_index.json" in text, text
