"""Git operations, through the `git` program. The only module of the package that runs git.

Every command goes through one runner (`_execute`, and `_git` for the usual case): porcelain
(status, diff --name-only, worktree, reset --keep), the reads (rev-parse, symbolic-ref) and the
plumbing of the state's backup ref (hash-object, mktree, commit-tree, update-ref, cat-file). A
failure becomes a DitarError carrying git's own stderr, one line for the user. (GitPython served
as the runner until issue 26: its object API covered a handful of reads, each a process of its
own per call, so one runner of plain git is the whole of it.)

The judge runs no code the repository controls. Every command here carries options that switch
off each program git would otherwise start on the judge's behalf from a config file or the
hooks directory (`_no_programs`): hooks of every kind, core.fsmonitor, the repository's filter
drivers, pagers, external diffs, signing programs, transports, auto gc. Command-line config
outranks every config file, so what `.git/config`, a `config.worktree` or an included file says
cannot turn them back on. Replace refs and grafts are off too: git's view of the commits the
judge names is the objects themselves.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_ditar.core.errors import DitarError

# ---- the judge runs no repository-controlled code ----------------------------------------------
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


def _run(cwd: Path, cmd: list[str], data: bytes | None = None) -> tuple[int, bytes, bytes]:
    """One git process in `cwd` with the judge's environment switches; (status, stdout, stderr).
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


def _config_entries(cwd: Path) -> list[ConfigEntry]:
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


def judge_env(root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) plus every switch of `_execute` as
    environment config (GIT_CONFIG_COUNT, git >= 2.31), for a judge process in which code other
    than this module runs git too: pytest-benchmark runs plain `git describe --dirty` and `git
    show` while it adds its options, before any hook of ours. Git started by anything in that
    process (and its children) then runs no repository code either. The repository's filter
    drivers are read now: one added later is switched off by `_execute`'s own options only."""
    env = dict(os.environ if base is None else base)
    pairs = [*_NO_PROGRAMS, *(f"hook.{e}.enabled=false" for e in _HOOK_EVENTS)]
    if _repo(root) is not None:
        pairs += _no_programs(_config_entries(root))[1::2]
    try:
        n = max(0, int(env.get("GIT_CONFIG_COUNT") or 0))
    except ValueError:
        n = 0
    for i, kv in enumerate(pairs, n):
        env[f"GIT_CONFIG_KEY_{i}"], _, env[f"GIT_CONFIG_VALUE_{i}"] = kv.partition("=")
    env["GIT_CONFIG_COUNT"] = str(n + len(pairs))
    return {**env, **_ENV}


def _label(repo: _Repo, path: Path) -> str:
    """How the user knows a file of the repository's git directory: `.git/config` for the main
    checkout's own, else its absolute path (a linked worktree's common directory, an include)."""
    path = Path(os.path.abspath(path))
    top = repo.toplevel
    if top is not None and path.is_relative_to(top):
        return path.relative_to(top).as_posix()
    return str(path)


def repository_config(root: Path) -> list[tuple[str, str, str | None]]:
    """(file, key, value) of every entry of the repository's own config, as git reads it: its
    `config`, a worktree's `config.worktree` and the files they include (the user's and the
    system's config are theirs, not the repository's). [] outside a repository."""
    repo = _repo(root)
    if repo is None:
        return []
    out = []
    for e in _config_entries(root):
        if e.scope in REPOSITORY_SCOPES and e.origin.startswith("file:"):
            origin = e.origin[len("file:"):]
            where = Path(origin) if os.path.isabs(origin) else (repo.toplevel or repo.git_dir) / origin
            out.append((_label(repo, where), e.key, e.value))
    return out


def hook_files(root: Path) -> dict[str, Path]:
    """Every file in the repository's hooks directory (`.git/hooks`, shared by its worktrees), by
    the name the user knows it by; {} outside a repository."""
    repo = _repo(root)
    if repo is None:
        return {}
    hooks = repo.common_dir / "hooks"
    out = {}
    for folder, dirs, files in os.walk(hooks):
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            p = Path(folder) / name
            out[_label(repo, p)] = p
    return out


def _execute(cwd: Path, args: Iterable[str], data: bytes | None = None,
             keep_newline: bool = False) -> tuple[int, str, str]:
    """`git <args>` in `cwd` with every repository-controlled program off; (status, stdout, stderr)
    as text, each without its last newline (stdout's kept where asked)."""
    status, out, err = _run(cwd, ["git", *_FIXED, *_no_programs(_config_entries(cwd)), *args], data)
    return status, _text(out, keep_newline), _text(err)


@dataclass(frozen=True)
class _Repo:
    """Where a repository's parts are, as git itself finds them from a folder inside it."""
    toplevel: Path | None  # the working tree (None: a bare repository)
    git_dir: Path  # this checkout's git directory (a linked worktree's own)
    common_dir: Path  # what its worktrees share: objects, refs, hooks, info/exclude


def _repo(root: Path) -> _Repo | None:
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
    return _Repo(top, Path(git_dir), common_dir)


def git_dirs(root: Path) -> tuple[Path, ...]:
    """The git folders of the repository holding `root`: its own and the one its worktrees share."""
    repo = _repo(root)
    return () if repo is None else tuple(dict.fromkeys((repo.git_dir.resolve(), repo.common_dir.resolve())))


def _git(root: Path, *args: str, what: str | None = None, data: bytes | None = None,
         keep_newline: bool = False) -> str:
    """stdout of `git <args>` in the repository holding `root` (`data` on its stdin).

    DitarError "<what> failed: <git's stderr>" when there is no repository or git fails."""
    status, out, err = _git_status(root, args, what=what, data=data, keep_newline=keep_newline)
    if status != 0:  # some refusals ("nothing to commit") are printed on stdout
        raise DitarError(f"{what or 'git ' + ' '.join(args)} failed: {(err or out).strip()}")
    return out


def _git_status(root: Path, args: Iterable[str], what: str | None = None, data: bytes | None = None,
                keep_newline: bool = False) -> tuple[int, str, str]:
    """`_execute` in the repository holding `root`; DitarError where there is none."""
    return _execute(_top(root, what or "git " + " ".join(args)), list(args), data, keep_newline)


def _top(root: Path, what: str) -> Path:
    """Where a command on the repository holding `root` runs: the top of its working tree, where
    paths on the command line and in the output are rooted. A folder with its own `.git` (the
    checkout's folder or a worktree's file) is one, without asking git; DitarError where there is
    no repository."""
    if os.path.lexists(os.path.join(root, ".git")):
        return Path(root)
    repo = _repo(root)
    if repo is None:
        raise DitarError(f"{what} failed: {root} is not a git repository")
    return repo.toplevel or repo.git_dir


def _head(root: Path) -> tuple[str, str | None] | None:
    """HEAD's commit and its first parent; None before the first commit."""
    try:
        line = _git(root, "log", "-1", "--format=%H %P", "HEAD").split()
    except DitarError:
        return None
    return (line[0], line[1] if len(line) > 1 else None) if line else None


def _branch(root: Path) -> str | None:
    """The branch HEAD is on; None when detached."""
    try:
        ref = _git(root, "symbolic-ref", "-q", "HEAD").strip()
    except DitarError:
        return None
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None


@dataclass(frozen=True)
class RepoState:
    is_repo: bool
    branch: str | None  # None when detached or not a repo
    head: str | None
    parent: str | None
    dirty_paths: tuple[str, ...]  # tracked changes and untracked-not-ignored files
    toplevel: Path | None
    untracked: tuple[str, ...] = ()  # the untracked-not-ignored part of dirty_paths


def state(root: Path) -> RepoState:
    # one rev-parse for the working tree, HEAD, its parents and the branch (it runs no program)
    status, raw, _ = _run(Path(root), ["git", *_FIXED, "rev-parse", "--show-toplevel", "HEAD", "HEAD^@",
                                       "--symbolic-full-name", "HEAD"])
    lines = _text(raw).splitlines()
    if status != 0 or len(lines) < 3:  # no repository, a bare one, or no commits yet
        repo = _repo(root)
        return RepoState(repo is not None, None, None, None, (), repo.toplevel if repo else None)
    top, head, parents, ref = Path(lines[0]), lines[1], lines[2:-1], lines[-1]
    branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
    entries = _status(top)
    return RepoState(True, branch, head, parents[0] if parents else None, tuple(p for _, p in entries), top,
                     tuple(p for code, p in entries if code == "??"))


def _status(root: Path) -> list[tuple[str, str]]:
    """Porcelain status as (two-letter code, path): tracked changes and untracked, not ignored files."""
    out = _git(root, "status", "--porcelain", "--untracked-files=all")
    return [(line[:2], line[3:]) for line in out.splitlines() if line.strip()]


def dirty_paths(root: Path) -> list[str]:
    """Porcelain status: tracked modifications and untracked files that are not ignored."""
    return [p for _, p in _status(root)]


def commit_info(root: Path, project: str | None = None) -> dict[str, Any]:
    """What pytest-benchmark records about the code it timed, in its own keys (its
    `get_commit_info`, without running plain git): id, time, author_time, dirty (tracked changes),
    project (the origin's name, else the folder's), branch."""
    st = state(root)
    info: dict[str, Any] = {"id": "unversioned", "time": None, "author_time": None, "dirty": False,
                            "project": project or Path(root).resolve().name, "branch": "(unknown)"}
    if not st.is_repo or not st.head:
        return info
    try:
        times: list[str | None] = list(_git(root, "log", "-1", "--format=%cI%n%aI", st.head).splitlines()) or [None]
    except DitarError:
        times = [None]
    origin = next((v or "" for _, k, v in repository_config(root) if k == "remote.origin.url"), "")
    names = [p for p in re.split(r"[/:\s\\]|\.git", origin) if p]
    return {**info, "id": st.head, "time": times[0], "author_time": times[-1],
            "dirty": any(p not in st.untracked for p in st.dirty_paths),
            "project": project or (names[-1] if names else Path(st.toplevel or root).name),
            "branch": st.branch or "(detached head)"}


def require_clean_repo(root: Path, ignore: Iterable[str]) -> RepoState:
    """The state of a repository with a commit and a clean tree, after git-ignoring `ignore`.

    What `dit-ar init` needs before it branches: the state directory ignored first, so it never
    counts as an untracked change."""
    st = state(root)
    if not st.is_repo or not st.head:
        raise DitarError(f"{root}: not a git repository with a commit (git init && git add -A && git commit first)")
    ensure_ignored(root, ignore)
    st = state(root)
    if st.dirty_paths:
        raise DitarError(f"{root}: the tree is not clean ({', '.join(st.dirty_paths[:3])}); commit or stash first")
    return st


def changed_files(root: Path, base: str, head: str = "HEAD") -> list[str]:
    out = _git(root, "diff", "--no-ext-diff", "--no-textconv", "--name-only", base, head,
               what=f"git diff {base}..{head}")
    return [p for p in out.splitlines() if p]


def is_ancestor(root: Path, ancestor: str, head: str = "HEAD") -> bool:
    """False also when either revision is unknown: an unprovable ancestry fails the guard."""
    try:
        _git(root, "merge-base", "--is-ancestor", ancestor, head)
    except DitarError:
        return False
    return True


def commit_message(root: Path, rev: str = "HEAD") -> str:
    """The full message of `rev`; "" when there is none (no repository, no commit)."""
    try:
        return _git(root, "log", "-1", "--format=%B", rev)
    except DitarError:
        return ""


def diff_patch(root: Path, base: str, head: str) -> str:
    """`git format-patch --stdout base..head`, byte for byte (a patch needs its last newline)."""
    try:
        return _git(root, "format-patch", "--no-ext-diff", "--no-textconv", "--stdout", f"{base}..{head}",
                    keep_newline=True)
    except DitarError:
        return ""


def revert_to_parent(root: Path, expected_head: str) -> str:
    """`git reset --keep HEAD^`, only if HEAD is still the candidate commit; returns the parent.

    --keep, never --hard: uncommitted changes and untracked files survive, and where a local
    change sits in a file the candidate commit touches, git refuses and so does this (DitarError
    saying how to finish by hand) instead of overwriting it."""
    if _repo(root) is None:
        raise DitarError(f"{root}: not a git repository; nothing to revert")
    head, parent = _head(root) or ("", None)
    if head != expected_head:
        raise DitarError(f"HEAD moved during the run ({expected_head[:7]} -> {head[:7] or '(none)'}); not reverting")
    if not parent:
        raise DitarError("the candidate is the root commit; not reverting")
    status, out, err = _git_status(root, ["reset", "-q", "--keep", parent])
    if status != 0:
        touched = set(changed_files(root, parent, head))
        local = [p for p in dirty_paths(root) if p in touched]
        if local:
            raise DitarError(f"uncommitted changes in files the candidate commit touches ({', '.join(local[:3])}): "
                             f"save them, then `git reset --keep {parent[:7]}` finishes the revert")
        said = (err or out).strip().splitlines()
        raise DitarError(f"git reset --keep {parent[:7]} refused ({said[0] if said else f'exit {status}'}): "
                         "fix that, then run it to finish the revert")
    return parent


def branch_commit(root: Path, branch: str) -> str | None:
    """The commit `branch` (a local branch's name) points at; None when it does not exist."""
    return ref_commit(root, f"refs/heads/{branch}")


def put_branch_back(root: Path, branch: str, target: str) -> None:
    """Point `branch` at `target` and check it out, keeping uncommitted changes (keep semantics).

    HEAD on `branch`: `git reset --keep target`. HEAD elsewhere (another branch, detached):
    `git checkout -B branch target`, which moves the branch only if the checkout succeeds. Where a
    local change sits in a file the move would overwrite, git refuses and so does this (DitarError,
    one line saying how to finish by hand); nothing is overwritten."""
    if _repo(root) is None:
        raise DitarError(f"{root}: not a git repository; {branch} not put back")
    on_branch = _branch(root) == branch
    args = ["reset", "-q", "--keep", target] if on_branch else ["checkout", "-q", "-B", branch, target]
    status, out, err = _git_status(root, args)
    if status == 0:
        return
    by_hand = f"git reset --keep {target[:7]}" if on_branch else f"git checkout -B {branch} {target[:7]}"
    dirty = dirty_paths(root)
    touched = set(changed_files(root, target, "HEAD")) if dirty else set()
    local = [p for p in dirty if p in touched] or dirty
    if local:
        raise DitarError(f"uncommitted changes ({', '.join(local[:3])}) block putting {branch} back on {target[:7]}: "
                         f"save them, then `{by_hand}` finishes it")
    said = (err or out).strip().splitlines()
    raise DitarError(f"`{by_hand}` refused ({said[0] if said else f'exit {status}'}): fix that, then run it to finish")


def create_branch(root: Path, name: str) -> None:
    if _repo(root) is None:
        raise DitarError(f"{root}: not a git repository (run `git init` and commit first)")
    _git(root, "checkout", "-q", *([name] if branch_exists(root, name) else ["-b", name]))


def branch_exists(root: Path, name: str) -> bool:
    return branch_commit(root, name) is not None


def branches(root: Path, prefix: str) -> list[str]:
    """The local branches whose names start with `prefix`, sorted; [] where there is no repository."""
    if _repo(root) is None:
        return []
    out = _git(root, "for-each-ref", "--format=%(refname:short)", f"refs/heads/{prefix}", what="list branches")
    return sorted(line for line in out.splitlines() if line.startswith(prefix))


def remove_worktrees(root: Path, paths: Iterable[Path]) -> None:
    """Drop linked worktrees (their folders and git's records of them)."""
    for path in paths:
        _git(root, "worktree", "remove", "--force", str(path))
    _git(root, "worktree", "prune")


def add_worktree(root: Path, path: Path, rev: str) -> None:
    """A detached checkout of `rev` at `path` (the champion's or the baseline's code)."""
    _git(root, "worktree", "add", "--detach", "--force", str(path), rev)


def add_branch_worktree(root: Path, path: Path, branch: str, start: str) -> None:
    """A checkout of `branch` at `path`; the branch is created at `start` when it does not exist."""
    if branch_exists(root, branch):
        _git(root, "worktree", "add", str(path), branch)
    else:
        _git(root, "worktree", "add", "-b", branch, str(path), start)


def list_worktrees(root: Path) -> list[dict[str, Any]]:
    """`git worktree list --porcelain` as dicts: path, head, branch (None when detached)."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    for line in _git(root, "worktree", "list", "--porcelain").splitlines() + [""]:
        if not line:
            if cur:
                out.append(cur)
            cur = {}
            continue
        key, _, val = line.partition(" ")
        if key == "worktree":
            cur = {"path": val, "head": None, "branch": None}
        elif key == "HEAD":
            cur["head"] = val
        elif key == "branch":
            cur["branch"] = val.removeprefix("refs/heads/")
    return out


def _commit_as(root: Path, user: tuple[str, str], *args: str) -> str:
    # -c user.*: a scratch repository's committer, whatever the machine's git config says
    _git(root, "-c", f"user.name={user[0]}", "-c", f"user.email={user[1]}", "commit", "-q", *args)
    return _git(root, "rev-parse", "HEAD").strip()


def init_repo(path: Path, message: str, *, user: tuple[str, str], branch: str = "main") -> str:
    """`git init` at `path`, commit everything there as `user` (name, email); returns the commit."""
    status, out, err = _execute(Path(path), ["init", "-q", "-b", branch])
    if status != 0:
        raise DitarError(f"git init {path} failed: {(err or out).strip()}")
    _git(path, "add", "-A")
    return _commit_as(path, user, "-m", message)


def commit_tracked(root: Path, message: str, *, user: tuple[str, str]) -> str:
    """`git commit -a -m message` as `user` (name, email): every tracked change; returns the commit."""
    return _commit_as(root, user, "-a", "-m", message)


def ensure_ignored(root: Path, entries: Iterable[str]) -> bool:
    """Make sure `entries` are git-ignored (via .git/info/exclude, which no commit can undo)."""
    changed = False
    repo = _repo(root)
    if repo is None:
        return False
    exclude = repo.common_dir / "info" / "exclude"  # git reads it there for every worktree
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    for e in entries:
        if e not in text.splitlines():
            text += ("" if text.endswith("\n") or not text else "\n") + e + "\n"
            changed = True
    if changed:
        exclude.write_text(text)
    return changed


# ---- the state directory's backup: a hidden ref of content-addressed objects ----------------
# Plumbing only (hash-object, mktree, commit-tree, update-ref): no working tree, index or branch
# is touched, so `git status` and the research branch never see it.

_BACKUP_USER = ("pytest-ditar", "ditar@localhost")


def state_ref(tag: str) -> str:
    """The hidden ref that holds a tag's state directory."""
    return f"refs/ditar/{tag}"


# `dit-ar fetch-state` alone reaches a remote, before any judge runs: the transports a CI clone uses,
# each switched back on by name over `protocol.allow=never` (ext:: and the rest stay off), and the
# remote's own upload-pack named here, never a `remote.<name>.uploadpack` of the repository's config.
_TRANSPORTS = tuple(a for p in ("file", "git", "ssh", "http", "https") for a in ("-c", f"protocol.{p}.allow=always"))


def fetch(root: Path, remote: str, refspecs: Iterable[str]) -> str:
    """`git fetch` of `refspecs` from `remote` (a remote's name or URL): no tags, no submodules, no
    program of the repository's config. Returns git's report; DitarError with its stderr."""
    if remote.startswith("-"):
        raise DitarError(f"fetch: {remote!r} is not a remote")
    return _git(root, *_TRANSPORTS, "fetch", "--no-tags", "--no-recurse-submodules", "--upload-pack=git-upload-pack",
                "--", remote, *refspecs, what=f"git fetch {remote}")


def has_commit(root: Path, sha: str) -> bool:
    """Whether the commit `sha` is in the repository's objects (a shallow clone may lack it)."""
    status, _, _ = _git_status(root, ["cat-file", "-e", f"{sha}^{{commit}}"])
    return status == 0


def refs_under(root: Path, prefix: str) -> list[str]:
    """The refs whose names start with `prefix` (e.g. "refs/ditar/")."""
    return [r for r in _git(root, "for-each-ref", "--format=%(refname)", prefix).splitlines() if r]


def ref_commit(root: Path, ref: str) -> str | None:
    """The commit `ref` points at; None when it does not exist (or there is no repository)."""
    try:
        return _git(root, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}").strip() or None
    except DitarError:
        return None


def _git_in(root: Path, *args: str, data: bytes, what: str | None = None) -> str:
    """`git <args>` with `data` on its stdin."""
    return _git(root, *args, what=what, data=data)


def _mktree(root: Path, blobs: dict[str, str]) -> str:
    """The tree of `blobs` (path -> blob id), built deepest folders first, one `mktree --batch` per depth."""
    if not blobs:
        return _git_in(root, "mktree", data=b"").strip()
    dirs: dict[str, dict[str, str]] = {"": {}}  # folder -> {name: ls-tree line}
    for path, sha in blobs.items():
        parts = path.split("/")
        if any(c in path for c in "\t\n") or "" in parts:
            raise DitarError(f"cannot back up {path!r}: a name git's tree format cannot hold")
        for i in range(1, len(parts)):
            dirs.setdefault("/".join(parts[:i]), {})
        dirs["/".join(parts[:-1])][parts[-1]] = f"100644 blob {sha}\t{parts[-1]}"
    depth = {d: (d.count("/") + 1 if d else 0) for d in dirs}
    for level in range(max(depth.values()), -1, -1):
        batch = sorted(d for d in dirs if depth[d] == level)
        data = "\n\n".join("\n".join(dirs[d].values()) for d in batch) + "\n"
        shas = _git_in(root, "mktree", "--batch", data=data.encode()).split()
        for d, sha in zip(batch, shas):
            if d:
                parent, _, name = d.rpartition("/")
                dirs[parent][name] = f"040000 tree {sha}\t{name}"
            else:
                return sha
    raise AssertionError("unreachable: the root folder is level 0")


def blob_ids(root: Path, files: Mapping[str, Path], write: bool = False) -> dict[str, str]:
    """The git blob id of each file (path -> file on disk), with one `hash-object --stdin-paths`;
    `write` also stores the blobs."""
    names = sorted(files)
    if not names:
        return {}
    listing = "".join(f"{files[n]}\n" for n in names).encode()
    shas = _git_in(root, "hash-object", *(["-w"] if write else []), "--no-filters", "--stdin-paths", data=listing,
                   what="git hash-object (backing up the state)" if write else "git hash-object").split()
    return dict(zip(names, shas))


def file_at(root: Path, rev: str, path: str) -> str | None:
    """The text of `path` in `rev`'s tree; None where the revision or the file does not exist."""
    try:
        return _git(root, "cat-file", "blob", f"{rev}:{path}", keep_newline=True)
    except DitarError:
        return None


def tree_blobs(root: Path, rev: str) -> dict[str, str]:
    """Every file of `rev`'s tree as path -> blob id (`ls-tree -r`), without reading the blobs."""
    return {path: sha for path, (mode, sha) in tree_modes(root, rev).items() if mode != "160000"}


def tree_modes(root: Path, rev: str) -> dict[str, tuple[str, str]]:
    """Every entry of `rev`'s tree, folders flattened: path -> (mode, object id); blobs (regular
    files: 100644, 100755; symlinks: 120000) and submodules' commits (160000)."""
    out = {}
    for rec in _git(root, "ls-tree", "-r", "-z", rev, what=f"git ls-tree {rev}").split("\0"):
        if rec:
            meta, _, path = rec.partition("\t")
            mode, kind, sha = meta.split()
            if kind in ("blob", "commit"):
                out[path] = (mode, sha)
    return out


def _blob_id(data: bytes, like: str) -> str:
    """The id git gives a blob of `data`, in the hash of the object id `like` (SHA-1 or SHA-256)."""
    h = hashlib.sha1() if len(like) == 40 else hashlib.sha256()
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def content_changes(root: Path, rev: str, checkout: Path, under: Iterable[str] = ("",),
                    skip: Iterable[str] = ()) -> list[str]:
    """Where the files of `checkout` (a checkout of `rev` from the repository holding `root`) are
    not `rev`'s, by content: "<path> modified" (bytes that are another blob than the commit's: what
    an index flag, assume-unchanged or skip-worktree, hides from `git status`), "<path> missing",
    "<path> added" (untracked and git-ignored files alike). Paths are relative to `checkout`; only
    those under `under` (folders, "" for all) count, and none inside a folder named in `skip`.

    The files are read and hashed here, and the commit's tree is read from the object store:
    git's index and status are never asked. A file whose bytes differ from the blob only by git's
    own conversions on checkout (line endings, a filter driver of the user's such as git-lfs)
    matches when git hashes it back to the blob, as it would add it; the repository's own filter
    drivers are off for that too. The checkout's own `.git` (a worktree's file) is git's, not the
    commit's."""
    prefixes = tuple(u.strip("/") for u in under)
    skip = set(skip)

    def wanted(rel: str) -> bool:
        return any(not p or rel == p or rel.startswith(p + "/") for p in prefixes) \
            and not skip & set(rel.split("/")[:-1])

    tree = {p: ms for p, ms in tree_modes(root, rev).items() if wanted(p)}
    modules = [p for p, (mode, _) in tree.items() if mode == "160000"]
    found: dict[str, str] = {}  # path -> "file" | "link"
    tops = [p for p in prefixes if not any(q != p and (not q or p.startswith(q + "/")) for q in prefixes)]
    for top in dict.fromkeys(tops):
        start = checkout / top if top else checkout
        if os.path.islink(start) or start.is_file():
            found[top] = "link" if os.path.islink(start) else "file"
            continue
        for folder, dirs, files in os.walk(start):
            rel_dir = os.path.relpath(folder, checkout)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            if rel_dir in modules:
                dirs[:] = []  # a submodule's checkout is its own repository's
                continue
            if not rel_dir:  # the checkout's own .git (a folder, or a worktree's file) is git's
                files = [f for f in files if f != ".git"]
                dirs[:] = [d for d in dirs if d != ".git"]
            for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if wanted(rel):
                    found[rel] = "link" if os.path.islink(os.path.join(folder, name)) else "file"
            dirs[:] = [d for d in dirs if d not in skip and not os.path.islink(os.path.join(folder, d))]
    out, convert = [], []
    for rel in sorted(tree.keys() | found.keys()):
        mode, sha = tree.get(rel, ("", ""))
        if mode == "160000":
            continue
        if rel not in found:
            out.append(f"{rel} missing")
        elif not mode:
            out.append(f"{rel} added")
        else:
            path = checkout / rel
            try:
                data = os.fsencode(os.readlink(path)) if found[rel] == "link" else path.read_bytes()
            except OSError:
                out.append(f"{rel} missing")
                continue
            if (found[rel] == "link") != (mode == "120000"):
                out.append(f"{rel} modified")
            elif _blob_id(data, sha) != sha:
                convert.append((rel, sha))
    for rel, sha in convert:  # as git would add it: its conversions applied, the user's filters run
        try:
            again = _git(root, "hash-object", f"--path={rel}", "--", str(checkout / rel)).strip()
        except DitarError:
            again = ""
        if again != sha:
            out.append(f"{rel} modified")
    return sorted(out)


def save_tree(root: Path, ref: str, files: Mapping[str, Path], message: str, parent: str | None = None,
              always: bool = False) -> str:
    """Commit `files` (path in the tree -> file on disk) to `ref`; returns the ref's commit.

    The previous commit (`parent`, else the ref's) is the new one's parent; when the tree is the
    same as the parent's, nothing new is written and the parent is returned, unless `always`
    (a commit whose message is what matters, such as a run's marker)."""
    tree = _mktree(root, blob_ids(root, files, write=True))
    old = parent or ref_commit(root, ref)
    if old and not always and _git(root, "rev-parse", f"{old}^{{tree}}").strip() == tree:
        if ref_commit(root, ref) != old:  # the ref was moved or deleted: point it back
            _git(root, "update-ref", "-m", message, ref, old)
        return old
    new = _git(root, "-c", f"user.name={_BACKUP_USER[0]}", "-c", f"user.email={_BACKUP_USER[1]}",
               "commit-tree", tree, *(["-p", old] if old else []), "-m", message).strip()
    _git(root, "update-ref", "-m", message, ref, new)
    return new


def read_tree(root: Path, rev: str) -> list[tuple[str, bytes]]:
    """Every file of `rev`'s tree as (path, bytes), read with one `cat-file --batch`."""
    return [(path, data) for path, _mode, data in tree_files(root, rev)]


def tree_files(root: Path, rev: str, under: Iterable[str] = ("",)) -> list[tuple[str, str, bytes]]:
    """Every blob of `rev`'s tree under the folders or files `under` ("" for all) as (path, mode,
    bytes), read with one `cat-file --batch`; a link's bytes are its target (mode 120000), a
    submodule (160000) comes with no bytes. The object store only: no checkout, index or filter."""
    prefixes = tuple(u.strip("/") for u in under)
    entries = [(path, mode, sha) for path, (mode, sha) in tree_modes(root, rev).items()
               if any(not p or path == p or path.startswith(p + "/") for p in prefixes)]
    blobs = [(path, mode, sha) for path, mode, sha in entries if mode != "160000"]
    if not blobs:
        return [(path, mode, b"") for path, mode, _ in entries]
    repo = _repo(root)
    if repo is None:
        raise DitarError(f"git cat-file failed: {root} is not a git repository")
    # bytes as they are: blobs are not text, and their last newline is theirs
    top = repo.toplevel or repo.git_dir
    status, raw, err = _run(top, ["git", *_FIXED, *_no_programs(_config_entries(top)), "cat-file", "--batch"],
                            "".join(f"{sha}\n" for _, _, sha in blobs).encode())
    if status != 0:
        raise DitarError(f"git cat-file failed: {_text(err).strip()}")
    out, pos = [], 0
    for path, mode, sha in blobs:
        eol = raw.index(b"\n", pos)
        size = int(raw[pos:eol].split()[2])
        out.append((path, mode, bytes(raw[eol + 1:eol + 1 + size])))
        pos = eol + 1 + size + 1  # the content, then a newline
    return out + [(path, mode, b"") for path, mode, _ in entries if mode == "160000"]
