"""What the judge trusts outside the repository, stamped by the baseline (issue 24): the model's
files and the Python environment the judge imports.

- `model`: every file of the suite's model directory, its size and sha256. A weight changed
  after the baseline would make the next honest candidate fail its quality contracts against
  outputs of the old weights, and the ledger would blame it: a gated run is REFUSED instead
  ("model cache changed"). The check is by stat first (size, mtime, ctime, inode: a write moves
  the ctime, which no unprivileged process can set back) and by content only for a file whose
  stat moved, so an unchanged cache costs a few system calls.
- `environment`: every `.pth` file of the interpreter's site directories (each one runs code in
  every Python process, the judge's included), `sitecustomize` and `usercustomize` where they
  exist, and the package's own files where it is installed outside the repository (inside it,
  the fixed paths cover them). Changed, added or removed -> REFUSED naming the file.
- `bytecode`: the package's `__init__` bytecode, the one file the judge's loader cannot cover
  (pytest_ditar/__init__.py), must be what its source compiles to.
"""
from __future__ import annotations

import importlib.util
import marshal
import os
import site
from pathlib import Path
from typing import Any, Mapping

import pytest_ditar
from pytest_ditar.store.atomic import sha256_file

FIX = "or re-run `dit-ar baseline --force` if you changed it yourself"


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def model_stamp(model_dir: Path) -> dict[str, Any]:
    """{relative path: {"sha256", "stat"}} of every file in `model_dir`."""
    root = Path(model_dir)
    return {f.relative_to(root).as_posix(): {"sha256": sha256_file(f), "stat": _stat(f)}
            for f in sorted(root.rglob("*")) if f.is_file()}


def model_changes(recorded: Mapping[str, Any], model_dir: Path) -> list[str]:
    """"<file> changed|added|removed" for the model directory against `recorded`."""
    root = Path(model_dir)
    now = {f.relative_to(root).as_posix(): f for f in root.rglob("*") if f.is_file()} if root.is_dir() else {}
    out = [f"{rel} removed" for rel in sorted(recorded.keys() - now.keys())]
    out += [f"{rel} added" for rel in sorted(now.keys() - recorded.keys())]
    for rel in sorted(recorded.keys() & now.keys()):
        want = recorded[rel]
        if _stat(now[rel]) != list(want.get("stat", ())) and sha256_file(now[rel]) != want.get("sha256"):
            out.append(f"{rel} changed")
    return out


def _site_dirs() -> list[Path]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        dirs.append(site.getusersitepackages())
    return sorted({Path(d).resolve() for d in dirs if os.path.isdir(d)})


def _package_files(repo_root: Path) -> list[Path]:
    here = Path(pytest_ditar.__file__).resolve().parent
    if here.is_relative_to(Path(repo_root).resolve()):
        return []  # an editable install in the project: the fixed paths cover it
    return sorted(f for f in here.rglob("*") if f.is_file() and "__pycache__" not in f.parts)


def environment_stamp(repo_root: Path) -> dict[str, str]:
    """{path: sha256} of the files every Python process of the judge runs or imports first."""
    files: list[Path] = [p for d in _site_dirs() for p in sorted(d.glob("*.pth")) if p.is_file()]
    for name in ("sitecustomize", "usercustomize"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            files.append(Path(spec.origin))
    files += _package_files(repo_root)
    return {str(f): sha256_file(f) for f in files}


def environment_changes(recorded: Mapping[str, str], repo_root: Path) -> list[str]:
    now = environment_stamp(repo_root)
    out = [f"{p} added" for p in sorted(now.keys() - recorded.keys())]
    out += [f"{p} changed" for p in sorted(recorded.keys() & now.keys()) if now[p] != recorded[p]]
    out += [f"{p} removed" for p in sorted(recorded.keys() - now.keys())]
    return out


def init_bytecode_problem() -> str | None:
    """The package's `__init__` bytecode beside its source, when it is not its source's code."""
    src = Path(pytest_ditar.__file__)
    pyc = Path(importlib.util.cache_from_source(str(src)))
    if not pyc.is_file():
        return None
    try:
        code = marshal.loads(pyc.read_bytes()[16:])
    except (OSError, EOFError, ValueError, TypeError):
        code = None
    if code == compile(src.read_bytes(), str(src), "exec", dont_inherit=True):
        return None
    return f"{pyc} is not the bytecode of {src.name} (planted?): delete it (rm {pyc})"


def _list(found: list[str]) -> str:
    return ", ".join(found[:3]) + (f" (+{len(found) - 3} more)" if len(found) > 3 else "")


def refusal(manifest: Mapping[str, Any], model_dir: Path | None, repo_root: Path) -> str | None:
    """Why a gated run may not start: the model or the environment is not what the baseline
    stamped, or the package's first bytecode is not its own (None when all hold, or for what an
    older baseline did not stamp)."""
    problem = init_bytecode_problem()
    if problem:
        return f"judge bytecode: {problem}"
    recorded = manifest.get("model_files")
    if recorded is not None and model_dir is not None:
        found = model_changes(recorded, model_dir)
        if found:
            return (f"model cache changed since the baseline: {_list(found)} in {model_dir}: restore the model the "
                    f"baseline used (a random-init model is rebuilt when its folder is deleted), {FIX}")
    pinned = manifest.get("judge_env")
    if pinned is not None:
        from pytest_ditar.loop.hermetic import STARTUP_ENV, pinned_env_changes

        found = pinned_env_changes(pinned, STARTUP_ENV)
        if found:
            return (f"environment variable {_list(found)} since the baseline (it changes how torch and the libraries "
                    f"under it compute, in the judge and its workers): set it back, {FIX}")
    env = manifest.get("environment")
    if env is not None:
        found = environment_changes(env, repo_root)
        if found:
            return (f"python environment changed since the baseline: {_list(found)} (a .pth or sitecustomize runs in "
                    f"every Python process, the judge's included): undo it, {FIX}")
    return None


def stamp(model_dir: Path, repo_root: Path) -> dict[str, Any]:
    """The manifest's keys: `model_files`, `environment` and `judge_env` (loop.hermetic's pinned variables)."""
    from pytest_ditar.loop.hermetic import STARTUP_ENV, pinned_env

    return {"model_files": model_stamp(model_dir), "environment": environment_stamp(repo_root),
            "judge_env": pinned_env(STARTUP_ENV)}



_NOT_PROJECT = {"node_modules", "site-packages", "__pypackages__"}


def drop_rewrite_caches(root: Path) -> list[Path]:
    """Remove pytest's assertion-rewrite caches (`__pycache__/*-pytest-*.pyc`) under the project
    `root`, before pytest loads a conftest: pytest loads such a file when its header matches the
    source's size and mtime, which a planted one can copy. pytest writes them again from source in
    this run. Virtual environments and hidden folders are not walked."""
    dropped: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _NOT_PROJECT
                   and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))]
        if os.path.basename(folder) != "__pycache__":
            continue
        for name in files:
            if "-pytest-" in name and name.endswith(".pyc"):
                path = Path(folder) / name
                try:
                    path.unlink()
                    dropped.append(path)
                except OSError:
                    pass
    return dropped
