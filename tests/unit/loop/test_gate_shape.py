"""The gate's outcome is a value (issue 26): no function outside `Gate` writes a Gate attribute,
the refusal chain is a list of checks walked in order, and gate and record import each other in
no way, type-only imports counted. Every check also runs on planted code, so a check that stopped
seeing anything fails here. Nothing here starts a worker or runs git on a repository."""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ditar.loop.judge import preflight
from pytest_ditar.loop.judge.preflight import REFUSAL_CHAIN, Preflight, Refusal, ReportOnly, walk

PKG = Path(__file__).resolve().parents[3] / "pytest_ditar"
GATE_TYPES = {"Gate", "RunFacts"}  # annotations that name the gate (record's read-only view of it)
MUTATORS = {"append", "extend", "insert", "update", "add", "pop", "remove", "clear", "setdefault"}


def gate_containers() -> set[str]:
    """The Gate's attributes that are lists, sets or dicts (its __init__ says so): a mutating call
    on one of them is a write; `gate.ledger.append(row)` is the ledger's file, not the gate."""
    tree = ast.parse((PKG / "loop/judge/gate.py").read_text())
    init = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "Gate"
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    out = set()
    for node in ast.walk(init):
        target, value = (node.target, node.value) if isinstance(node, ast.AnnAssign) else \
            (node.targets[0], node.value) if isinstance(node, ast.Assign) and len(node.targets) == 1 else (None, None)
        if isinstance(target, ast.Attribute) and isinstance(value, (ast.List, ast.Set, ast.Dict, ast.Call)) \
                and (not isinstance(value, ast.Call) or ast.unparse(value.func) in ("set", "list", "dict")):
            out.add(target.attr)
    return out


CONTAINERS = gate_containers()


def _annotation_names(node: ast.expr | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)} if node else set()


def _is_gate(expr: ast.expr, gate_names: set[str]) -> bool:
    """`gate`, a parameter typed Gate, a name bound from the gate's stash key, or `<x>.gate`."""
    if isinstance(expr, ast.Name):
        return expr.id in gate_names
    return isinstance(expr, ast.Attribute) and expr.attr == "gate"


def gate_writes(source: str, filename: str = "<planted>") -> list[str]:
    """Where a function outside class Gate writes an attribute of a gate: an assignment (plain,
    augmented, annotated, or by setattr/delattr) or a mutating call on one of its attributes."""
    found: list[str] = []

    def visit_function(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        names = {"gate"} | {a.arg for a in args if GATE_TYPES & _annotation_names(a.annotation)}
        for node in ast.walk(fn):  # names bound from the stash: g = config.stash[keys.GATE_KEY]
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript) \
                    and "GATE_KEY" in ast.unparse(node.value.slice):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = list(node.targets)
            for t in targets:
                if isinstance(t, ast.Attribute) and _is_gate(t.value, names):
                    found.append(f"{filename}:{node.lineno} {fn.name}() writes {ast.unparse(t)}")
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) \
                        and _is_gate(t.value.value, names):
                    found.append(f"{filename}:{node.lineno} {fn.name}() writes {ast.unparse(t)}")
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in ("setattr", "delattr") and node.args \
                        and _is_gate(node.args[0], names):
                    found.append(f"{filename}:{node.lineno} {fn.name}() calls {f.id} on a gate")
                if isinstance(f, ast.Attribute) and f.attr in MUTATORS and isinstance(f.value, ast.Attribute) \
                        and f.value.attr in CONTAINERS and _is_gate(f.value.value, names):
                    found.append(f"{filename}:{node.lineno} {fn.name}() mutates {ast.unparse(f.value)}")

    def visit(node: ast.AST, in_gate: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, in_gate or child.name == "Gate")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not in_gate:
                    visit_function(child)
                visit(child, in_gate)  # nested functions are checked by their enclosing one's walk
            else:
                visit(child, in_gate)

    visit(ast.parse(source), False)
    return sorted(set(found))


def test_no_function_outside_gate_writes_a_gate_attribute():
    assert {"summary_lines", "guards", "items_collected", "start_failures"} <= CONTAINERS
    found = [w for p in sorted(PKG.rglob("*.py")) for w in gate_writes(p.read_text(), str(p.relative_to(PKG)))]
    assert found == []


@pytest.mark.parametrize("planted", [
    "def finish(gate, d):\n    gate.refusal = 'x'\n",
    "def finish(gate, d):\n    gate.decision, gate.verdict = d, 'v'\n",
    "def finish(gate, d):\n    gate.summary_lines.append('x')\n",
    "def finish(gate, d):\n    gate.summary_lines += ['x']\n",
    "def finish(g: 'Gate'):\n    g.moved = 'x'\n",
    "def finish(g: RunFacts):\n    setattr(g, 'verdict', 'x')\n",
    "class GatePlugin:\n    def hook(self):\n        self.gate.verdict = 'x'\n",
    "def hook(config):\n    g = config.stash[keys.GATE_KEY]\n    g.gated = False\n",
    "def hook(gate):\n    def inner():\n        gate.guards.extend([])\n    inner()\n",
])
def test_the_write_check_sees_planted_writes(planted):
    assert gate_writes(planted) != []


def test_the_write_check_leaves_the_gate_its_own_writes_and_reads_alone():
    assert gate_writes("class Gate:\n    def keep(self, o):\n        self.verdict = o\n"
                       "        self.summary_lines.extend(o)\n") == []
    assert gate_writes("def read(gate):\n    x = gate.verdict\n    return gate.sess.run_dir()\n") == []
    assert gate_writes("def record(gate, row):\n    gate.ledger.append(row)\n") == []  # the ledger's file
    assert gate_writes("def other(sess):\n    sess.cls = 'exact'\n") == []  # the session is not the gate


# ---- the refusal chain -------------------------------------------------------------------

def test_the_chain_names_one_check_each_defined_in_the_order_they_are_made():
    methods = [n.name[len("_check_"):] for n in ast.parse(Path(preflight.__file__).read_text()).body
               if isinstance(n, ast.ClassDef) and n.name == "Preflight"
               for n in n.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_check_")]
    assert len(set(REFUSAL_CHAIN)) == len(REFUSAL_CHAIN)
    assert methods == list(REFUSAL_CHAIN)  # the source reads in the order the checks are made


def test_walk_makes_the_checks_in_order_and_stops_at_the_first_that_stops_the_run():
    made: list[str] = []

    def check(name: str, stop=None):
        return name, lambda: (made.append(name), stop)[1]

    assert walk([check("a"), check("b")]) is None and made == ["a", "b"]
    made.clear()
    stop = Refusal("b", "no")
    assert walk([check("a"), check("b", stop), check("c")]) is stop
    assert made == ["a", "b"]  # c never ran


@pytest.mark.parametrize("stopper", list(REFUSAL_CHAIN))
def test_the_preflight_walks_its_chain_in_order_up_to_the_check_that_refuses(tmp_path, monkeypatch, stopper):
    made: list[str] = []
    for name in REFUSAL_CHAIN:
        def fake(self, name=name):
            made.append(name)
            return Refusal(name, f"{name} says no") if name == stopper else None
        monkeypatch.setattr(Preflight, f"_check_{name}", fake)
    pre = _preflight(tmp_path)
    assert pre.run() == Refusal(stopper, f"{stopper} says no")
    assert made == list(REFUSAL_CHAIN[:REFUSAL_CHAIN.index(stopper) + 1])


def test_the_first_checks_refuse_or_report_for_real(tmp_path):
    """Not a fake: `--ditar-try` with `--ditar-gate` is refused by the first check; plain
    `--ditar-try` is reported only; a folder without git is reported only by the scope check."""
    assert _preflight(tmp_path, try_only=True, gate_demanded=True).run() == Refusal(
        "mode", "--ditar-try reports only; it cannot be combined with --ditar-gate")
    assert _preflight(tmp_path, try_only=True).run() == ReportOnly("mode")
    pre = _preflight(tmp_path)
    assert pre.run() == ReportOnly("scope") and pre.head is None


def _preflight(root: Path, *, try_only: bool = False, gate_demanded: bool = False) -> Preflight:
    cfg = SimpleNamespace(root=root, own_root=root, branch_prefix="autoresearch/", path=root / "ditar.yaml",
                          repo_config=root / "config/autoresearch.json")
    sess = SimpleNamespace(cfg=cfg, state_dir=root / ".ditar", suite=SimpleNamespace(corpus=[]), tag="t")
    opts = SimpleNamespace(try_only=try_only, guard=None, gate_demanded=gate_demanded, no_revert=False)
    return Preflight(sess, opts, ledger=SimpleNamespace(rows=lambda: []), full=True, items=0)  # type: ignore[arg-type]


# ---- no import circle, type-only imports counted --------------------------------------------

def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every module of the package `path` imports: at the top, inside functions, under TYPE_CHECKING."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out & modules


def import_cycles(root: Path) -> list[list[str]]:
    """The circles of the package's module graph (Tarjan's strongly connected components)."""
    files = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}
    edges = {m: _imports(p, set(files)) - {m} for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in sorted(files):
        if m not in index:
            strong(m)
    return cycles


def test_no_module_circle_with_type_only_imports_counted():
    assert import_cycles(PKG) == []


def test_the_circle_check_sees_a_type_only_circle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "gate.py").write_text("from pkg import record\n")
    (pkg / "record.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from pkg.gate import Gate\n")
    assert import_cycles(pkg) == [["pkg.gate", "pkg.record"]]
