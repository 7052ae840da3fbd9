"""loop.judge.ci's files: junit testsuite properties added to the file pytest wrote; loop.share.remote's tag
choice and the refusal a clone without the state gets."""
import pytest

from pytest_ditar.core.errors import DitarError
from pytest_ditar.loop.judge.ci import add_junit_properties
from pytest_ditar.loop.share.remote import missing_state, pick_tag

JUNIT = ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
         'skipped="0" tests="1"><testcase classname="t" name="test_x" time="0.1" /></testsuite></testsuites>')


def test_junit_properties_join_the_testsuite_pytest_wrote(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    add_junit_properties(path, [("ditar.verdict", "FAIL"), ("ditar.speedup", "0.7")])
    text = path.read_text()
    assert '<testsuite name="pytest"' in text and '<testcase classname="t" name="test_x"' in text
    assert text.index("<properties>") < text.index("<testcase")  # the schema's order: properties first
    assert '<property name="ditar.verdict" value="FAIL" />' in text and 'name="ditar.speedup" value="0.7"' in text


def test_the_tag_is_the_one_the_remote_holds_or_the_one_named(monkeypatch):
    monkeypatch.delenv("DITAR_TAG", raising=False)
    assert pick_tag(["t"], None) == "t" and pick_tag(["a", "t"], "t") == "t"
    with pytest.raises(DitarError, match="several tags .*a, t.*--tag"):
        pick_tag(["a", "t"], None)
    with pytest.raises(DitarError, match=r"holds no refs/ditar/x .*git push origin 'refs/ditar/\*'"):
        pick_tag(["t"], "x")
    with pytest.raises(DitarError, match="holds no refs/ditar/"):
        pick_tag([], None)
    monkeypatch.setenv("DITAR_TAG", "t")
    assert pick_tag(["a", "t"], None) == "t"


def test_a_clone_without_the_state_is_told_the_command(tmp_path):
    why = missing_state("t", tmp_path / ".autoresearch/t")
    assert "`dit-ar fetch-state --remote origin --tag t`" in why and "refs/ditar/t" in why


def test_a_report_only_run_writes_no_document_and_says_so(tmp_path):
    from types import SimpleNamespace

    from pytest_ditar.loop.judge.ci import publish

    gate = SimpleNamespace(opts=SimpleNamespace(guard=None, try_only=False), gated=False, refusal=None)
    env = {"GITHUB_OUTPUT": str(tmp_path / "out"), "GITHUB_ACTIONS": "true"}
    done = publish(gate, 0, json_path=tmp_path / "x.verdict.json", junit_path=None, env=env)
    assert done.notes == (f"ditar: --ditar-json {tmp_path / 'x.verdict.json'} not written: a report-only run "
                          "decides nothing (a gated run, a guard or a refusal writes it)",) and done.annotations == ()
    assert not (tmp_path / "x.verdict.json").exists() and not (tmp_path / "out").exists()
    assert publish(gate, 0, json_path=None, junit_path=None, env=env).notes == ()
