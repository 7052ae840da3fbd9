"""Parallel research on one host: one git worktree, branch, state directory and GPU per tag.

`dit-ar init --tag T --gpu N` adds a worktree `<repo parent>/<repo>-T` (or `--worktree PATH`) on
branch autoresearch/T, so several agents edit, commit and revert separate branches without
touching each other's files; each worktree has its own `.autoresearch/T/` (the state dir is
relative to the project root, which is the worktree), and `session.json` there binds the tag to
cuda:N (a session of that tag uses it unless --ditar-device says otherwise). `dit-ar status
--all` walks `git worktree list` and shows every tag.

Every role's code (the candidate's, the champion's, its twin's, the holdout baseline's) is
written from its commit's blobs into the judge's own folder (loop.integrity.roles), never run from a
worktree.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from pytest_ditar.config.project import Config
from pytest_ditar.core.decision import champion_row
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.rerun import NOT_JUDGED, counts
from pytest_ditar.core.vocabulary import STATUSES
from pytest_ditar.hardware.fingerprint import cuda_device_count
from pytest_ditar.store.atomic import write_json_atomic
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths, state_root, tag_dirs
from pytest_ditar.store.snapshot import MANIFEST
from pytest_ditar.vcs import branches, trees


def bound_gpu(state_dir: Path) -> int | None:
    """The GPU index the tag was bound to by `dit-ar init --gpu N`, if any."""
    f = TagPaths(state_dir).session_file
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
    return f"cuda:{gpu}" if cuda_device_count() else None


def default_path(root: Path, tag: str) -> Path:
    return root.parent / f"{root.name}-{tag}"


def init_worktree(cfg: Config, tag: str, gpu: int | None, path: str | None = None) -> Path:
    """Create worktree + branch autoresearch/<tag> from HEAD and the tag's state dir in it."""
    # info/exclude is shared by all worktrees, so ignoring the state dir here covers the new one
    st = branches.require_clean_repo(cfg.root, [f"/{cfg.state_dir}/"])
    branch = cfg.branch_prefix + tag
    wt = Path(path).resolve() if path else default_path(cfg.root, tag)
    for other in trees.list_worktrees(cfg.root):
        if other["branch"] == branch and Path(other["path"]) != wt:
            raise DitarError(f"branch {branch} is already checked out in {other['path']}")
        if other["branch"] == branch:
            break
    else:
        if wt.exists() and any(wt.iterdir()):
            raise DitarError(f"{wt}: exists and is not empty; pick another --worktree")
        trees.add_branch_worktree(cfg.root, wt, branch, cast(str, st.head))  # require_clean_repo: it has a commit
    rel_cfg = cfg.path.relative_to(cfg.root)
    f = TagPaths.of(wt, cfg.state_dir, tag).session_file
    data = json.loads(f.read_text()) if f.is_file() else {"tag": tag, "branch": branch, "start_commit": st.head}
    data.update(gpu=gpu, worktree=str(wt), config=str(rel_cfg))
    write_json_atomic(f, data)
    return wt


def collect_all(cfg: Config) -> list[dict[str, Any]]:
    """Every tag of every worktree of this repository (the main checkout included)."""
    rows = []
    for wt in trees.list_worktrees(cfg.root):
        for tag in tag_dirs(state_root(Path(wt["path"]), cfg.state_dir)):
            sess = json.loads(tag.session_file.read_text())
            ledger = Ledger(tag.dir)
            led = ledger.rows()
            exps = [r for r in led if r.status in STATUSES]
            champ = champion_row(exps)
            rows.append({"tag": tag.tag, "branch": sess.get("branch"), "checked_out": wt["branch"],
                         "worktree": wt["path"], "gpu": sess.get("gpu"),
                         "baseline": (tag.baseline / MANIFEST).is_file(),
                         "champion": champ.commit if champ else None,
                         # a run that judged nothing is not a DISCARD (core.rerun.counts), as in `dit-ar status`
                         "counts": counts(exps)})
    return rows


def status_all(cfg: Config, as_json: bool = False) -> int:
    rows = collect_all(cfg)
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no research tags (run `dit-ar init --tag T [--gpu N]`)")
        return 0
    print(f"{'tag':<12} {'branch':<24} {'gpu':<4} {'champion':<9} {'KEEP':>4} {'DISC':>4} {'CRASH':>5} "
          f"{'UNJUDGED':>8}  worktree")
    for r in rows:
        c = r["counts"]
        gpu = "-" if r["gpu"] is None else str(r["gpu"])
        champ = r["champion"][:7] if r["champion"] else ("baseline" if r["baseline"] else "none")
        print(f"{r['tag']:<12} {str(r['branch']):<24} {gpu:<4} {champ:<9} {c['KEEP']:>4} {c['DISCARD']:>4} "
              f"{c['CRASH']:>5} {c[NOT_JUDGED]:>8}  {r['worktree']}")
    return 0
