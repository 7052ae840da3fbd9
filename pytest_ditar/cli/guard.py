"""`dit-ar guard`: CI's regression gate (`pytest --ditar-guard`, docs/ci.md) started the judge's way.

A plain `pytest --ditar-guard` has read the checkout's ini files and conftest.py before any hook
of ours runs, so a pull request that adds `addopts = -p module` to them runs its code in the very
process that reports PASS or FAIL. This command holds the checkout to the baseline outside the
mutable paths first (loop.integrity.judgetree, from git's objects), then starts the guard's pytest on the
judge's own configuration (its ini, the project root as rootdir, no conftest). action.yml runs it.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.cli.experiment import BENCHMARK_QUIET, judge_pytest, plugin_flag, run_judge


class Guard(Command):
    name = "guard"
    help = ("CI's regression gate: time the working tree against the stored champion and fail on a slowdown "
            "shown beyond the tolerance (pytest --ditar-guard, started the judge's way); exit 0 PASS, 1 FAIL, "
            "4 refused")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--tolerance", type=float, default=0.05,
                            help="the slowdown a lane may show (default %(default)s: 5%%)")
        parser.add_argument("--json", default=None, metavar="PATH",
                            help="write the guard's outcome as one JSON document to PATH (docs/verdict-json.md)")
        parser.add_argument("--device", default=None)
        parser.add_argument("--benchmark-tables", action="store_true", help="show pytest-benchmark's tables")
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments after --")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = config_path(args)
        return run_judge(cfg, args, "ditar-guard-", lambda ini_dir: [
            *judge_pytest(cfg, args.tag, ini_dir), *plugin_flag(), "-p", "no:cacheprovider",
            f"--ditar-config={cfg}", "--ditar-guard", f"--ditar-guard-tolerance={args.tolerance}",
            *([] if args.benchmark_tables else [BENCHMARK_QUIET]),
            *([f"--ditar-tag={args.tag}"] if args.tag else []),
            *([f"--ditar-device={args.device}"] if args.device else []),
            *([f"--ditar-json={Path(args.json).resolve()}"] if args.json else []),
            *(a for a in args.pytest_args if a != "--")])
