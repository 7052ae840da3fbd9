"""Unit tests for the pure KEEP/DISCARD/CRASH rule and the verdict line."""

from __future__ import annotations

import re

import pytest

from pytest_ditar.core.decision import (
    CLASS_ORDER,
    Decision,
    GuardResult,
    LaneOutcome,
    QualityOutcome,
    RunError,
    cumulative_class,
    decide,
    validate_class,
    verdict_line,
)

N = 32


def faster(name: str = "latency_b1", **kw) -> LaneOutcome:
    args = dict(
        name=name, objective=True, verdict="FASTER", speedup=1.183, ci_low=1.171, ci_high=1.195
    )
    args.update(kw)
    return LaneOutcome(**args)


def guard_lane(name: str = "throughput_b8", verdict: str = "OK", **kw) -> LaneOutcome:
    args = dict(name=name, objective=False, verdict=verdict, speedup=1.0, ci_low=0.99, ci_high=1.01)
    args.update(kw)
    return LaneOutcome(**args)


def run(**overrides) -> Decision:
    """decide() with an all-good default, overridden per test."""
    args = dict(
        guards=[GuardResult("branch", True), GuardResult("clean_tree", True)],
        quality=QualityOutcome(passed=N, total=N),
        lanes=[faster(), guard_lane()],
        errors=[],
        vram_budget_gib=24.0,
        expected_items=N,
    )
    args.update(overrides)
    return decide(**args)


# ---- single rules ---------------------------------------------------------------------------


def test_keep_when_everything_passes():
    d = run()
    assert d.status == "KEEP"
    assert d.reason == "lane latency_b1 faster: speedup 1.183x ci95 [1.171,1.195]"
    assert d.reasons == (d.reason,)


@pytest.mark.parametrize(
    "error, expected",
    [
        (RunError("exception", "ValueError: boom"), "candidate raised: ValueError: boom"),
        (RunError("non_finite", "", item="cls207_seed0"), "non-finite output in item cls207_seed0"),
        (RunError("oom", ""), "out of memory"),
        (RunError("oom", "CUDA OOM", item="x"), "out of memory in item x: CUDA OOM"),
        (RunError("timeout", "", seconds=600), "timeout after 600s"),
    ],
)
def test_crash_on_any_run_error(error, expected):
    d = run(errors=[error])
    assert d.status == "CRASH"
    assert d.reason == expected


def test_run_error_kind_validated():
    with pytest.raises(ValueError, match="valid: exception, non_finite, oom, timeout"):
        RunError("segfault", "x")


def test_failed_guard_discards():
    d = run(guards=[GuardResult("branch", True), GuardResult("fixed_paths", False, "suites/x changed")])
    assert d.status == "DISCARD"
    assert d.reason == "guard fixed_paths: suites/x changed"


@pytest.mark.parametrize("quality", [None, QualityOutcome(passed=31, total=31)])
def test_incomplete_quality_run_discards(quality):
    d = run(quality=quality)
    assert d.status == "DISCARD"
    assert d.reason.startswith("incomplete quality run")


def test_quality_failure_discards_with_first_failure():
    q = QualityOutcome(
        passed=30, total=N, failures=("cls1_s0: psnr 31.2 < 40.0", "cls2_s0: psnr 30.0 < 40.0")
    )
    d = run(quality=q)
    assert d.status == "DISCARD"
    assert d.reason == "quality 2/32 failed: cls1_s0: psnr 31.2 < 40.0"


def test_class_claim_discards():
    q = QualityOutcome(passed=N, total=N, class_claim_ok=False, class_claim_reason="LPIPS unavailable")
    d = run(quality=q)
    assert d.status == "DISCARD"
    assert d.reason == "class claim: LPIPS unavailable"


def test_no_objective_lane_discards():
    d = run(lanes=[guard_lane()])
    assert d.status == "DISCARD"
    assert d.reason == "no objective lane ran"


def test_missing_objective_lane_discards():
    d = run(lanes=[faster(verdict="MISSING", speedup=None, ci_low=None, ci_high=None)])
    assert d.status == "DISCARD"
    assert "objective lane latency_b1 missing" in d.reason


def test_unstable_objective_discards():
    d = run(lanes=[faster(verdict="UNSTABLE", reason="A/A noise 17% exceeds 5%")])
    assert d.status == "DISCARD"
    assert d.reason == "lane latency_b1 unstable: A/A noise 17% exceeds 5%"


@pytest.mark.parametrize("verdict", ["NOT_FASTER", "SLOWER", "OK"])
def test_objective_not_faster_discards(verdict):
    d = run(lanes=[faster(verdict=verdict, speedup=1.004, ci_low=0.990, ci_high=1.018)])
    assert d.status == "DISCARD"
    assert d.reason == (
        "lane latency_b1 not faster than champion: speedup 1.004x ci95 [0.990,1.018]"
    )


def test_guard_lane_regression_discards():
    d = run(lanes=[faster(), guard_lane(verdict="REGRESSED", reason="0.91x")])
    assert d.status == "DISCARD"
    assert d.reason == "guard lane throughput_b8 regressed: 0.91x"


def test_non_objective_slower_is_not_a_regression():
    assert run(lanes=[faster(), guard_lane(verdict="SLOWER")]).status == "KEEP"


def test_vram_over_budget_discards():
    d = run(lanes=[faster(peak_vram_gib=25.5)])
    assert d.status == "DISCARD"
    assert d.reason.startswith("peak VRAM 25.50 GiB > budget 24.00 GiB")


def test_vram_within_budget_or_no_budget_keeps():
    assert run(lanes=[faster(peak_vram_gib=24.0)]).status == "KEEP"
    assert run(lanes=[faster(peak_vram_gib=99.0)], vram_budget_gib=None).status == "KEEP"


def test_unknown_lane_verdict_rejected():
    with pytest.raises(ValueError, match="unknown verdict"):
        faster(verdict="MAYBE")


# ---- precedence and collection --------------------------------------------------------------


def _everything_wrong(**skip) -> dict:
    args = dict(
        errors=[RunError("oom", "")],
        guards=[GuardResult("branch", False, "on main")],
        quality=QualityOutcome(
            passed=N - 1, total=N, failures=("a: psnr 1 < 2",),
            class_claim_ok=False, class_claim_reason="no clip",
        ),
        lanes=[
            faster(verdict="NOT_FASTER", speedup=0.9, ci_low=0.8, ci_high=1.0, peak_vram_gib=30.0),
            guard_lane(verdict="REGRESSED"),
        ],
    )
    for k, v in skip.items():
        args[k] = v
    return args


def test_reasons_collected_in_rule_order():
    d = run(**_everything_wrong())
    assert d.status == "CRASH"
    assert d.reason == "out of memory"
    assert d.reasons == (
        "out of memory",
        "guard branch: on main",
        "quality 1/32 failed: a: psnr 1 < 2",
        "class claim: no clip",
        "lane latency_b1 not faster than champion: speedup 0.900x ci95 [0.800,1.000]",
        "guard lane throughput_b8 regressed",
        "peak VRAM 30.00 GiB > budget 24.00 GiB (lane latency_b1)",
    )


@pytest.mark.parametrize(
    "fix, first",
    [
        ({"errors": []}, "guard branch: on main"),
        ({"errors": [], "guards": []}, "quality 1/32 failed"),
        (
            {"errors": [], "guards": [], "quality": QualityOutcome(N, N, class_claim_ok=False)},
            "class claim",
        ),
        ({"errors": [], "guards": [], "quality": QualityOutcome(N, N)}, "lane latency_b1 not faster"),
        (
            {"errors": [], "guards": [], "quality": QualityOutcome(N, N),
             "lanes": [faster(peak_vram_gib=30.0), guard_lane(verdict="REGRESSED")]},
            "guard lane throughput_b8 regressed",
        ),
        (
            {"errors": [], "guards": [], "quality": QualityOutcome(N, N),
             "lanes": [faster(peak_vram_gib=30.0)]},
            "peak VRAM",
        ),
    ],
)
def test_precedence(fix, first):
    d = run(**_everything_wrong(**fix))
    assert d.status == "DISCARD"
    assert d.reason.startswith(first)


def test_crash_beats_every_discard():
    assert run(**_everything_wrong()).status == "CRASH"


def test_decision_is_frozen():
    d = run()
    with pytest.raises(AttributeError):
        d.status = "DISCARD"  # type: ignore[misc]


# ---- classes --------------------------------------------------------------------------------


def test_class_order():
    assert CLASS_ORDER == ("exact", "numerical", "approximate", "quantization")


@pytest.mark.parametrize(
    "classes, expected",
    [
        ([], "exact"),
        (["exact", "exact"], "exact"),
        (["exact", "numerical", "exact"], "numerical"),
        (["approximate", "numerical"], "approximate"),
        (["quantization", "exact", "approximate"], "quantization"),
    ],
)
def test_cumulative_class(classes, expected):
    assert cumulative_class(classes) == expected
    assert cumulative_class(iter(classes)) == expected


def test_validate_class():
    assert validate_class("exact") == "exact"
    assert validate_class(" Numerical ") == "numerical"
    with pytest.raises(ValueError, match="exact, numerical, approximate, quantization"):
        validate_class("fast")
    with pytest.raises(ValueError):
        cumulative_class(["exact", "bogus"])


# ---- verdict line ---------------------------------------------------------------------------

DESIGN_EXAMPLE = (
    "DITAR VERDICT: KEEP lane=latency_b1 speedup=1.183x ci95=[1.171,1.195] "
    "quality=32/32 class=exact commit=abc1234"
)
VERDICT_RE = re.compile(
    r"^DITAR VERDICT: (KEEP|DISCARD|CRASH) lane=\S+ speedup=(\d+\.\d{3}x|n/a) "
    r"ci95=\[(\d+\.\d{3}|n/a),(\d+\.\d{3}|n/a)\] quality=(\d+/\d+|n/a) class=\S+ commit=\S+"
    r'( reason="(?:[^"\\]|\\.)*")?( unmeasured=\S+)?( off_target=1)?$'
)


def line(decision: Decision, **kw) -> str:
    args = dict(
        lane="latency_b1", speedup=1.183, ci_low=1.171, ci_high=1.195, quality_pass=32,
        quality_total=32, judged_class="exact", commit="abc1234", off_target=False,
    )
    args.update(kw)
    return verdict_line(decision, **args)


def test_verdict_line_matches_design_example_exactly():
    text = line(run())
    assert text == DESIGN_EXAMPLE
    assert VERDICT_RE.fullmatch(text)


def test_verdict_line_rounds_to_three_decimals():
    text = line(run(), speedup=1.18349, ci_low=1.1716, ci_high=1.19)
    assert " speedup=1.183x ci95=[1.172,1.190] " in text


def test_verdict_line_discard_reason_quoted_and_escaped():
    d = Decision("DISCARD", 'guard fixed_paths: "suites/x"\nchanged', ('x',))
    text = line(d, speedup=None, ci_low=None, ci_high=None, quality_pass=None, quality_total=None)
    assert text == (
        "DITAR VERDICT: DISCARD lane=latency_b1 speedup=n/a ci95=[n/a,n/a] quality=n/a "
        'class=exact commit=abc1234 reason="guard fixed_paths: \\"suites/x\\" changed"'
    )
    assert "\n" not in text
    assert VERDICT_RE.fullmatch(text)


def test_verdict_line_crash_off_target():
    d = run(errors=[RunError("timeout", "", seconds=600)])
    text = line(d, off_target=True)
    assert text.endswith(' reason="timeout after 600s" off_target=1')
    assert text.startswith("DITAR VERDICT: CRASH ")
    assert VERDICT_RE.fullmatch(text)


def test_verdict_line_keep_off_target_has_no_reason():
    text = line(run(), off_target=True)
    assert text == DESIGN_EXAMPLE + " off_target=1"


def test_verdict_line_tokens_never_contain_spaces():
    text = line(run(), lane=None, judged_class="", commit="abc 123")
    assert "lane=n/a" in text and "class=n/a" in text and "commit=abc_123" in text
    assert VERDICT_RE.fullmatch(text)


# ---- a KEEP's unmeasured guard lanes, a CRASH's frame (issue 27) ------------------------------


@pytest.mark.parametrize("verdict, why", [("UNSTABLE", "GPU 0 shared with pid 4242 (python) during the lane"),
                                          ("MISSING", "no champion samples to compare with")])
def test_keep_stands_with_an_unmeasured_guard_lane_and_names_it(verdict, why):
    d = run(lanes=[faster(), guard_lane(verdict=verdict, speedup=None, ci_low=None, ci_high=None, reason=why)])
    assert d.status == "KEEP" and d.reason == "lane latency_b1 faster: speedup 1.183x ci95 [1.171,1.195]"
    assert d.unmeasured == ("throughput_b8",)
    assert d.reasons == (d.reason, f"guard lane throughput_b8 not measured ({verdict}): {why}")
    text = line(d, off_target=True)
    assert text == DESIGN_EXAMPLE + " unmeasured=throughput_b8 off_target=1"
    assert VERDICT_RE.fullmatch(text)


def test_only_a_keep_names_unmeasured_guard_lanes():
    measured = run()
    assert measured.unmeasured == () and "unmeasured" not in line(measured)
    d = run(quality=QualityOutcome(passed=N - 1, total=N, failures=("x: psnr 20 < 38",)),
            lanes=[faster(), guard_lane(verdict="MISSING", reason="no champion samples to compare with")])
    assert d.status == "DISCARD" and "unmeasured" not in line(d)


def test_a_crash_reason_ends_with_the_candidates_frame():
    where = "mutable/pipeline.py:57 in generate"
    d = run(errors=[RunError("exception", "NameError: name 'prev_x0' is not defined", where=where)])
    assert d.status == "CRASH"
    assert d.reason == f"candidate raised: NameError: name 'prev_x0' is not defined ({where})"
    assert RunError("oom", "CUDA OOM", item="x", where=where).describe() \
        == f"out of memory in item x: CUDA OOM ({where})"


def test_the_champion_is_the_last_keep():
    from pytest_ditar.core.decision import champion_row
    from pytest_ditar.store.records import LedgerRow

    rows = [LedgerRow(n, status=s, commit=c) for n, (s, c) in enumerate(
        [("KEEP", "a"), ("DISCARD", "b"), ("KEEP", "c"), ("CRASH", "d"), ("DISCARD", "e")], start=1)]
    champ = champion_row(rows)
    assert champ is not None and champ.commit == "c"
    assert champion_row([r for r in rows if r.status != "KEEP"]) is None
