"""What CI reads of a run (core.ci), made from its JSON document (core.verdict_json): GitHub's
annotations, outputs and step summary, junit properties. Every document made here validates
against the shipped schema (tests/jsonschemas.py)."""
import pytest

from pytest_ditar.core import ci
from pytest_ditar.core.decision import Decision
from pytest_ditar.core.verdict_json import Verdict, guard_record, record

from jsonschemas import available, problems

LINE = dict(lane="latency_b1", speedup=0.81, ci_low=0.75, ci_high=0.9, quality_pass=6, quality_total=6,
            judged_class="exact", commit="abc1234", off_target=False)
LANE = {"measurement": {"lane": "throughput_b8", "samples": [0.1, 0.11, 0.12]},
        "outcome": {"name": "throughput_b8", "objective": False, "verdict": "REGRESSED", "speedup": 0.7,
                    "ci_low": 0.6, "ci_high": 0.8, "reason": "0.700x slower beyond 5%"},
        "champion_source": "interleaved"}


def _valid(doc):
    if available():
        assert problems(doc, "verdict") == [], doc
    return doc


def test_a_reason_cannot_end_its_annotation_or_start_a_command_of_its_own():
    """A candidate's exception text reaches a CRASH's reason: a line break, '%' or '::' in it stay data."""
    forged = "boom\n::error::forged 100% %0A"
    line = ci.annotation("error", forged, title="a: b, c", file="mutable/p.py", line=7)
    assert "\n" not in line  # a "::" after the first separator is the message's own text
    assert line == "::error file=mutable/p.py,line=7,title=a%3A b%2C c::boom%0A::error::forged 100%25 %250A"
    assert ci.output_text({"reason": forged, "verdict": "CRASH"}, "D1") == f"reason<<D1\n{forged}\nD1\nverdict=CRASH\n"
    with pytest.raises(ValueError):
        ci.output_text({"reason": "a\nD1"}, "D1")


def test_a_crash_is_annotated_at_the_candidates_line_and_a_discard_with_each_regressed_lane():
    crash = _valid(record(Verdict(Decision("CRASH", "candidate raised: x", ()), **LINE), 10,
                          errors=[{"kind": "exception", "message": "x", "where": "mutable/pipeline.py:57 in generate",
                                   "item": None}]))
    assert ci.annotation_lines(crash) == ["::error file=mutable/pipeline.py,line=57,title=ditar CRASH::exception: x"]
    reason = "guard lane throughput_b8 regressed"
    discard = _valid(record(Verdict(Decision("DISCARD", reason, (reason,)), **LINE), 1,
                            lanes={"throughput_b8": LANE}, run_dir="/runs/1"))
    got = ci.annotation_lines(discard)
    assert got[0] == "::error title=ditar DISCARD::guard lane throughput_b8 regressed"
    assert got[1] == "::error title=ditar lane throughput_b8 REGRESSED::lane throughput_b8: 0.700x slower beyond 5%25"
    assert ci.outputs(discard) == {"verdict": "DISCARD", "lane": "latency_b1", "speedup": "0.81", "ci_low": "0.75",
                                   "ci_high": "0.9", "exit_status": "1", "kind": "gate",
                                   "reason": "guard lane throughput_b8 regressed"}
    keep = _valid(record(Verdict(Decision("KEEP", "", (), unmeasured=("throughput_b8",)), **LINE), 0))
    assert ci.annotation_lines(keep) == ["::warning title=ditar KEEP%3A unmeasured::guard lane throughput_b8 could "
                                         "not be measured"]
    assert ci.gate_markdown(keep, "**KEEP** table\n").startswith("### pytest-ditar gate\n\n**KEEP** table\n")


def test_a_guard_fail_names_its_lane_and_a_pass_warns_of_what_it_left_unresolved():
    fail = _valid(guard_record("DITAR GUARD: FAIL: lane throughput_b8: 0.700x ...", 1, tolerance=0.05,
                               failures=["lane throughput_b8: 0.700x ..."], failing=["throughput_b8"],
                               lanes={"throughput_b8": LANE}, objective="latency_b1"))
    assert fail["verdict"] == "FAIL" and fail["lane"] == "throughput_b8" and fail["speedup"] == 0.7
    assert fail["ci95"] == [0.6, 0.8]
    assert ci.annotation_lines(fail) == ["::error title=ditar guard FAIL::lane throughput_b8: 0.700x ..."]
    md = ci.guard_markdown(fail)
    assert md.startswith("### pytest-ditar guard: **FAIL** (tolerance 5%)")
    assert "| throughput_b8 | REGRESSED | 0.700x |" in md
    ok_lane = {**LANE, "outcome": {**LANE["outcome"], "verdict": "OK", "speedup": 0.97, "reason": "unresolved"}}
    passed = _valid(guard_record("DITAR GUARD: PASS throughput_b8=0.970x tolerance=5% unresolved=throughput_b8", 0,
                                 tolerance=0.05, failures=[], failing=[], lanes={"throughput_b8": ok_lane},
                                 objective="latency_b1", unresolved=["throughput_b8"]))
    assert passed["verdict"] == "PASS" and passed["unresolved"] == ["throughput_b8"] and passed["lane"] is None
    assert ci.annotation_lines(passed) == ["::warning title=ditar guard%3A lane throughput_b8 unresolved::lane "
                                           "throughput_b8: unresolved"]
    refused = _valid(guard_record(None, 4, tolerance=0.05, failures=[], failing=[], lanes={}, objective="latency_b1",
                                  refusal="no research state for tag t"))
    assert refused["verdict"] == "REFUSED" and refused["line"] == "DITAR REFUSED: no research state for tag t"
    assert ci.outputs(refused)["exit_status"] == "4" and ci.junit_properties(refused) == [
        ("ditar.kind", "guard"), ("ditar.verdict", "REFUSED")]


def test_a_document_off_its_schema_is_caught():
    if not available():
        pytest.skip("jsonschema not installed (the test extra)")
    doc = record(Verdict(Decision("KEEP", "faster", ("faster",)), "l", 1.2, 1.1, 1.3, 6, 6, "exact", "abc1234"), 0)
    assert problems(doc, "verdict") == []
    assert problems({**doc, "verdict": "MAYBE"}, "verdict")
    assert problems({**doc, "surprise": 1}, "verdict")
    assert problems({k: v for k, v in doc.items() if k != "exit_status"}, "verdict")


def test_a_refused_gated_runs_document_validates():
    doc = _valid(record(None, 4, refusal="guard clean_tree: uncommitted changes"))
    assert doc["verdict"] == "REFUSED" and doc["ci95"] is None and ci.outputs(doc)["ci_low"] == ""
    assert ci.annotation_lines(doc) == ["::error title=ditar REFUSED::guard clean_tree: uncommitted changes"]
