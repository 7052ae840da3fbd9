"""The package's JSON Schemas (pytest_ditar/schemas/, shipped as package data), and validation of a
document against one with jsonschema (the test extra): what tests/conftest.py runs over every
document a test leaves behind, and what the schema tests call directly."""
from __future__ import annotations

import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

KINDS = ("verdict", "summary", "config", "doctor", "suite", "profile", "status", "compare", "search")


@cache
def schema(kind: str) -> dict[str, Any]:
    return json.loads((resources.files("pytest_ditar") / "schemas" / f"{kind}.schema.json").read_text())


@cache
def _validator(kind: str) -> Any:
    import jsonschema

    cls = jsonschema.Draft202012Validator
    cls.check_schema(schema(kind))
    return cls(schema(kind), format_checker=cls.FORMAT_CHECKER)


def available() -> bool:
    """jsonschema installed; CI (CI=true) installs the test extra, so there it must be."""
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        return False
    return True


def problems(doc: Any, kind: str) -> list[str]:
    """Every way `doc` breaks the `kind` schema, as "path: message" lines ([] where it validates)."""
    errors = sorted(_validator(kind).iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def validate(doc: Any, kind: str) -> None:
    found = problems(doc, kind)
    assert not found, f"{kind} document breaks pytest_ditar/schemas/{kind}.schema.json:\n" + "\n".join(found[:10])


def kind_of(path: Path) -> str | None:
    """Which schema a file the package wrote answers to: a run's summary.json, a --ditar-json
    document (the tests name theirs *.verdict.json) and a run's verdict.json; None for anything else."""
    if path.name == "summary.json" and path.parent.parent.name == "runs":
        return "summary"
    if path.name.endswith(".verdict.json") or (path.name == "verdict.json" and path.parent.parent.name == "runs"):
        return "verdict"
    return None
