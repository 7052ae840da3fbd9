"""`dit-ar init`: start a research branch, or a worktree bound to one GPU for parallel research;
optionally bound the session (a number of experiments, a deadline)."""
from __future__ import annotations

import argparse
import os
from typing import cast

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.config.project import load_config
from pytest_ditar.loop.integrity.worktrees import init_worktree
from pytest_ditar.loop.perf.bound import check_bound_args, experiments_run, write_bound
from pytest_ditar.store.atomic import write_json_atomic
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import MANIFEST
from pytest_ditar.vcs import branches


class Init(Command):
    name = "init"
    help = "create and check out autoresearch/<tag> from a clean tree"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        # dest differs from "tag": the top-level --tag names the session of the other commands.
        parser.add_argument("--tag", dest="init_tag", required=True)
        parser.add_argument("--gpu", type=int, default=None,
                            help="parallel research: a git worktree for this tag, bound to GPU N (cuda:N)")
        parser.add_argument("--worktree", default=None,
                            help="with --gpu: the worktree path (default: <repo>-<tag> beside the repo)")
        parser.add_argument("--max-experiments", type=int, default=None,
                            help="bound the session: `experiment` refuses after N more experiments")
        parser.add_argument("--until", default=None,
                            help="bound the session: `experiment` refuses after this ISO 8601 time (local unless it "
                                 "has an offset)")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = load_config(config_path(args))
        check_bound_args(args.max_experiments, args.until)  # before anything is created
        if args.gpu is not None or args.worktree:
            return cls._worktree(cfg, args)
        return cls._branch(cfg, args)

    @staticmethod
    def _worktree(cfg, args: argparse.Namespace) -> int:
        wt = init_worktree(cfg, args.init_tag, args.gpu, args.worktree)
        gpu = f"cuda:{args.gpu}" if args.gpu is not None else "the default device"
        state = TagPaths.of(wt, cfg.state_dir, args.init_tag).dir
        print(f"worktree {wt} on {cfg.branch_prefix}{args.init_tag}, bound to {gpu}; state in {state}")
        _bound(state, args)
        print(f"next: cd {wt} && dit-ar --config {cfg.path.relative_to(cfg.root)} baseline")
        return 0

    @staticmethod
    def _branch(cfg, args: argparse.Namespace) -> int:
        import json

        tag = args.init_tag
        st = branches.require_clean_repo(cfg.root, [f"/{cfg.state_dir}/"])
        branch = cfg.branch_prefix + tag
        branches.create_branch(cfg.root, branch)
        paths = TagPaths.of(cfg.root, cfg.state_dir, tag)
        paths.dir.mkdir(parents=True, exist_ok=True)
        head = cast(str, st.head)  # require_clean_repo: a repository with a commit
        if not paths.session_file.exists():
            write_json_atomic(paths.session_file, {"tag": tag, "branch": branch, "start_commit": head})
        start = json.loads(paths.session_file.read_text()).get("start_commit") or head  # a resumed tag keeps its own
        print(f"on {branch} (start {start[:7]}); state in {paths.dir}")
        _bound(paths.dir, args)
        cmd = f"dit-ar --config {os.path.relpath(cfg.path)}"
        has_baseline = (paths.baseline / MANIFEST).is_file()
        print(f"next: {cmd} status" if has_baseline else f"next: {cmd} baseline")
        return 0


def _bound(state_dir, args: argparse.Namespace) -> None:
    """Write the session's bound when one is given (re-running init on the tag replaces it)."""
    if args.max_experiments is None and args.until is None:
        return
    bound = write_bound(state_dir, args.max_experiments, args.until)
    print(f"bound: {bound.describe(experiments_run(state_dir))}; `experiment` refuses once it is reached")
