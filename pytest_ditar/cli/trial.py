"""`dit-ar try`: the working tree against the champion with the gate's own lane code and quality
contracts, reported, never judged: no verdict, no ledger row, no git (pytest --ditar-try).

The agent's "does this help?" before it commits one hypothesis: the objective lane's speedup and CI
over the champion (the same interleaved, twinned rounds a gated run times), each lane's line, the
quality summary and the margins to each floor of the class it would claim; then the next step its
outcome calls for and, last, `DITAR TRY: <outcome> ...` (loop.run.tryout), the exit status by outcome.
Each try is noted in the tag's tried.jsonl, which `dit-ar status` lists: a dropped idea leaves a trace.
"""
from __future__ import annotations

import argparse

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.cli.experiment import BENCHMARK_QUIET, CLASS_HELP, pytest_command, run_judge
from pytest_ditar.core.vocabulary import CLASSES

JSON_HELP = ("print the outcome as one JSON document on stdout (kind \"try\" of pytest_ditar/schemas/"
             "verdict.schema.json), pytest's output going to stderr")


class Try(Command):
    name = "try"
    help = ("time and check the working tree against the champion: no verdict, no ledger row, no git; "
            "ends `DITAR TRY: <outcome>`, exit 0 FASTER, 1 not worth a commit, 10 crash, 11 undecided")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--classification", required=True, choices=CLASSES,
                            help="the class you would claim: its floors are checked and their margins printed. "
                                 + CLASS_HELP)
        parser.add_argument("--benchmark-tables", action="store_true", help="show pytest-benchmark's tables")
        parser.add_argument("--description", default=None,
                            help="the idea in a few words: noted with the outcome in tried.jsonl, listed by `status`")
        parser.add_argument("--device", default=None)
        parser.add_argument("--json", action="store_true", help=JSON_HELP)
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments after --")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = config_path(args)
        flags = ["--ditar-try", *([f"--ditar-description={args.description}"] if args.description else []),
                 *([] if args.benchmark_tables else [BENCHMARK_QUIET])]
        # the outcome's status (loop.run.tryout.EXIT: 0 FASTER, 1 not worth a commit, 10 CRASH, 11 undecided),
        # 4 refused, pytest's own code for a run that could not happen
        return run_judge(cfg, args, "ditar-try-", lambda ini_dir: pytest_command(args, cfg, *flags, ini_dir=ini_dir),
                         as_json=args.json)
