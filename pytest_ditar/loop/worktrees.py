"""Parallel research on one host: one git worktree, branch, state directory and GPU per tag.

`dit-ar init --tag T --gpu N` adds a worktree `<repo parent>/<repo>-T` (or `--worktree PATH`) on
branch autoresearch/T, so several agents edit, commit and revert separate branches without
touching each other's files; each worktree has its own `.autoresearch/T/` (the state dir is
relative to the project root, which is the worktree), and `session.json` there binds the tag to
cuda:N (a session of that tag uses it unless --ditar-device says otherwise). `dit-ar status
--all` walks `git worktree list` and shows every tag.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from pytest_ditar.core.errors import DitarError

SESSION_FILE = "session.json"


def bound_gpu(state_dir: Path) -> int | None:
    """The GPU index the tag was bound to by `dit-ar init --gpu N`, if any."""
    f = state_dir / SESSION_FILE
    try:
        gpu = json.loads(f.read_text()).get("gpu") if f.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None
    return int(gpu) if gpu is not None else None


def bound_device(state_dir: Path) -> str | None:
    """cuda:N for a GPU-bound tag when CUDA is there; None (auto) otherwise, e.g. on CPU."""
    gpu = bound_gpu(state_dir)
    if gpu is None:
        return None
    import torch

    return f"cuda:{gpu}" if torch.cuda.is_available() else None


def _git(root: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if res.returncode != 0:
        raise DitarError(f"git {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout


def default_path(root: Path, tag: str) -> Path:
    return root.parent / f"{root.name}-{tag}"


def init_worktree(cfg: Any, tag: str, gpu: int | None, path: str | None = None) -> Path:
    """Create worktree + branch autoresearch/<tag> from HEAD and the tag's state dir in it."""
    from pytest_ditar.vcs import repo as gitops

    st = gitops.state(cfg.root)
    if not st.is_repo or not st.head:
        raise DitarError(f"{cfg.root}: not a git repository with a commit (git init && git add -A && git commit first)")
    gitops.ensure_ignored(cfg.root, [f"/{cfg.state_dir}/"])  # info/exclude is shared by all worktrees
    st = gitops.state(cfg.root)
    if st.dirty_paths:
        raise DitarError(f"{cfg.root}: the tree is not clean ({', '.join(st.dirty_paths[:3])}); commit or stash first")
    branch = cfg.branch_prefix + tag
    wt = Path(path).resolve() if path else default_path(cfg.root, tag)
    for other in list_worktrees(cfg.root):
        if other["branch"] == branch and Path(other["path"]) != wt:
            raise DitarError(f"branch {branch} is already checked out in {other['path']}")
        if other["branch"] == branch:
            break
    else:
        if wt.exists() and any(wt.iterdir()):
            raise DitarError(f"{wt}: exists and is not empty; pick another --worktree")
        exists = bool(_git(cfg.root, "branch", "--list", branch).strip())
        _git(cfg.root, "worktree", "add", *([str(wt), branch] if exists else ["-b", branch, str(wt), st.head]))
    rel_cfg = cfg.path.relative_to(cfg.root)
    state = wt / cfg.state_dir / tag
    state.mkdir(parents=True, exist_ok=True)
    f = state / SESSION_FILE
    data = json.loads(f.read_text()) if f.is_file() else {"tag": tag, "branch": branch, "start_commit": st.head}
    data.update(gpu=gpu, worktree=str(wt), config=str(rel_cfg))
    f.write_text(json.dumps(data, indent=1))
    return wt


def list_worktrees(root: Path) -> list[dict[str, Any]]:
    """`git worktree list --porcelain` as dicts: path, head, branch (None when detached)."""
    out, cur = [], {}
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


def collect_all(cfg: Any) -> list[dict[str, Any]]:
    """Every tag of every worktree of this repository (the main checkout included)."""
    from pytest_ditar.store.ledger import Ledger

    rows = []
    for wt in list_worktrees(cfg.root):
        state_root = Path(wt["path"]) / cfg.state_dir
        if not state_root.is_dir():
            continue
        for tag_dir in sorted(p for p in state_root.iterdir() if p.is_dir() and (p / SESSION_FILE).is_file()):
            sess = json.loads((tag_dir / SESSION_FILE).read_text())
            ledger = Ledger(tag_dir)
            led = ledger.rows() if ledger.jsonl_path.exists() else []
            exps = [r for r in led if r.get("status") in ("KEEP", "DISCARD", "CRASH")]
            kept = [r for r in exps if r.get("status") == "KEEP"]
            rows.append({"tag": tag_dir.name, "branch": sess.get("branch"), "checked_out": wt["branch"],
                         "worktree": wt["path"], "gpu": sess.get("gpu"),
                         "baseline": (tag_dir / "baseline" / "manifest.json").is_file(),
                         "champion": kept[-1]["commit"] if kept else None,
                         "counts": {s: sum(1 for r in exps if r["status"] == s) for s in ("KEEP", "DISCARD", "CRASH")}})
    return rows


def status_all(cfg: Any, as_json: bool = False) -> int:
    rows = collect_all(cfg)
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no research tags (run `dit-ar init --tag T [--gpu N]`)")
        return 0
    print(f"{'tag':<12} {'branch':<24} {'gpu':<4} {'champion':<9} {'KEEP':>4} {'DISC':>4} {'CRASH':>5}  worktree")
    for r in rows:
        c = r["counts"]
        gpu = "-" if r["gpu"] is None else str(r["gpu"])
        champ = r["champion"][:7] if r["champion"] else ("baseline" if r["baseline"] else "none")
        print(f"{r['tag']:<12} {str(r['branch']):<24} {gpu:<4} {champ:<9} {c['KEEP']:>4} {c['DISCARD']:>4} "
              f"{c['CRASH']:>5}  {r['worktree']}")
    return 0
