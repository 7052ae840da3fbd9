"""`dit-ar experiment`: the full gate on the committed candidate, run as `pytest --ditar-gate`.

pytest runs in a subprocess: the CLI never imports it, and the gate's run is the same one a
plain `pytest` at the root would make.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.core.vocabulary import CLASSES


class Experiment(Command):
    name = "experiment"
    help = "run the full gate on the committed candidate (pytest)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--classification", required=True, choices=CLASSES)
        parser.add_argument("--description", required=True)
        parser.add_argument("--device", default=None)
        parser.add_argument("--no-revert", action="store_true", help="record the verdict but leave git alone")
        parser.add_argument("--workers", type=int, default=0,
                            help="shard the quality phase over N pytest-xdist workers (one GPU each), then time the "
                                 "lanes serially and decide once")
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments after --")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        # The gate's pytest is never an xdist worker, even when dit-ar itself runs inside one.
        for var in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
            os.environ.pop(var)
        cfg = config_path(args)
        cmd = [sys.executable, "-m", "pytest", *plugin_flag(), "-p", "no:cacheprovider", f"--ditar-config={cfg}",
               "--ditar-gate", f"--ditar-class={args.classification}", f"--ditar-description={args.description}", "-q",
               *(a for a in args.pytest_args if a != "--")]
        if args.tag:
            cmd.append(f"--ditar-tag={args.tag}")
        if args.device:
            cmd.append(f"--ditar-device={args.device}")
        if args.no_revert:
            cmd.append("--ditar-no-revert")
        root, refusal = _bound_check(cfg, args.tag)
        if refusal:  # a person bounded the session (`dit-ar init --max-experiments/--until`)
            print(f"DITAR REFUSED: {refusal}")
            return 2
        from pytest_ditar.vcs.repo import judge_env

        # every git command of the gate's pytest runs no repository code, whoever starts it
        # (pytest-benchmark runs plain git while it adds its options, before any hook of ours)
        os.environ.update(judge_env(root))
        if args.workers:
            from pytest_ditar.loop.phases import run_two_phase

            return run_two_phase(cmd, args.workers, root)
        return subprocess.call(cmd, cwd=root)


def plugin_flag() -> list[str]:
    """Load the plugin explicitly where the package is importable but not installed (no entry point)."""
    import importlib.metadata as md

    if any(ep.name == "ditar" for ep in md.entry_points(group="pytest11")):
        return []
    return ["-p", "pytest_ditar.plugin.hooks"]


def _bound_check(path: Path, tag: str | None) -> tuple[Path, str | None]:
    """The project root, and the refusal once the session's bound is reached (else None)."""
    from pytest_ditar.config.project import load_config
    from pytest_ditar.loop.bound import bound_refusal
    from pytest_ditar.loop.session import resolve_tag
    from pytest_ditar.store.paths import TagPaths

    cfg = load_config(path)
    return cfg.root, bound_refusal(TagPaths.of(cfg.root, cfg.state_dir, resolve_tag(cfg, tag)).dir)
