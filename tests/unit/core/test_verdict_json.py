"""A run's outcome as one value (core.verdict_json.Verdict): the verdict line, the JSON document and
summary.md rendered from it. `parse_line`, for scripts holding only a printed line, reads every
field of the line back, a quoted reason with quotes, backslashes and newlines included."""
import pytest

from pytest_ditar.core.decision import Decision, verdict_line
from pytest_ditar.core.verdict_json import Verdict, markdown, parse_line, record

LINE = dict(lane="latency_b1", speedup=1.183, ci_low=1.171, ci_high=1.195, quality_pass=32, quality_total=32,
            judged_class="exact", commit="abc1234", off_target=False)


@pytest.mark.parametrize("reason", ['not faster: 0.98x "slower" on C:\\tmp', "two\nlines", ""])
def test_a_discards_fields_and_reason_survive_the_line(reason):
    line = verdict_line(Decision("DISCARD", reason, (reason,)), **{**LINE, "off_target": True})
    got = parse_line(line)
    assert got == {"status": "DISCARD", "lane": "latency_b1", "speedup": 1.183, "ci95": [1.171, 1.195],
                   "quality": {"passed": 32, "total": 32}, "class": "exact", "commit": "abc1234",
                   "reason": reason.replace("\n", " ").strip(), "off_target": True}


def test_a_keep_names_its_unmeasured_lanes_and_a_crash_has_no_numbers():
    keep = parse_line(verdict_line(Decision("KEEP", "", (), unmeasured=("throughput_b8",)), **LINE))
    assert keep["status"] == "KEEP" and keep["unmeasured"] == ["throughput_b8"] and "reason" not in keep
    crash = parse_line(verdict_line(Decision("CRASH", "candidate raised: boom", ()),
                                    **{**LINE, "speedup": None, "ci_low": None, "ci_high": None,
                                       "quality_pass": None, "quality_total": None}))
    assert crash["speedup"] is None and crash["ci95"] == [None, None] and crash["quality"] is None


def test_a_refusal_and_a_run_that_never_decided():
    assert parse_line("DITAR REFUSED: the working tree has uncommitted changes") == {
        "status": "REFUSED", "reason": "the working tree has uncommitted changes"}
    doc = record(None, 3)
    assert doc["verdict"] is None and doc["exit_status"] == 3 and doc["schema_version"] == 1
    refused = record(None, 4, refusal="the working tree has uncommitted changes")
    assert refused["verdict"] == "REFUSED"
    assert refused["line"] == "DITAR REFUSED: the working tree has uncommitted changes"
    assert refused["reason"] == "the working tree has uncommitted changes" and "lanes" not in refused


def test_the_document_is_the_verdicts_fields_and_its_line_rendered_from_them():
    v = Verdict(Decision("KEEP", "faster", ("faster",)), **{**LINE, "speedup": 1.18349})
    lanes = {"latency_b1": {"outcome": {"verdict": "FASTER", "objective": True, "speedup": 1.183,
                                        "ci_low": 1.171, "ci_high": 1.195, "reason": ""},
                            "measurement": {"samples": [0.1] * 24}, "champion_source": "interleaved"}}
    doc = record(v, 0, lanes=lanes, run_dir="/s/runs/x")
    assert doc["verdict"] == "KEEP" and doc["speedup"] == 1.18349 and doc["reasons"] == ["faster"]
    assert doc["line"] == v.line() == verdict_line(v.decision, **{**LINE, "speedup": 1.18349})
    assert doc["reason"] == "" and doc["judged"] is True and doc["run_dir"] == "/s/runs/x"
    assert doc["lanes"]["latency_b1"] == {"verdict": "FASTER", "objective": True, "speedup": 1.183,
                                          "ci95": [1.171, 1.195], "reason": "", "rounds": 24,
                                          "champion_source": "interleaved", "figure": None}


def test_the_markdown_summary_gives_throughput_units_beside_seconds():
    v = Verdict(Decision("DISCARD", "not faster", ("not faster",)), **LINE)
    lanes = {"throughput_b8": {"outcome": {"verdict": "NOT_FASTER", "speedup": 1.004, "ci_low": 0.99, "ci_high": 1.02},
                               "measurement": {"samples": [0.5] * 10}}}
    md = markdown(record(v, 1, lanes=lanes), {"throughput_b8": (8, 25)}, {"throughput_b8": 0.5})
    assert md.startswith("**DISCARD** `abc1234` class exact") and "Reason: not faster" in md
    # 8 images in 0.5 s: 16 images/s; 25 steps: 20 ms a step
    assert "| throughput_b8 | NOT_FASTER | 1.004x | [0.990, 1.020] | 0.5000 | 16.00 | 20.00 | 10 |" in md, md
