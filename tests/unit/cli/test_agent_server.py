"""cli.agent_server's reading of a child's output (issue 53): a document that validates is the tool's
structured result with its exit status and next step; a refusal is a tool error naming the fix (its
document kept); no document (the CLI's usage or config error) is a tool error quoting the CLI's own
lines; a document that breaks its schema is a tool error, never passed on as valid."""
import json

import pytest

pytest.importorskip("mcp", reason="the agent extra (mcp) is not installed")

from pytest_ditar.cli.agent_server import _result  # noqa: E402
from pytest_ditar.cli.agent_tools import BY_NAME  # noqa: E402
from pytest_ditar.core.verdict_json import try_record  # noqa: E402

HIT = {"rank": 1, "path": "a.md", "heading": "H", "score": 1.5, "snippet": "s", "title": "T", "tags": [],
       "class": "exact"}


def test_a_valid_document_is_the_structured_result_with_its_next_step():
    res = _result(BY_NAME["search"], json.dumps([HIT]).encode(), 0, [])
    assert not res.is_error and res.structured_content["document"] == [HIT]
    assert res.structured_content["exit_status"] == 0 and "dit-ar try" in res.structured_content["next"]
    assert json.loads(res.content[0].text) == res.structured_content


def test_a_refusal_is_an_error_naming_the_fix():
    doc = try_record(None, 4, line=None, next_step="fix it, then run it again", refusal="the tree is dirty: x.txt")
    res = _result(BY_NAME["try_change"], json.dumps(doc).encode(), 4, ["DITAR REFUSED: the tree is dirty: x.txt"])
    assert res.is_error and res.content[0].text == "REFUSED: the tree is dirty: x.txt\nnext: fix it, then run it again"
    assert res.structured_content["document"] == doc


def test_no_document_or_a_broken_one_is_an_error():
    res = _result(BY_NAME["compare"], b"", 2, ["dit-ar: error: compare: no run 9 in the ledger"])
    assert res.is_error and "exited 2 without its document" in res.content[0].text
    assert res.content[0].text.endswith("dit-ar: error: compare: no run 9 in the ledger")
    res = _result(BY_NAME["search"], json.dumps([{**HIT, "rank": 0}]).encode(), 0, [])
    assert res.is_error and "breaks pytest_ditar/schemas/search.schema.json" in res.content[0].text
    assert res.structured_content is None
