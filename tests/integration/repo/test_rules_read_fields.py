"""Rules read fields, never wording (issue 40): no code of the package tests the text of a reason,
a refusal or a verdict line to decide something (a `cause` says what an objection is), and nothing
reads a verdict line back (the outcome is a value, core.verdict_json.Verdict)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "pytest_ditar"
WORDS = ("reason", "reasons", "refusal", "why", "verdict")  # names that hold an outcome's text


def _texty(node: ast.AST) -> bool:
    """An expression that names an outcome's text: `reason`, `d.reasons`, `gate.refusal`, `str(r)` of one..."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in WORDS:
            return True
        if isinstance(n, ast.Attribute) and n.attr in WORDS:
            return True
    return False


def wording_reads(source: str) -> list[tuple[int, str]]:
    """Each place a condition reads an outcome's words: `x.startswith(...)`/`endswith` on a reason,
    `"..." in reason`; and every call of parse_line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith") and _texty(node.func.value):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str) \
                and any(_texty(c) for c in node.comparators):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "parse_line"
                                             or getattr(node.func, "attr", None) == "parse_line"):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_rule_reads_the_wording_of_a_reason_and_nothing_parses_a_verdict_line_back():
    bad = [f"pytest_ditar/{p.relative_to(PACKAGE).as_posix()}:{line}: {expr}"
           for p in sorted(PACKAGE.rglob("*.py")) for line, expr in wording_reads(p.read_text())]
    assert not bad, "rules that read an outcome's words (read its cause, or the value it came from):\n" + \
        "\n".join(bad)


def test_the_check_finds_each_kind_of_wording_read():
    src = ("def f(d, gate, lane, r):\n"
           "    a = (lane.reason or '').startswith('interference')\n"
           "    b = ' unstable: ' in str(r.reasons)\n"
           "    c = gate.refusal.startswith(\"class '\")\n"
           "    e = parse_line(gate.verdict)\n"
           "    ok = d.cause == 'drift' and 'x' in d.causes and gate.name.startswith('gw')\n")
    assert [line for line, _ in wording_reads(src)] == [2, 3, 4, 5]
