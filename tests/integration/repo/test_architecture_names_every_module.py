"""docs/architecture.md names every module of the package (issue 51): a maintainer new to the code
finds each one in its subpackage's row of the table "What each subpackage owns". A module the
table leaves out fails here, with the row it belongs in."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PKG = REPO / "pytest_ditar"
DOC = REPO / "docs/architecture.md"


def rows(doc: str) -> dict[str, str]:
    """The table's rows by their first cell's name (`core`, `loop.perf`, `interface.py`, ...)."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", doc, re.M)}


def unnamed(doc: str, pkg: Path) -> list[str]:
    table, out = rows(doc), []
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg)
        if p.stem in ("__init__", "__main__") or rel.parts[0] == "demo":
            continue  # a package's own file; demo's candidates are data (their row names the folder)
        key = "/".join(rel.parts) if len(rel.parts) == 1 else ".".join(rel.parts[:-1])
        row = table.get(key)
        if row is None:
            out.append(f"{'.'.join(rel.with_suffix('').parts)}: no row `{key}` in the table")
        elif len(rel.parts) > 1 and f"`{p.stem}`" not in row:  # a top-level module is its own row
            out.append(f"{'.'.join(rel.with_suffix('').parts)}: not named in the row `{key}`")
    return out


def test_the_architecture_names_every_module():
    missing = unnamed(DOC.read_text(), PKG)
    assert not missing, "docs/architecture.md's table leaves out:\n" + "\n".join(missing)


def test_the_check_sees_a_module_left_out(tmp_path):
    pkg = tmp_path / "pytest_ditar"
    for rel in ("core/stats.py", "core/new.py", "loop/run/session.py", "interface.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("")
    doc = "| `core` | rules | `stats` |\n| `loop.run` | the run | `session` (resources) |\n| `interface.py` | x | |\n"
    assert unnamed(doc, pkg) == ["core.new: not named in the row `core`"]
