"""The package imports its own modules at the top of each module (docs/architecture.md).

An import of `pytest_ditar.*` (or a relative one) inside a function hides a module's dependencies
from its reader and moves an import error from load time to the first call. One stays only where
it must: start-up (plugin/hooks.py and plugin/activation.py run in every pytest start, ditar's or
not; cli/command.py is imported by every command) or a cycle, and it says why in a comment on its
line or the line above. At most MAX_IN_FUNCTION of them. The check also runs on a planted tree, so
a check that stopped seeing anything fails here."""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PKG = REPO / "pytest_ditar"
MAX_IN_FUNCTION = 30


def _own(node: ast.Import | ast.ImportFrom, package: str) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == package
    return any(a.name.split(".")[0] == package for a in node.names)


def in_function_imports(pkg: Path) -> list[tuple[str, int, bool]]:
    """(file relative to pkg's parent, line, commented) of every import of pkg's own modules that
    sits inside a function; commented: a comment on the statement's lines, or a line above it that
    is only a comment."""
    found = []
    for path in sorted(pkg.rglob("*.py")):
        source = path.read_text()
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
        comments = {t.start[0] for t in tokens}  # a comment on the line
        alone = {t.start[0] for t in tokens if t.line.lstrip().startswith("#")}  # a line that is only a comment

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if in_function and isinstance(child, (ast.Import, ast.ImportFrom)) and _own(child, pkg.name):
                    lines = range(child.lineno, (child.end_lineno or child.lineno) + 1)
                    commented = child.lineno - 1 in alone or bool(comments.intersection(lines))
                    found.append((str(path.relative_to(pkg.parent)), child.lineno, commented))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

        visit(ast.parse(source), False)
    return found


def test_the_package_imports_its_own_modules_at_the_top() -> None:
    found = in_function_imports(PKG)
    where = "\n".join(f"  {f}:{line}" for f, line, _ in found)
    assert len(found) <= MAX_IN_FUNCTION, (
        f"{len(found)} imports of pytest_ditar inside functions (at most {MAX_IN_FUNCTION}): move them to the "
        f"module's top\n{where}")
    bare = [f"  {f}:{line}" for f, line, commented in found if not commented]
    assert not bare, ("an import of pytest_ditar inside a function says why it is not at the module's top (a "
                      "comment on its line or the line above, e.g. `# start-up: ...`, `# cycle: ...`):\n"
                      + "\n".join(bare))


def test_the_count_sees_planted_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pytest_ditar"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text(
        "import os\n"
        "from pytest_ditar.sub import other  # at the top: not counted\n"
        "\n\n"
        "def f():\n"
        "    import json  # not ours: not counted\n"
        "    from pytest_ditar.core import stats\n"                      # 7: bare
        "    # cycle: other imports this module\n"
        "    from . import other\n"                                       # 9: commented above
        "\n"
        "    class C:\n"
        "        def g(self):\n"
        "            import pytest_ditar.loop.judge.gate  # start-up: the gate\n"  # 13: commented on its line
        "\n"
        "    async def h():\n"
        "        from pytest_ditar.cli import (\n"                        # 16: a comment inside the statement
        "            main,  # start-up: the parser\n"
        "        )\n"
        "\n"
        "\n"
        "class D:\n"
        "    from pytest_ditar.core import errors  # in a class body, not a function: not counted\n")
    assert in_function_imports(pkg) == [("pytest_ditar/sub/mod.py", 7, False), ("pytest_ditar/sub/mod.py", 9, True),
                                        ("pytest_ditar/sub/mod.py", 13, True), ("pytest_ditar/sub/mod.py", 16, True)]
