"""`dit-ar init`: start a research branch, or a worktree bound to one GPU for parallel research."""
from __future__ import annotations

import argparse
import os

from pytest_ditar.cli.command import Command, config_path


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

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        from pytest_ditar.config.project import load_config

        cfg = load_config(config_path(args))
        if args.gpu is not None or args.worktree:
            return cls._worktree(cfg, args)
        return cls._branch(cfg, args.init_tag)

    @staticmethod
    def _worktree(cfg, args: argparse.Namespace) -> int:
        from pytest_ditar.loop.worktrees import init_worktree
        from pytest_ditar.store.paths import TagPaths

        wt = init_worktree(cfg, args.init_tag, args.gpu, args.worktree)
        gpu = f"cuda:{args.gpu}" if args.gpu is not None else "the default device"
        print(f"worktree {wt} on {cfg.branch_prefix}{args.init_tag}, bound to {gpu}; state in "
              f"{TagPaths.of(wt, cfg.state_dir, args.init_tag).dir}")
        print(f"next: cd {wt} && dit-ar --config {cfg.path.relative_to(cfg.root)} baseline")
        return 0

    @staticmethod
    def _branch(cfg, tag: str) -> int:
        from pytest_ditar.store.atomic import write_json_atomic
        from pytest_ditar.store.paths import TagPaths
        from pytest_ditar.vcs import repo as gitops

        st = gitops.require_clean_repo(cfg.root, [f"/{cfg.state_dir}/"])
        branch = cfg.branch_prefix + tag
        start = st.head
        gitops.create_branch(cfg.root, branch)
        paths = TagPaths.of(cfg.root, cfg.state_dir, tag)
        paths.dir.mkdir(parents=True, exist_ok=True)
        if not paths.session_file.exists():
            write_json_atomic(paths.session_file, {"tag": tag, "branch": branch, "start_commit": start})
        print(f"on {branch} (start {start[:7]}); state in {paths.dir}")
        print("next: dit-ar --config {} baseline".format(os.path.relpath(cfg.path)))
        return 0
