"""`dit-ar try`: the working tree against the champion with the gate's own lane code and quality
contracts, reported and never recorded: no verdict, no ledger row, no git (pytest --ditar-try).

The agent's "does this help?" before it commits one hypothesis: the objective lane's speedup and CI
over the champion (the same interleaved, twinned rounds a gated run times), each lane's line, the
quality summary and the margins to each floor of the class it would claim.
"""
from __future__ import annotations

import argparse
import os
import subprocess

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.cli.experiment import pytest_command
from pytest_ditar.core.vocabulary import CLASSES


class Try(Command):
    name = "try"
    help = "time and check the working tree against the champion; records nothing (no verdict, no git)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--classification", required=True, choices=CLASSES,
                            help="the class you would claim: its floors are checked and their margins printed")
        parser.add_argument("--device", default=None)
        parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra pytest arguments after --")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = config_path(args)
        cmd = pytest_command(args, cfg, "--ditar-try")
        from pytest_ditar.config.project import load_config
        from pytest_ditar.vcs.repo import judge_env

        root = load_config(cfg).root
        os.environ.update(judge_env(root))
        rc = subprocess.call(cmd, cwd=root)
        print("ditar: try: nothing recorded, no verdict, git untouched")
        # 0 whenever it ran: a lane or an item that failed is the report (the lines above say which),
        # not an error of the command; pytest's own code for a run that could not happen
        return 0 if rc in (0, 1) else rc
