"""`dit-ar`: the parser, assembled from one class per subcommand, and the dispatch to it.

Each command lives in its own module (`pytest_ditar/cli/<command>.py`) and imports what it needs
inside `run`, so building the parser stays free of torch and pytest.
"""
from __future__ import annotations

import argparse
import os
import sys

from pytest_ditar.cli.baseline import Baseline
from pytest_ditar.cli.command import Command
from pytest_ditar.cli.compare import Compare
from pytest_ditar.cli.demo import Demo
from pytest_ditar.cli.doctor import Doctor
from pytest_ditar.cli.experiment import Experiment
from pytest_ditar.cli.fetchstate import FetchState
from pytest_ditar.cli.init import Init
from pytest_ditar.cli.profile import Profile
from pytest_ditar.cli.recover import Recover
from pytest_ditar.cli.report import Report
from pytest_ditar.cli.search import Search
from pytest_ditar.cli.status import Status
from pytest_ditar.cli.suite import Suite
from pytest_ditar.cli.trial import Try
from pytest_ditar.cli.verify import Verify
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import DEFAULT_CONFIG, ENV_CONFIG

# In the order `dit-ar --help` lists them.
COMMANDS: tuple[type[Command], ...] = (Doctor, Init, Baseline, Suite, Experiment, Try, Profile, Status, Compare, Demo,
                                       Verify, Recover, FetchState, Report, Search)


EPILOG = """\
The loop, step by step: program.md (read it before a session). First time: `dit-ar demo`.

exit status of `experiment` (and a gated pytest), its last line `DITAR VERDICT: ...`:
  0 KEEP   1 DISCARD (reverted)   10 CRASH (reverted)   4 REFUSED (nothing judged)
  2 session bound reached, or a dit-ar usage/config error (`dit-ar: error: ...`)
`try` ends `DITAR TRY: <outcome>`: 0 FASTER, 1 not worth a commit, 10 crash, 11 undecided
`demo`: 0 when its showcase came out as shown, 1 saying why not
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dit-ar", description="DiT inference autoresearch gates (pytest-ditar)",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=os.environ.get(ENV_CONFIG, DEFAULT_CONFIG),
                   help="config file (default: %(default)s)")
    p.add_argument("--tag", default=None, help="session tag (default: from the autoresearch/<tag> branch)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.setup_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = next(c for c in COMMANDS if c.name == args.command)
    try:
        return command.run(args)
    except DitarError as exc:
        print(f"dit-ar: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dit-ar: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
