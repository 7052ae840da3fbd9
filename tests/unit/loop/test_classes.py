"""A run's two classes (loop.run.classes): the claim is validated once, by read_claim, and travels on as
a Claim; the judged class is derived from that Claim and cannot take the option's string, so no
later step validates the claim again. Nothing here runs git or starts a worker."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pytest_ditar.core import decision
from pytest_ditar.loop.judge.preflight import ExperimentMeta
from pytest_ditar.loop.run import classes
from pytest_ditar.loop.run.classes import Claim, judged_class_of, read_claim

PKG = Path(__file__).resolve().parents[3] / "pytest_ditar"


def test_the_option_names_the_claim_before_the_trailer_and_either_is_made_canonical():
    assert read_claim(" Numerical ", None) == Claim("numerical")
    assert read_claim(None, "APPROXIMATE") == Claim("approximate")
    assert read_claim("exact", "Exact") == Claim("exact")
    assert read_claim(None, None) == Claim(None)
    assert ExperimentMeta(read_claim(None, "quantization"), "d").claimed_class == "quantization"


def test_a_name_that_is_no_class_or_an_option_the_trailer_contradicts_is_refused():
    with pytest.raises(ValueError, match="unknown classification 'fast'; valid: exact, numerical"):
        read_claim("fast", None)
    with pytest.raises(ValueError, match="unknown classification 'fast'"):
        read_claim("exact", "fast")
    with pytest.raises(ValueError) as exc:
        read_claim("numerical", "exact")
    assert str(exc.value) == ("its trailer 'Ditar-Class: exact' and the class given (numerical) differ, so the ledger "
                              "and the git history would disagree: run it as 'exact' (`--classification exact`), or "
                              "change the trailer to 'Ditar-Class: numerical' (`git commit --amend`)")


def test_the_judged_class_reads_the_validated_claim_and_never_validates_it_again(monkeypatch):
    seen: list[str] = []

    def counting(name: str) -> str:
        seen.append(name)
        return decision.validate_class(name)

    monkeypatch.setattr(classes, "validate_class", counting)
    claim = read_claim(" Approximate ", None)
    assert seen == [" Approximate "]
    # the kept commits' classes (the ledger's) are validated as read; the claim is taken as it is
    assert judged_class_of(["exact", "numerical"], claim) == "approximate"
    assert judged_class_of(["quantization"], claim) == "quantization"
    assert judged_class_of([], Claim(None)) == "exact"
    assert seen == [" Approximate "]
    with pytest.raises(AttributeError):  # the option's string is no Claim: nothing can validate it a second time
        judged_class_of(["exact"], " Approximate ")  # type: ignore[arg-type]


def _calls(name: str) -> list[str]:
    """`file:function` of every call of `name` in the package."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and (ast.unparse(node.func).split(".")[-1] == name):
                        found.append(f"{path.relative_to(PKG)}:{fn.name}")
    return sorted(set(found))


def test_one_function_validates_a_claim_and_each_kind_of_run_calls_it_once():
    # core validates the ledger's classes as it reads them (cumulative_class); a claim only read_claim does
    assert _calls("validate_class") == ["core/decision.py:cumulative_class", "loop/run/classes.py:read_claim"]
    # a gated run reads its claim in the refusal chain (the option, else the trailer), a report-only run
    # from the option alone: never both in one run, and the gate judges a gated run by the chain's Claim
    assert _calls("read_claim") == ["loop/judge/gate.py:_report_mode", "loop/judge/preflight.py:read_meta"]
