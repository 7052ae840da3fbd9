"""The layer rule of pytest_ditar (docs/architecture.md), checked on the real package.

- import-linter contracts in pyproject.toml [tool.importlinter]: layers, pure core and interface,
  pytest only in plugin, torch & co. only in runtime/hardware, GitPython nowhere (vcs runs the git program);
- no import cycles between subpackages, nor between modules (AST, like ../shared/tools/import_graph.py);
- only vcs runs git: no subprocess/os call outside pytest_ditar/vcs carries a "git" argument.

Every check also runs against a copy of the package with violations planted, so a check that
silently stopped seeing anything fails here. No candidate code, torch or git is imported.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PKG = "pytest_ditar"

# Subpackages deliberately absent from an external ban's source_modules (the exemptions).
EXEMPT = {
    "pytest-only-in-plugin": {"plugin"},
    "ml-only-in-runtime-hardware": {"runtime", "hardware", "demo"},  # demo: example candidates
    "no-gitpython": set(),
    "mcp-only-in-agent-server": set(),  # cli is a source: its one importer is an ignore_imports line
}


def _config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def _config_text() -> str:
    """The [tool.importlinter] tables of pyproject.toml, verbatim (comments included)."""
    out, keep = [], False
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        m = re.match(r"^\[\[?([^\]]+)\]\]?\s*(#.*)?$", line)
        if m:
            keep = m.group(1).strip().startswith("tool.importlinter")
        if keep:
            out.append(line)
    return "\n".join(out) + "\n"


def _children(root: Path) -> set[str]:
    """Top-level modules and subpackages of the package (what a contract can name)."""
    names = {p.stem for p in root.glob("*.py") if p.name != "__init__.py"}
    names |= {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    return names


def lint_imports(config: Path, src_root: Path) -> subprocess.CompletedProcess:
    """Run import-linter in a fresh interpreter whose sys.path finds `src_root`'s package first."""
    env = {**os.environ, "PYTHONPATH": str(src_root), "COLUMNS": "400"}  # one line per contract
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache", "--no-logo", str(config)],
                          cwd=src_root, env=env, capture_output=True, text=True, timeout=120)


def contract_status(out: str) -> dict[str, str]:
    """contract id -> "KEPT" | "BROKEN", read from lint-imports' summary lines."""
    status = {}
    for c in _config()["contracts"]:
        m = re.search(r"^" + re.escape(c["name"]) + r"\s*(KEPT|BROKEN)\b", out, re.M)
        status[c["id"]] = m.group(1) if m else "MISSING"
    return status


# ---- module graph (AST) --------------------------------------------------------------------------
def _modules(root: Path) -> dict[str, Path]:
    mods = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            skip.update(id(c) for c in ast.walk(n))
    return skip


def import_edges(root: Path) -> dict[str, dict[str, int]]:
    """module -> {imported package module: first line}; imports inside functions count, imports
    under `if TYPE_CHECKING:` do not (they never run, so they cannot form a runtime cycle)."""
    mods = _modules(root)
    edges: dict[str, dict[str, int]] = {m: {} for m in mods}
    for m, p in mods.items():
        is_pkg = p.name == "__init__.py"
        tree = ast.parse(p.read_text(), str(p))
        skip = _type_checking_nodes(tree)
        for n in ast.walk(tree):
            if id(n) in skip:
                continue
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                if n.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[: len(base) - (n.level - 1)]
                    mod = ".".join(base + ([n.module] if n.module else []))
                else:
                    mod = n.module or ""
                targets = [mod] + [f"{mod}.{a.name}" for a in n.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and t != PKG:
                    edges[m].setdefault(t, n.lineno)
    return edges


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _unit(module: str) -> str:
    """pytest_ditar.loop.judge.gate -> loop; pytest_ditar.interface -> interface."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _describe_cycle(comp: list[str], edges: dict[str, dict[str, int]], root: Path, unit=lambda m: m) -> list[str]:
    members = set(comp)
    lines = []
    for m in sorted(edges):
        for t, line in sorted(edges[m].items()):
            if unit(m) in members and unit(t) in members and unit(m) != unit(t):
                rel = _modules(root)[m].relative_to(root.parent)
                lines.append(f"  {rel}:{line}: {m} -> {t}")
    return lines


def subpackage_cycles(root: Path) -> list[str]:
    edges = import_edges(root)
    graph: dict[str, set[str]] = {}
    for m, targets in edges.items():
        graph.setdefault(_unit(m), set())
        for t in targets:
            if _unit(t) != _unit(m):
                graph[_unit(m)].add(_unit(t))
    return [f"cycle {' <-> '.join(c)}:\n" + "\n".join(_describe_cycle(c, edges, root, _unit))
            for c in _sccs(graph)]


def module_cycles(root: Path) -> list[str]:
    edges = import_edges(root)
    graph = {m: set(t) for m, t in edges.items()}
    return [f"cycle {' <-> '.join(c)}:\n" + "\n".join(_describe_cycle(c, edges, root)) for c in _sccs(graph)]


# ---- who runs git (AST) --------------------------------------------------------------------------
_OS_RUNNERS = re.compile(r"^(system|popen|exec\w*|spawn\w*|posix_spawn\w*)$")


def _is_git(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value == "git" or node.value.startswith("git ") or node.value.endswith("/git"))


def _argv_literal_of_git(node: ast.AST) -> bool:
    return isinstance(node, (ast.List, ast.Tuple)) and bool(node.elts) and _is_git(node.elts[0])


def git_runners(root: Path) -> list[str]:
    """file:line of every call outside <pkg>/vcs that runs git: a subprocess.* / os.system /
    os.exec* / os.spawn* / asyncio.create_subprocess_* call with a "git" string among its arguments
    (nested ones included), and any call handed an argv literal that starts with "git" (which is
    how a helper such as `_run(["git", ...])` hides the subprocess call)."""
    found = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if rel.parts[0] == "vcs":
            continue
        tree = ast.parse(p.read_text(), str(p))
        # names bound by `from subprocess import run` / `from os import system`
        runners = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   and n.module in ("subprocess", "os", "asyncio") for a in n.names}
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            spawns = (
                (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                 and (f.value.id == "subprocess"
                      or (f.value.id == "os" and _OS_RUNNERS.match(f.attr))
                      or (f.value.id == "asyncio" and f.attr.startswith("create_subprocess"))))
                or (isinstance(f, ast.Name) and f.id in runners)
            )
            args = [*n.args, *(k.value for k in n.keywords)]
            direct = spawns and any(_is_git(c) for a in args for c in ast.walk(a))
            via_helper = any(_argv_literal_of_git(a) for a in args)
            if direct or via_helper:
                found.append(f"{root.name}/{rel}:{n.lineno}: {ast.unparse(n)[:100]}")
    return sorted(found, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


# ---- the tests -----------------------------------------------------------------------------------
def test_import_contracts_hold() -> None:
    res = lint_imports(REPO / "pyproject.toml", REPO)
    assert "Contracts:" in res.stdout, res.stdout + res.stderr  # it ran, it did not error out
    assert "MISSING" not in contract_status(res.stdout).values(), res.stdout
    assert res.returncode == 0, res.stdout[res.stdout.find("Contracts:"):] + res.stderr


def test_every_subpackage_is_placed_by_every_external_ban() -> None:
    """A new subpackage must not escape a ban by not being listed: the sources of each external ban
    are all children of the package minus its documented exemptions."""
    children = _children(REPO / PKG)
    contracts = {c["id"]: c for c in _config()["contracts"]}
    for cid, exempt in EXEMPT.items():
        sources = {s.removeprefix(f"{PKG}.") for s in contracts[cid]["source_modules"]}
        assert sources == children - exempt, (cid, "missing:", children - exempt - sources,
                                              "extra:", sources - (children - exempt))


def test_no_import_cycles_between_subpackages() -> None:
    cycles = subpackage_cycles(REPO / PKG)
    assert not cycles, "\n".join(cycles)


def test_no_import_cycles_between_modules() -> None:
    cycles = module_cycles(REPO / PKG)
    assert not cycles, "\n".join(cycles)


def test_only_vcs_runs_git() -> None:
    found = git_runners(REPO / PKG)
    assert not found, "git run outside pytest_ditar/vcs:\n" + "\n".join(found)


def _plant(path: Path, code: str) -> int:
    """Append `code` to the file; return the line number it lands on."""
    text = path.read_text()
    if not text.endswith("\n"):
        text += "\n"
    path.write_text(text + code + "\n")
    return text.count("\n") + 1


def test_planted_violations_are_caught(tmp_path: Path) -> None:
    src = tmp_path / "src"
    pkg = src / PKG
    shutil.copytree(REPO / PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "importlinter.toml").write_text(_config_text())

    l_pytest = _plant(pkg / "core" / "decision.py", "import pytest  # planted")
    l_torch = _plant(pkg / "loop" / "judge" / "gate.py", "import torch  # planted")
    l_git = _plant(pkg / "report" / "html.py", "import git  # planted")
    l_up = _plant(pkg / "store" / "ledger.py", "from pytest_ditar.loop.run import session  # planted")
    l_run = _plant(pkg / "loop" / "judge" / "record.py",
                   "import subprocess\nsubprocess.run(['git', 'status'])  # planted")
    l_cyc = _plant(pkg / "config" / "project.py", "import pytest_ditar.runtime.lanes  # planted")
    l_state = _plant(pkg / "runtime" / "lanes.py", "from pytest_ditar.store import ledger  # planted")
    l_core = _plant(pkg / "core" / "stats.py", "from pytest_ditar.interface import Request  # planted")

    res = lint_imports(tmp_path / "importlinter.toml", src)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    # Line numbers prove the copy (not the installed package) was analysed.
    for expected in (
        f"{PKG}.core.decision -> pytest (l.{l_pytest})",
        f"{PKG}.loop.judge.gate -> torch (l.{l_torch})",
        f"{PKG}.report.html -> git (l.{l_git})",
        f"{PKG}.store.ledger -> {PKG}.loop.run.session (l.{l_up})",
        f"{PKG}.config.project -> {PKG}.runtime.lanes (l.{l_cyc})",
        f"{PKG}.runtime.lanes -> {PKG}.store.ledger (l.{l_state})",  # the ignored import stays narrow
        f"{PKG}.core.stats -> {PKG}.interface (l.{l_core})",  # core imports nothing of the package
    ):
        assert expected in out, f"{expected!r} not reported:\n{out}"
    status = contract_status(out)
    for cid in ("layers", "runtime-no-state", "core-pure", "pytest-only-in-plugin", "ml-only-in-runtime-hardware",
                "no-gitpython"):
        assert status[cid] == "BROKEN", (cid, status, out)

    runners = git_runners(pkg)
    assert any(r.startswith(f"{PKG}/loop/judge/record.py:{l_run + 1}:") for r in runners), runners
    assert any("store <-> " in c or "<-> store" in c for c in subpackage_cycles(pkg)), subpackage_cycles(pkg)
    assert any(f"{PKG}.config.project" in c for c in module_cycles(pkg)), module_cycles(pkg)


def test_git_runner_check_sees_helpers_and_shell_strings(tmp_path: Path) -> None:
    pkg = tmp_path / PKG
    (pkg / "vcs").mkdir(parents=True)
    (pkg / "loop").mkdir()
    (pkg / "vcs" / "repo.py").write_text("import subprocess\nsubprocess.run(['git', 'status'])\n")
    (pkg / "loop" / "a.py").write_text(
        "import os, subprocess\nfrom subprocess import check_output as co\n"
        "os.system('git reset --hard')\n"          # 3
        "co(['/usr/bin/git', 'log'])\n"            # 4
        "def _run(c): return subprocess.run(c)\n"
        "_run(('git', 'commit'))\n"                # 6
        "subprocess.run(['pytest', '-q'])\n"       # 7: not git
        "import shutil; shutil.which('git')\n")    # 8: not a run
    found = git_runners(pkg)
    assert [f.split(": ")[0] for f in found] == [f"{PKG}/loop/a.py:{n}" for n in (3, 4, 6)], found
