"""Only the judge chooses the judge's code (issue 49): the project files a gated pytest would read,
held to the baseline commit before any process that could import them starts, and the judge's
own pytest configuration.

pytest reads its ini files (pytest.ini, .pytest.ini, tox.ini, setup.cfg, pyproject.toml: an
`addopts = -p module` imports that module) and every conftest.py on its way before any hook of a
plugin runs, and `python -m pytest` puts the project root first on `sys.path`. So `dit-ar
experiment`, `try` and `guard`, and a plain `pytest` that hands its gated run to the judge, first
hold the candidate to the baseline (`launch_refusal`): its commit's tree equals the baseline
commit's outside the mutable paths (`tree_changes`, two trees read from git's objects: no
checkout, index or filter), and the working tree holds nothing pytest or Python would read at the
root or under the suites folder that is not the baseline's, byte for byte (`stray_files`:
untracked, git-ignored and edited files alike). The judge's pytest then runs on a configuration
of its own (`judge_args`): an ini file it wrote outside the project (`write_judge_ini`), the
project root as rootdir, no conftest. No candidate code runs between the check and collection
(the candidate's first build is sent after the guards), and the sandbox keeps the repository
read-only to every worker, so the suites pytest collects are the baseline's.
"""
from __future__ import annotations

import configparser
import importlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from pytest_ditar.config.project import Config
from pytest_ditar.core.errors import DitarError
from pytest_ditar.loop.integrity.guards import is_mutable
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import trees

JUDGE_INI = "ditar-judge.ini"
# the files pytest takes its configuration from, in the order it looks for them
INI_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_INI_SECTION = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}
# what the root holds that pytest (a config) or Python (a module `python -m` finds first) reads
_READ_SUFFIXES = (".ini", ".cfg", ".toml", ".py", ".pyc", ".pyo", ".so", ".pth")
_SKIP = ("__pycache__", ".pytest_cache")  # bytecode the judge never loads (pytest_ditar's loader, stamps)
_JUDGE_KEYS = {"testpaths", "markers"}


def tree_changes(root: Path, base: str, rev: str, mutable_paths: Iterable[str]) -> list[str]:
    """Where `rev`'s tree differs from `base`'s outside `mutable_paths`, from git's objects alone:
    "<path> added" (a new file), "<path> modified" (another blob or mode), "<path> deleted"."""
    mutable = list(mutable_paths)
    a, b = trees.tree_modes(root, base), trees.tree_modes(root, rev)
    out = []
    for p in sorted(a.keys() | b.keys()):
        if is_mutable(p, mutable):
            continue
        out += [f"{p} added"] if p not in a else [f"{p} deleted"] if p not in b else \
            [f"{p} modified"] if a[p] != b[p] else []
    return out


def _read_at_root(root: Path, name: str) -> bool:
    if name.endswith(_READ_SUFFIXES) or name == "conftest.py":
        return True
    return (root / name / "__init__.py").is_file()  # a package `python -m` imports before the installed one


def stray_files(root: Path, base: str, mutable_paths: Iterable[str], suites: str) -> list[str]:
    """The working tree's files pytest or Python would read in a gated run that are not `base`'s
    by content, outside `mutable_paths`: at the root, configs (`*.ini`, `*.cfg`, `*.toml`), modules
    and packages; everything under the suites folder `suites` (its conftest.py and test modules).
    Untracked and git-ignored files count ("<path> added"), and so do edits ("modified") and
    deletions ("missing") of the baseline's."""
    mutable = list(mutable_paths)
    names = {n for n in os.listdir(root) if _read_at_root(root, n)}
    names |= {p for p in trees.tree_modes(root, base) if "/" not in p and _read_at_root(root, p)}
    under = sorted(n for n in names if not is_mutable(n, mutable) and n != ".git")
    under += [suites.strip("/")] if suites.strip("/") and not is_mutable(suites.strip("/"), mutable) else []
    return trees.content_changes(root, base, root, under=under, skip=_SKIP) if under else []


def baseline_commit(root: Path, state_dir: str, tag: str) -> str | None:
    """The commit the tag's baseline was taken on (its manifest's `git_sha`); None where there is no
    readable baseline (the gate then refuses, naming it)."""
    try:
        m = json.loads((TagPaths.of(root, state_dir, tag).baseline / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    sha = m.get("git_sha") if isinstance(m, dict) else None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha) else None


def launch_refusal(cfg: Config, tag: str, worktree: bool = True) -> str | None:
    """Why a gated run of the tag may not start on this tree (None: it may): HEAD's tree against the
    baseline commit's outside the mutable paths, then (`worktree`) the files pytest and Python read
    in the working tree. The one check every launcher makes before pytest starts (`dit-ar experiment`,
    `try`, `guard`, a plain `pytest` handing its run to the judge)."""
    base = baseline_commit(cfg.root, cfg.state_dir, tag)
    if base is None:
        return None
    mutable, suites = pinned_paths(cfg, base)
    b7, where = base[:7], ", ".join(mutable)
    try:
        found = tree_changes(cfg.root, base, "HEAD", mutable)
        stray = [] if found or not worktree else stray_files(cfg.root, base, mutable, suites)
    except DitarError as exc:
        return f"judge_tree: the tree cannot be read against the baseline {b7}: {exc}"
    why = ("pytest reads its ini files and conftest.py, and Python the root's modules, before any guard runs; "
           f"a gated run takes the baseline's files outside the mutable paths ({where})")
    if found:
        path, _, what = found[0].rpartition(" ")
        fix = (f"git rm -q -- {path} && git commit --amend --no-edit" if what == "added"
               else f"git checkout {b7} -- {path} && git commit --amend --no-edit")
        return (f"judge_tree: {path} {what} in HEAD against the baseline {b7}{_more(found)}: {why}; "
                f"take it out of the candidate ({fix}), or re-baseline with a new tag")
    if stray:
        path, _, what = stray[0].rpartition(" ")
        fix = f"rm -- {path}" if what == "added" else f"git checkout {b7} -- {path}"
        kind = "untracked or git-ignored" if what == "added" else what
        return (f"judge_tree: {path} is {kind} in the working tree against the baseline {b7}{_more(stray)}: "
                f"{why}; restore the baseline's ({fix})")
    return None


def pinned_paths(cfg: Config, base: str) -> tuple[list[str], str]:
    """The mutable paths and the suites folder as the baseline commit's own config file says (the
    config the baseline pinned, read from git's objects): a config that moved them since (another
    `--config`, or the file edited) cannot widen what the candidate may change, or point the judge's
    collection at the candidate's own files. The config in hand where the commit has none."""
    try:
        rel = Path(cfg.repo_config).resolve().relative_to(Path(cfg.root).resolve()).as_posix()
        data = json.loads(trees.file_at(cfg.root, base, rel) or "null")
    except (ValueError, OSError):
        data = None
    data = data if isinstance(data, dict) else {}
    mutable = data.get("mutable_paths", list(cfg.mutable_paths))
    suites = data.get("suites_dir", cfg.suites_dir)
    if not (isinstance(mutable, list) and all(isinstance(m, str) for m in mutable)):
        mutable = list(cfg.mutable_paths)
    return mutable, suites if isinstance(suites, str) else cfg.suites_dir


def _more(found: Sequence[str]) -> str:
    return f" (+{len(found) - 1} more)" if len(found) > 1 else ""


# ---- the judge's own pytest configuration ---------------------------------------------------------

def project_markers(root: Path, base: str | None) -> list[str]:
    """The markers the project's pytest config at `base` registers, read as data (never imported):
    the suites' own markers, which `--strict-markers` needs. One line each, or dropped."""
    if base is None:
        return []
    for name in INI_NAMES:
        text = trees.file_at(root, base, name)
        if text is None:
            continue
        raw: Any = None
        if name == "pyproject.toml":
            try:
                toml: Any = importlib.import_module("tomllib")
            except ImportError:  # Python 3.10: the suites' markers are then the gate's alone
                return []
            try:
                table = toml.loads(text).get("tool", {}).get("pytest", {}).get("ini_options")
            except (toml.TOMLDecodeError, AttributeError):
                return []
            if not isinstance(table, dict):
                continue  # pytest reads a pyproject.toml without the table as no config at all
            raw = table.get("markers", [])
        else:
            parser = configparser.RawConfigParser()
            try:
                parser.read_string(text)
            except configparser.Error:
                return []
            if not parser.has_section(_INI_SECTION[name]):
                continue
            raw = parser.get(_INI_SECTION[name], "markers", fallback="")
        lines = raw.splitlines() if isinstance(raw, str) else [m for m in raw if isinstance(m, str)] \
            if isinstance(raw, list) else []
        return [m.strip() for m in lines if m.strip() and m.isprintable()]
    return []


def judge_ini_text(suites: str, markers: Iterable[str] = ()) -> str:
    marks = "".join(f"\n    {m}" for m in markers if m.strip() and m.isprintable())
    return ("# written by pytest-ditar for one gated run: the judge's pytest configuration, never the project's\n"
            f"[pytest]\ntestpaths = {suites.strip('/')}\n" + (f"markers ={marks}\n" if marks else ""))


def write_judge_ini(cfg: Config, folder: Path, base: str | None) -> Path:
    """The judge's ini file in `folder` (the judge's, outside the project): the suites as testpaths
    and the markers of the baseline's pytest config; nothing that loads code."""
    path = Path(folder) / JUDGE_INI
    path.write_text(judge_ini_text(cfg.suites_dir, project_markers(cfg.root, base)))
    return path


def judge_args(ini: Path, root: Path) -> list[str]:
    """The options the judge starts its pytest with, first on its command line: its own ini, the
    project root as rootdir, no conftest (the root one only names the config, passed as
    --ditar-config)."""
    return ["-c", str(ini), f"--rootdir={Path(root).resolve()}", "--noconftest"]


def judge_started(args: Sequence[str], cfg: Config) -> list[str] | None:
    """`args` without the judge's options when they start with them (`judge_args`, its ini one the
    judge could have written: a `[pytest]` section of testpaths, the suites, and markers alone), so
    the rest is checked as the user's; None when they do not (a plain `pytest`)."""
    if len(args) < 4 or args[0] != "-c" or args[2] != f"--rootdir={Path(cfg.root).resolve()}" \
            or args[3] != "--noconftest":
        return None
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(Path(args[1]).read_text())
    except (OSError, UnicodeDecodeError, configparser.Error):
        return None
    if parser.sections() != ["pytest"] or not set(parser.options("pytest")) <= _JUDGE_KEYS \
            or parser.get("pytest", "testpaths", fallback="") != cfg.suites_dir.strip("/"):
        return None
    return list(args[4:])
