"""Running git hardened: the one place in the package that starts the `git` program.

It owns how a git command runs, not what it asks: the command line and environment that make
every command run no code the repository controls, and the runner that applies them
(`execute`, `git` and `git_status` for the usual case, `execute_bytes` for raw output,
`execute_fixed` for the reads that start no program whatever the config says). The other vcs
modules (`queries`, `branches`, `trees`) say what to ask git and call this module for every
command; none of them starts a process. A failure becomes a DitarError carrying git's own
stderr, one line for the user. (GitPython served as the runner until issue 26: its object API
covered a handful of reads, each a process of its own per call, so one runner of plain git is
the whole of it.)

The judge runs no code the repository controls. Every command here carries options that switch
off each program git would otherwise start on the judge's behalf from a config file or the
hooks directory (`_no_programs`): hooks of every kind, core.fsmonitor, the repository's filter
drivers, pagers, external diffs, signing programs, transports, auto gc. Command-line config
outranks every config file, so what `.git/config`, a `config.worktree` or an included file says
cannot turn them back on. Replace refs and grafts are off too: git's view of the commits the
judge names is the objects themselves. `judge_env` carries the same switches as environment
config, for a judge process in which other code runs git. Where the repository is
(`find_repo`) and what its config says (`config_entries`) live here because the runner needs
both before it runs anything.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from pytest_ditar.core.errors import DitarError

# ---- the judge runs no repository-controlled code ------------------------------------------------
# Config keys that name a program git runs, pinned on every command line (git-config(1), githooks(5)).
_NO_PROGRAMS = (
    "core.hooksPath=/dev/null",  # no hook: post-checkout, reference-transaction, post-index-change, pre-commit, ...
    "core.fsmonitor=false",  # no fsmonitor program on a command that reads the index (status, reset, worktree add)
    "core.useBuiltinFSMonitor=false",  # its older spelling (no daemon either)
    "core.sshCommand=",
    "core.askPass=",
    "credential.helper=",  # an empty value clears the list of helpers
    "protocol.allow=never",  # no transport at all: the judge never fetches or pushes
    "commit.gpgSign=false",  # commit, commit-tree: no signing program
    "tag.gpgSign=false",
    "log.showSignature=false",  # log: no verifying program
    "gc.auto=0",  # no `git gc --auto` (its pre-auto-gc hook) after a commit or an update
    "maintenance.auto=false",
)
# Every hook event (githooks(5)): git >= 2.54 also runs hooks named in config (hook.<name>.command
# with hook.<name>.event); `hook.<event>.enabled=false` switches an event's off where git has it,
# and each configured name found is switched off by its own `hook.<name>.enabled` (_no_programs).
_HOOK_EVENTS = ("applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
                "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
                "pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
                "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
                "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist",
                "p4-pre-submit", "post-index-change")
_GLOBAL_OPTIONS = ("--no-pager", "--no-replace-objects")
_FIXED = [*_GLOBAL_OPTIONS, *(a for kv in (*_NO_PROGRAMS, *(f"hook.{e}.enabled=false" for e in _HOOK_EVENTS))
                              for a in ("-c", kv))]
# Replace refs (refs/replace/*) and grafts would let the repository substitute another commit or
# tree for the one the judge names: off (GIT_GRAFT_FILE names a file that cannot exist).
_ENV = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_GRAFT_FILE": os.path.join(os.devnull, "grafts"),
        "GIT_TERMINAL_PROMPT": "0"}
REPOSITORY_SCOPES = ("local", "worktree")  # what the repository's own files say (include.path'd files included)
_FILTER_KEYS = ("clean", "smudge", "process")


@dataclass(frozen=True)
class ConfigEntry:
    scope: str  # system, global, local, worktree, command
    origin: str  # the file it came from, as git names it (file:<path>)
    key: str  # section.[subsection.]name, section and name lower-cased by git
    value: str | None  # None: a key without `=` (boolean true)


# ---- the runner: every git process of the package starts in `_run` ------------------------------

def _run(cwd: Path, cmd: list[str], data: bytes | None = None) -> tuple[int, bytes, bytes]:
    """One git process in `cwd` with the judge's environment switches; (status, stdout, stderr).
    The package's one call that starts the git program: every other function here builds on it.
    A folder that does not exist, or no git at all, is git's failure too (status 128)."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env={**os.environ, **_ENV}, input=data if data is not None else b"",
                           capture_output=True, check=False)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        return 128, b"", str(exc).encode()
    return p.returncode, p.stdout, p.stderr


def _text(raw: bytes, keep_newline: bool = False) -> str:
    """git's output as text, its last newline dropped unless kept (names that are not UTF-8
    survive as escapes)."""
    out = raw.decode("utf-8", "surrogateescape")
    return out[:-1] if out.endswith("\n") and not keep_newline else out


def config_entries(cwd: Path) -> list[ConfigEntry]:
    """Every config entry git sees in `cwd` (`git config --list` with scope and origin); reading
    config runs no program. [] when git cannot list it (the command that follows then fails on
    the same config, saying why)."""
    status, raw, _ = _run(cwd, ["git", *_FIXED, "config", "--list", "--show-scope", "--show-origin", "-z"])
    per = 3
    if status != 0:  # a git before 2.26 (no --show-scope): every entry is taken for the repository's
        status, raw, _ = _run(cwd, ["git", *_FIXED, "config", "--list", "-z"])
        per = 1
    out = _text(raw)
    if status != 0:
        return []
    fields = out.split("\0")
    out_entries = []
    for i in range(0, len(fields) - per + 1, per):
        if not fields[i + per - 1]:
            continue
        key, nl, value = fields[i + per - 1].partition("\n")
        scope, origin = (fields[i], fields[i + 1]) if per == 3 else ("unknown", "")
        out_entries.append(ConfigEntry(scope, origin, key, value if nl else None))
    return out_entries


def _no_programs(entries: Iterable[ConfigEntry]) -> list[str]:
    """`-c` options that switch off what config names by a name of its choosing: the filter drivers
    of the repository's own config (clean, smudge and process set to nothing: git then runs none;
    the user's own drivers, git-lfs say, stay on) and every configured hook, whoever named it."""
    filters, hooks = set(), set()
    for e in entries:
        if e.scope == "command":  # ours (and the user's own `git -c`), not a file's
            continue
        section, _, rest = e.key.partition(".")
        sub, _, _name = rest.rpartition(".")
        if not sub:
            continue
        if section == "filter" and e.scope in (*REPOSITORY_SCOPES, "unknown"):
            filters.add(sub)
        elif section == "hook":
            hooks.add(sub)
    for name in filters | hooks:
        if "=" in name or "\n" in name:
            raise DitarError(f"git config names a filter or hook {name!r} that the judge cannot switch off "
                             "on git's command line: remove it from the repository's config")
    out = []
    for d in sorted(filters):
        out += [a for k in _FILTER_KEYS for a in ("-c", f"filter.{d}.{k}=")] + ["-c", f"filter.{d}.required=false"]
    for h in sorted(hooks):
        out += ["-c", f"hook.{h}.enabled=false"]
    return out


def execute(cwd: Path, args: Iterable[str], data: bytes | None = None,
            keep_newline: bool = False) -> tuple[int, str, str]:
    """`git <args>` in `cwd` with every repository-controlled program off; (status, stdout, stderr)
    as text, each without its last newline (stdout's kept where asked)."""
    status, out, err = execute_bytes(cwd, args, data)
    return status, _text(out, keep_newline), err


def execute_bytes(cwd: Path, args: Iterable[str], data: bytes | None = None) -> tuple[int, bytes, str]:
    """`execute` with stdout as git wrote it, bytes (blobs are not text, and their last newline is
    theirs); stderr as text without its last newline."""
    status, out, err = _run(cwd, ["git", *_FIXED, *_no_programs(config_entries(cwd)), *args], data)
    return status, out, _text(err)


def execute_fixed(cwd: Path, args: Iterable[str]) -> tuple[int, str]:
    """(status, stdout as text) of `git <args>` in `cwd` with the fixed switches only, the
    repository's config not read first: for a read that starts no program whatever the config
    says (rev-parse), one process instead of two."""
    status, out, _ = _run(cwd, ["git", *_FIXED, *args])
    return status, _text(out)


# ---- where the repository is, and the commands run in it ----------------------------------------

@dataclass(frozen=True)
class RepoPaths:
    """Where a repository's parts are, as git itself finds them from a folder inside it."""
    toplevel: Path | None  # the working tree (None: a bare repository)
    git_dir: Path  # this checkout's git directory (a linked worktree's own)
    common_dir: Path  # what its worktrees share: objects, refs, hooks, info/exclude


def find_repo(root: Path) -> RepoPaths | None:
    """The repository holding `root` (git's own discovery, parent folders included); None where
    there is none. Reading where it is runs no program."""
    ask = ["git", *_FIXED, "rev-parse", "--absolute-git-dir", "--git-common-dir"]
    status, raw, _ = _run(Path(root), [*ask, "--show-toplevel"])
    if status != 0:  # a bare repository has no working tree to show
        status, raw, _ = _run(Path(root), ask)
        if status != 0:
            return None
    git_dir, common, *rest = _text(raw).splitlines()
    top = Path(rest[0]) if rest and rest[0] else None
    common_dir = Path(common) if os.path.isabs(common) else Path(os.path.abspath(Path(root) / common))
    return RepoPaths(top, Path(git_dir), common_dir)


def git(root: Path, *args: str, what: str | None = None, data: bytes | None = None,
        keep_newline: bool = False) -> str:
    """stdout of `git <args>` in the repository holding `root` (`data` on its stdin).

    DitarError "<what> failed: <git's stderr>" when there is no repository or git fails."""
    status, out, err = git_status(root, args, what=what, data=data, keep_newline=keep_newline)
    if status != 0:  # some refusals ("nothing to commit") are printed on stdout
        raise DitarError(f"{what or 'git ' + ' '.join(args)} failed: {(err or out).strip()}")
    return out


def git_status(root: Path, args: Iterable[str], what: str | None = None, data: bytes | None = None,
               keep_newline: bool = False) -> tuple[int, str, str]:
    """`execute` in the repository holding `root`; DitarError where there is none."""
    return execute(_top(root, what or "git " + " ".join(args)), list(args), data, keep_newline)


def _top(root: Path, what: str) -> Path:
    """Where a command on the repository holding `root` runs: the top of its working tree, where
    paths on the command line and in the output are rooted. A folder with its own `.git` (the
    checkout's folder or a worktree's file) is one, without asking git; DitarError where there is
    no repository."""
    if os.path.lexists(os.path.join(root, ".git")):
        return Path(root)
    repo = find_repo(root)
    if repo is None:
        raise DitarError(f"{what} failed: {root} is not a git repository")
    return repo.toplevel or repo.git_dir


# ---- the same switches for git that other code starts -------------------------------------------

def judge_env(root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) plus every switch of `execute` as
    environment config (GIT_CONFIG_COUNT, git >= 2.31), for a judge process in which code other
    than this module runs git too: pytest-benchmark runs plain `git describe --dirty` and `git
    show` while it adds its options, before any hook of ours. Git started by anything in that
    process (and its children) then runs no repository code either. The repository's filter
    drivers are read now: one added later is switched off by `execute`'s own options only."""
    env = dict(os.environ if base is None else base)
    pairs = [*_NO_PROGRAMS, *(f"hook.{e}.enabled=false" for e in _HOOK_EVENTS)]
    if find_repo(root) is not None:
        pairs += _no_programs(config_entries(root))[1::2]
    try:
        n = max(0, int(env.get("GIT_CONFIG_COUNT") or 0))
    except ValueError:
        n = 0
    for i, kv in enumerate(pairs, n):
        env[f"GIT_CONFIG_KEY_{i}"], _, env[f"GIT_CONFIG_VALUE_{i}"] = kv.partition("=")
    env["GIT_CONFIG_COUNT"] = str(n + len(pairs))
    return {**env, **_ENV}
