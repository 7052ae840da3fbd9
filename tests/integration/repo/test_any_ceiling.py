"""`Any` in the package's types stays under a ceiling (issue 51): a record, a parameter or a result
gets a real type (a frozen dataclass or TypedDict for a JSON record, a Protocol for a duck-typed
parameter, `object` for a value only passed on), never `Any`.

Counted with ast, every `Any` token (`Any` or `typing.Any`) in a type position: a function's
parameters and return, an annotated assignment, a string annotation (parsed), a type alias's value
(`Json = dict[str, Any]` is the same Any under another name, so it counts where it is defined), a
`cast`'s type, a class's bases and a TypeVar's bound. The ceiling only goes down: lower
ANY_CEILING when a change removes some. The counter also runs on planted sources, so a counter that
stopped seeing a position fails here."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PKG = REPO / "pytest_ditar"
ANY_CEILING = 312


def _tokens(node: ast.AST | None) -> int:
    """Any tokens in a type expression, string annotations parsed ("dict[str, Any]")."""
    if node is None:
        return 0
    n = 0
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any" or isinstance(sub, ast.Attribute) and sub.attr == "Any":
            n += 1
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                n += _tokens(ast.parse(sub.value, mode="eval"))
            except SyntaxError:  # not a type expression (a docstring-like literal): its words only
                n += len(re.findall(r"\bAny\b", sub.value))
    return n


def _is_type_expr(node: ast.expr) -> bool:
    """A value that can only be a type (an alias's right-hand side), not a call or a literal."""
    return isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) or (
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr))


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def any_tokens(source: str) -> int:
    n = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                n += _tokens(arg.annotation) if arg is not None else 0
            n += _tokens(node.returns)
        elif isinstance(node, ast.AnnAssign):
            n += _tokens(node.annotation)
            if node.value is not None and "TypeAlias" in ast.unparse(node.annotation):
                n += _tokens(node.value)
        elif isinstance(node, ast.Assign) and _is_type_expr(node.value):
            n += _tokens(node.value)  # an alias: X = dict[str, Any]
        elif getattr(ast, "TypeAlias", None) and isinstance(node, getattr(ast, "TypeAlias")):
            n += _tokens(node.value)  # `type X = ...` (3.12)
        elif isinstance(node, ast.ClassDef):
            n += sum(_tokens(b) for b in node.bases)
        elif isinstance(node, ast.Call) and _call_name(node) == "cast" and node.args:
            n += _tokens(node.args[0])
        elif isinstance(node, ast.Call) and _call_name(node) in ("TypeVar", "NewType"):
            n += sum(_tokens(x) for x in node.args[1:]) + sum(_tokens(k.value) for k in node.keywords)
    return n


def package_count(pkg: Path = PKG) -> dict[str, int]:
    counts = {str(p.relative_to(pkg.parent)): any_tokens(p.read_text()) for p in sorted(pkg.rglob("*.py"))}
    return {k: v for k, v in counts.items() if v}


def test_the_counter_sees_every_type_position():
    planted = '''
from typing import Any, TypeAlias, TypeVar, cast
import typing
Json = dict[str, Any]
Either = int | Any
Named: TypeAlias = "list[Any]"
T = TypeVar("T", bound=Any)
def f(a: Any, *b: Any, c: "Any" = 1, **d: typing.Any) -> list[Any]:
    x: dict[str, Any] = {}
    return cast("list[Any]", x)
class C(dict[str, Any]):
    y: "tuple[Any, Any]"
not_a_type = "Any words in a string"
plain = 3
'''
    assert any_tokens(planted) == 14
    assert any_tokens("def f(a: object, b: 'dict[str, object]') -> None: ...\nAnything = int") == 0


def test_any_in_the_packages_types_stays_under_the_ceiling():
    counts = package_count()
    total = sum(counts.values())
    worst = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:8])
    assert total <= ANY_CEILING, (f"{total} Any tokens in the package's types (ceiling {ANY_CEILING}): give the new "
                                  f"ones real types (a dataclass, TypedDict, Protocol or object). Most: {worst}")


if __name__ == "__main__":
    for name, count in sorted(package_count().items(), key=lambda kv: -kv[1]):
        print(count, name)
