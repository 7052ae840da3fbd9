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
from typing import Any, Mapping, TypedDict

import pytest_ditar
from pytest_ditar.loop.integrity.hermetic import STARTUP_ENV, pinned_env, pinned_env_changes
from pytest_ditar.store.atomic import sha256_file

FIX = "or re-run `dit-ar baseline --force` if you changed it yourself"


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class ModelFile(TypedDict):
    sha256: str
    stat: list[int]  # size, mtime_ns, ctime_ns, inode


Entry = list[int | str]  # an imported file: size, mtime_ns, ctime_ns, inode, then its sha256 (or RECORD's hash)


def model_stamp(model_dir: Path) -> dict[str, ModelFile]:
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


def _loaded_files(repo_root: Path) -> list[str]:
    """The files this process runs: its interpreter, every module's file in sys.modules and every
    file mapped into its memory (the libraries the dynamic loader brought in), less the project's
    own (the fixed-path hashes and the content checks cover those) and the package's (above)."""
    import sys

    files = {os.path.realpath(sys.executable)}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and f:
            files.add(os.path.realpath(f))
    try:
        with open("/proc/self/maps") as fh:  # Linux: the native libraries, whoever loaded them
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and not parts[5].rstrip().endswith("(deleted)"):
                    files.add(parts[5].rstrip("\n"))
    except OSError:
        pass
    root, package = Path(repo_root).resolve(), Path(pytest_ditar.__file__).resolve().parent
    return sorted(f for f in files if os.path.isfile(f) and not f.startswith(("/dev/", "/proc/", "/sys/"))
                  and not Path(f).is_relative_to(package) and not _projects_own(Path(f), root))


def _projects_own(path: Path, root: Path) -> bool:
    """A file of the project (its conftest, its suites: the fixed paths' hashes and the guards hold
    them), not of a virtual environment kept inside it (`.venv/lib/.../site-packages`)."""
    if not path.is_relative_to(root):
        return False
    parts = path.relative_to(root).parts
    return "site-packages" not in parts and "dist-packages" not in parts




def _record_hashes(site_dir: Path, cache: dict[Path, dict[str, str]]) -> dict[str, str]:
    """{absolute path: sha256 hex} of every file the RECORDs of `site_dir`'s distributions list
    with a hash: pip wrote them at install, so a large library need not be read to be stamped."""
    import base64

    if site_dir not in cache:
        found: dict[str, str] = {}
        for record in site_dir.glob("*.dist-info/RECORD"):
            try:
                lines = record.read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                name, _, rest = line.partition(",")
                algo, _, digest = rest.partition(",")[0].partition("=")
                if algo == "sha256" and digest:
                    raw = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4))
                    found[os.path.normpath(os.path.join(site_dir, name))] = raw.hex()
        cache[site_dir] = found
    return cache[site_dir]


# what a gated run's pytest imports beside what the baseline did (`dit-ar baseline` runs without
# pytest): named as data, to be loaded and stamped, never called from here
JUDGE_MODULES = ("pytest", "pytest_ditar.plugin.hooks", "pytest_ditar.plugin.gateplugin",
                 "pytest_ditar.loop.judge.gate")


def _load_the_judge() -> None:
    """Import what a gated run's judge imports, so the stamp holds its files: pytest, the gate, and
    every installed pytest plugin (each starts in every pytest process)."""
    import importlib
    import importlib.metadata as md

    names = [*JUDGE_MODULES, *(ep.module for ep in md.entry_points(group="pytest11"))]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a broken plugin breaks pytest itself, which says so
            pass


def _entry(path: str, records: dict[Path, dict[str, str]]) -> Entry | None:
    try:
        stat = _stat(Path(path))
        parts = Path(path).parts
        for name in ("site-packages", "dist-packages"):  # an installed distribution's file: its RECORD's hash
            if name in parts:
                site_dir = Path(*parts[:len(parts) - parts[::-1].index(name)])
                ref = _record_hashes(site_dir, records).get(path)
                if ref:
                    return [*stat, ref]
        return [*stat, sha256_file(Path(path))]
    except OSError:
        return None


def closure_stamp(repo_root: Path) -> dict[str, Entry | None]:
    """{file: [size, mtime_ns, ctime_ns, inode, sha256]} of what the judge has imported and mapped
    (taken at the end of the baseline, whose judge has imported what a gated run's does), and of
    each Python source's cached bytecode, None where there was none: Python's loader takes a
    `.pyc` whose header matches its source, so a planted one is a changed module."""
    _load_the_judge()
    out: dict[str, Entry | None] = {}
    records: dict[Path, dict[str, str]] = {}
    for f in _loaded_files(repo_root):
        out[f] = _entry(f, records)
        if f.endswith(".py"):
            pyc = importlib.util.cache_from_source(f)
            out[pyc] = _entry(pyc, records) if os.path.isfile(pyc) else None
    return out


def _is_bytecode_of(pyc: str) -> bool:
    """Whether `pyc` holds exactly what its source compiles to (the interpreter may write one later)."""
    try:
        src = importlib.util.source_from_cache(pyc)
        code = marshal.loads(Path(pyc).read_bytes()[16:])
        return bool(code == compile(Path(src).read_bytes(), src, "exec", dont_inherit=True))
    except (OSError, ValueError, EOFError, TypeError, SyntaxError):
        return False


def closure_changes(recorded: Mapping[str, Any]) -> list[str]:
    """"<file> changed|removed|planted" against closure_stamp's record: by stat first (a write
    moves the ctime, which no unprivileged process sets back), by content where the stat moved."""
    out = []
    for path, want in recorded.items():
        exists = os.path.isfile(path)
        if want is None:
            if exists and not _is_bytecode_of(path):
                out.append(f"{path} planted (not the bytecode of its source: delete it)")
            continue
        if not exists:
            out.append(f"{path} removed")
            continue
        try:
            moved = _stat(Path(path)) != list(want[:4])
        except OSError:
            moved = True
        if moved and sha256_file(Path(path)) != want[4] and not (path.endswith(".pyc") and _is_bytecode_of(path)):
            out.append(f"{path} changed")
    return out


def before_pytest(manifest: Mapping[str, Any]) -> str | None:
    """The refusal for what loads into the judge's pytest before the gate can look: an installed
    pytest plugin added or removed, a stamped module changed (`dit-ar experiment` checks these
    before it starts pytest, the gate again). None when neither changed."""
    plugins = manifest.get("pytest_plugins")
    if isinstance(plugins, dict):
        found = plugin_changes(plugins)
        if found:
            return (f"python environment changed since the baseline: {_list(found)} (pytest loads every installed "
                    f"plugin into the judge): {_uninstall_hint(plugins)}, {FIX}")
    closure = manifest.get("import_closure")
    if isinstance(closure, dict):
        found = closure_changes(closure)
        if found:
            return closure_refusal(found)
    return None


def closure_refusal(found: list[str]) -> str:
    return (f"python environment changed since the baseline: {_list(found)} (a module or library the judge "
            f"loads): reinstall it (pip install --force-reinstall --no-deps <its distribution>), {FIX}")


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
        found = pinned_env_changes(pinned, STARTUP_ENV)
        if found:
            return (f"environment variable {_list(found)} since the baseline (it changes how torch and the libraries "
                    f"under it compute, in the judge and its workers): set it back, {FIX}")
    why = before_pytest(manifest)
    if why:
        return why
    env = manifest.get("environment")
    if env is not None:
        found = environment_changes(env, repo_root)
        if found:
            return (f"python environment changed since the baseline: {_list(found)} (a .pth or sitecustomize runs in "
                    f"every Python process, the judge's included): undo it, {FIX}")
    return None


def pytest_plugins() -> dict[str, str]:
    """{entry point name: "module (distribution)"} of every installed pytest plugin: pytest loads
    each into every pytest process, the judge's included, so one installed after the baseline is
    new code in the judge that no stamped file shows."""
    import importlib.metadata as md

    out = {}
    for ep in md.entry_points(group="pytest11"):
        dist = getattr(ep, "dist", None)
        out[ep.name] = f"{ep.value} ({dist.metadata['Name'] if dist is not None else '?'})"
    return dict(sorted(out.items()))


def plugin_changes(recorded: Mapping[str, str]) -> list[str]:
    now = pytest_plugins()
    out = [f"pytest plugin {k!r} = {now[k]} installed" for k in sorted(now.keys() - recorded.keys())]
    out += [f"pytest plugin {k!r} = {recorded[k]} removed" for k in sorted(recorded.keys() - now.keys())]
    out += [f"pytest plugin {k!r} now {now[k]} (was {recorded[k]})" for k in sorted(now.keys() & recorded.keys())
            if now[k] != recorded[k]]
    return out


def _uninstall_hint(recorded: Mapping[str, str]) -> str:
    added = [v for k, v in pytest_plugins().items() if k not in recorded]
    dists = sorted({v.rsplit("(", 1)[-1].rstrip(")") for v in added})
    return f"pip uninstall {' '.join(dists)}" if dists else "reinstall what was removed"


def stamp(model_dir: Path, repo_root: Path) -> dict[str, object]:
    """The manifest's keys: `model_files`, `environment`, `judge_env` (loop.integrity.hermetic's pinned
    variables), `import_closure` and `pytest_plugins`."""
    return {"model_files": model_stamp(model_dir), "environment": environment_stamp(repo_root),
            "judge_env": pinned_env(STARTUP_ENV), "import_closure": closure_stamp(repo_root),
            "pytest_plugins": pytest_plugins()}



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
