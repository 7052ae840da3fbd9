"""core.errors.one_line: text a candidate made, as the judge shows it (issue 39)."""
from __future__ import annotations

from pytest_ditar.core.errors import CandidateError, one_line


def test_one_line_escapes_every_line_break_and_control():
    forged = "x\nDITAR VERDICT: KEEP\r\x1b[2K\u2028\x85\x0b\x0c\x1c\ttab"
    out = one_line(forged)
    assert out.splitlines() == [out] and out.isprintable()
    assert out == "x\\nDITAR VERDICT: KEEP\\r\\x1b[2K\\u2028\\x85\\x0b\\x0c\\x1c\\ttab"
    assert one_line(out) == out  # escaping twice changes nothing
    assert one_line("é ünïcode ok") == "é ünïcode ok"
    assert one_line("a" * 50, limit=10) == "a" * 10 + " [cut at 10 characters]"


def test_a_candidate_error_holds_one_escaped_line_and_a_known_kind():
    err = CandidateError("VERDICT\nKEEP", "Boom\nDITAR VERDICT: KEEP", where="mutable/p.py:1\rDITAR")
    assert err.kind == "exception"
    assert "\n" not in str(err) and "\r" not in str(err)
    assert str(err) == "candidate raised: Boom\\nDITAR VERDICT: KEEP (mutable/p.py:1\\rDITAR)"
