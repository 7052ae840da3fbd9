"""`cls` once meant two classes (issue 51): the commit's claim and the cumulative class judged. They
are `claimed_class` and `judged_class` now (loop/run/classes.py), and no function parameter in the
package is named `cls` but a class method's first argument (a `@classmethod`, or `__new__`,
`__init_subclass__` and `__class_getitem__`, which Python makes class methods). The check also runs
on planted code, so a check that stopped seeing anything fails here."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[3] / "pytest_ditar"
IMPLICIT = {"__new__", "__init_subclass__", "__class_getitem__"}


def cls_parameters(source: str, filename: str = "<planted>") -> list[str]:
    """`file:line function` of every parameter named `cls` that is not a class method's first."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
        name = getattr(node, "name", "<lambda>")
        first_is_class = not isinstance(node, ast.Lambda) and (
            name in IMPLICIT or any(isinstance(d, ast.Name) and d.id == "classmethod" for d in node.decorator_list))
        found += [f"{filename}:{p.lineno} {name}" for i, p in enumerate(params)
                  if p.arg == "cls" and not (i == 0 and first_is_class)]
    return sorted(found, key=lambda hit: int(hit.split(":")[-1].split()[0]))


def test_no_parameter_is_named_cls_but_a_class_methods_first():
    found = [hit for path in sorted(PKG.rglob("*.py"))
             for hit in cls_parameters(path.read_text(), str(path.relative_to(PKG.parent)))]
    assert found == []


def test_the_check_sees_a_planted_cls_parameter():
    src = ("class A:\n"
           "    @classmethod\n"
           "    def ok(cls, x): ...\n"
           "    def __new__(cls): ...\n"
           "    @staticmethod\n"
           "    def bad(cls): ...\n"
           "    @classmethod\n"
           "    def worse(klass, cls): ...\n"
           "def audit(cls: str): ...\n"
           "f = lambda cls: cls\n")
    assert cls_parameters(src) == ["<planted>:6 bad", "<planted>:8 worse", "<planted>:9 audit", "<planted>:10 <lambda>"]
