"""core.documents and core.verdict_json.try_record (issue 53): the `--json` documents made from values,
each with the step that comes next, valid against their shipped schemas."""
from pytest_ditar.core.documents import FAIL, PASS, PROFILE_NEXT, WARN, Check, doctor_document, profile_document
from pytest_ditar.core.verdict_json import TryFigures, try_record

from jsonschemas import available, validate

ROWS = [Check("config", PASS, "config/autoresearch.json"), Check("class approximate", WARN, "unavailable"),
        Check("branch", PASS, "autoresearch/t"), Check("baseline", PASS, "6 items")]


def _valid(doc, kind):
    if available():
        validate(doc, kind)
    return doc


def test_doctor_next_follows_the_failing_rows():
    ok = _valid(doctor_document(ROWS, "the host is quiet", 0), "doctor")
    assert ok["failed"] == [] and ok["passed"] == ok["total"] == 4 and ok["checks"][1]["result"] == "warn"
    assert ok["next"].startswith("`dit-ar status`") and ok["next"].endswith("the host now: the host is quiet")
    no_base = [*ROWS[:3], Check("baseline", FAIL, "baseline missing")]
    assert doctor_document(no_base, None, 1)["next"].startswith("`dit-ar baseline`")
    off = [Check("branch", FAIL, "main"), Check("baseline", FAIL, "missing")]
    assert _valid(doctor_document(off, None, 1), "doctor")["next"].startswith("`dit-ar init --tag T`")
    other = [Check("sandbox", FAIL, "no bwrap"), Check("ledger", FAIL, "chain broken")]
    doc = doctor_document(other, None, 1)
    assert doc["failed"] == ["sandbox", "ledger"] and "fix the FAIL rows (sandbox, ledger;" in doc["next"]


def test_profile_document_carries_the_summary_or_the_candidates_error():
    summary = {"candidate": {"commit": "abc"}, "lane": "latency_b1", "batch": 1, "steps": 2, "device": "cpu",
               "phases": [{"key": "denoise", "label": "denoise"}], "call_wall_ms": 3.5, "kernels": {},
               "top_ops": [], "trace": "trace.json"}
    doc = _valid(profile_document(summary, "/p/out", 0), "profile")
    assert doc["summary"] == summary and doc["next"] == PROFILE_NEXT and doc["error"] is None
    failed = _valid(profile_document(None, None, 1, error="boom", logs=["--- worker", "Traceback"]), "profile")
    assert failed["summary"] is None and failed["logs"] == ["--- worker", "Traceback"] and "fix it" in failed["next"]


def test_try_record_is_an_outcome_never_a_verdict():
    out = TryFigures("FASTER", "latency_b1", 1.9, 1.8, 2.0, 6, 6, "exact")
    doc = _valid(try_record(out, 0, line="DITAR TRY: FASTER ...", next_step="worth a commit"), "verdict")
    assert doc["kind"] == "try" and doc["outcome"] == "FASTER" and "verdict" not in doc
    assert doc["ci95"] == [1.8, 2.0] and doc["quality"] == {"passed": 6, "total": 6} and doc["next"] == "worth a commit"
    refused = _valid(try_record(None, 4, line=None, next_step="fix it", refusal="dirty tree"), "verdict")
    assert refused["outcome"] == "REFUSED" and refused["line"] == "DITAR REFUSED: dirty tree"
    assert refused["reason"] == "dirty tree" and refused["speedup"] is None
    ended = _valid(try_record(None, 3, line=None, next_step=None), "verdict")
    assert ended["outcome"] is None and ended["reason"] == "" and ended["next"] is None
