"""A lane's outcome is made in one function (issue 51): core.laneoutcome.compose, from the lane's
frozen evidence. Nothing else in the package calls `LaneOutcome(`, assigns `x.outcome = ...`, or
rewrites one with `dataclasses.replace(..., outcome=...)`; and no `replace(..., verdict=...)`
outside core.laneoutcome (where compose's rules build the outcome's draft) turns one verdict into
another after judging. The check also runs on a planted source, so a check that stopped seeing
anything fails here."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "pytest_ditar"
HOME = "core/laneoutcome.py"  # the module of the one function
SITE = "compose"  # the one function
# modules whose `replace(..., verdict=...)` is of another type's verdict than a lane outcome's, and why
OTHER_VERDICTS = {"core/sequential.py": "core.stats.Comparison, the statistic compose is given"}


def _called(node: ast.Call) -> str | None:
    return node.func.id if isinstance(node.func, ast.Name) else \
        node.func.attr if isinstance(node.func, ast.Attribute) else None


def outcome_sites(source: str, home: bool = False) -> list[tuple[int, str]]:
    """(line, what) of each place `source` makes or rewrites a lane's outcome outside compose;
    `home`: `source` is core.laneoutcome (whose rules `replace` a draft's verdict) or one of
    OTHER_VERDICTS."""
    tree = ast.parse(source)
    allowed: set[int] = set()  # the ids of the nodes inside compose
    for fn in ast.walk(tree):
        if home and isinstance(fn, ast.FunctionDef) and fn.name == SITE:
            allowed |= {id(n) for n in ast.walk(fn)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) == "LaneOutcome" and id(node) not in allowed:
            found.append((node.lineno, "LaneOutcome("))
        elif isinstance(node, ast.Call) and _called(node) == "replace":
            keys = {k.arg for k in node.keywords}
            if "outcome" in keys or ("verdict" in keys and not home):
                found.append((node.lineno, ast.unparse(node)[:80]))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [(node.lineno, ".outcome =") for t in targets
                      for n in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
                      if isinstance(n, ast.Attribute) and n.attr == "outcome"]
        elif isinstance(node, ast.Call) and _called(node) == "setattr" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == "outcome":
            found.append((node.lineno, "setattr(..., 'outcome', ...)"))
    return sorted(found)


def test_a_lanes_outcome_is_made_in_compose_alone():
    bad = []
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = p.relative_to(PACKAGE).as_posix()
        bad += [f"pytest_ditar/{rel}:{line}: {what}"
                for line, what in outcome_sites(p.read_text(), rel == HOME or rel in OTHER_VERDICTS)]
    assert not bad, ("a lane's outcome made or rewritten outside core.laneoutcome.compose (give compose the "
                     "evidence instead):\n" + "\n".join(bad))
    home = (PACKAGE / HOME).read_text()
    calls = [n for n in ast.walk(ast.parse(home)) if isinstance(n, ast.Call) and _called(n) == "LaneOutcome"]
    assert len(calls) == 1, f"compose makes the outcome in one call, found {len(calls)}"


def test_the_check_finds_each_way_of_making_or_rewriting_an_outcome():
    src = ("from dataclasses import replace\n"
           "def judge(m, res, oc):\n"
           "    a = LaneOutcome('b1', True, 'FASTER', 1.0, 1.0, 1.0)\n"
           "    res.outcome = a\n"
           "    b = replace(res, outcome=a)\n"
           "    c = replace(oc, verdict='UNSTABLE')\n"
           "    setattr(res, 'outcome', c)\n"
           "    lanes[res.outcome.name] = res; x, res.outcome = 1, a\n"
           "    d = decision.LaneOutcome(**vars(a))\n"
           "    ok = replace(res, comparison={}), replace(m, samples=[]), res.outcome.verdict\n"
           "def compose(ev):\n"
           "    return LaneOutcome(ev.name, ev.objective, 'OK', None, None, None)\n")
    assert [line for line, _ in outcome_sites(src)] == [3, 4, 5, 6, 7, 8, 9, 12]
    # in core.laneoutcome: compose's call is the one, its rules may replace a draft's verdict
    assert [line for line, _ in outcome_sites(src, home=True)] == [3, 4, 5, 7, 8, 9]
