"""`dit-ar verify`: re-check what the verdicts rest on, and re-generate a few baseline items."""
from __future__ import annotations

import argparse

from pytest_ditar.cli.command import Command, open_session
from pytest_ditar.loop.run.verify import verify


class Verify(Command):
    name = "verify"
    help = "re-check snapshot hashes, ledger chain, fixed paths; re-generate sample baseline items"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sample", type=int, default=3,
                            help="baseline items to re-generate (default: %(default)s)")
        parser.add_argument("--device", default=None)

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        sess = open_session(args, args.device)
        try:
            return verify(sess, sample=args.sample)
        finally:
            sess.close()  # its worker processes
