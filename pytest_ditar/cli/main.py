"""`dit-ar`: the parser, assembled from one class per subcommand, and the dispatch to it.

Each command lives in its own module (`pytest_ditar/cli/<command>.py`), which imports what it needs
at its top. This module imports only the one the command line names (all of them for `dit-ar
--help`), so `dit-ar search` or `dit-ar status` loads neither the loop, nor torch, nor the other
commands.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, NoReturn

from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import DEFAULT_CONFIG, ENV_CONFIG

if TYPE_CHECKING:
    from pytest_ditar.cli.command import Command

# name -> (its module under pytest_ditar.cli, its class), in the order `dit-ar --help` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("doctor", "Doctor"), "init": ("init", "Init"), "baseline": ("baseline", "Baseline"),
    "suite": ("suite", "Suite"), "experiment": ("experiment", "Experiment"), "try": ("trial", "Try"),
    "guard": ("guard", "Guard"),
    "profile": ("profile", "Profile"), "status": ("status", "Status"), "compare": ("compare", "Compare"),
    "demo": ("demo", "Demo"), "verify": ("verify", "Verify"), "recover": ("recover", "Recover"),
    "fetch-state": ("fetchstate", "FetchState"), "fleet": ("fleet", "Fleet"),
    "report": ("report", "Report"), "search": ("search", "Search"), "mcp": ("agent", "Mcp"),
}


def command_class(name: str) -> type[Command]:
    """The class of subcommand `name`, its module imported now."""
    module, cls = COMMANDS[name]
    command: type[Command] = getattr(importlib.import_module(f"pytest_ditar.cli.{module}"), cls)
    return command


EPILOG = """\
The loop, step by step: program.md (read it before a session). First time: `dit-ar demo`.

exit status of `experiment` (and a gated pytest), its last line `DITAR VERDICT: ...`:
  0 KEEP   1 DISCARD (reverted)   10 CRASH (reverted)   4 REFUSED (nothing judged)
  2 session bound reached, or a dit-ar usage/config error (`dit-ar: error: ...`)
`try` ends `DITAR TRY: <outcome>`: 0 FASTER, 1 not worth a commit, 10 crash, 11 undecided
`demo`: 0 when its showcase came out as shown, 1 saying why not
"""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, that subcommand's flags alone (the others are names)."""
    p = argparse.ArgumentParser(prog="dit-ar", description="DiT inference autoresearch gates (pytest-ditar)",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=os.environ.get(ENV_CONFIG, DEFAULT_CONFIG),
                   help="config file (default: %(default)s)")
    p.add_argument("--tag", default=None, help="session tag (default: from the autoresearch/<tag> branch)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        if only is None or name == only:
            command_class(name).setup_parser(sub)
        else:
            sub.add_parser(name)
    return p


class _Unsure(Exception):
    pass


class _PreParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Unsure(message)


def named_command(argv: list[str]) -> str | None:
    """The subcommand `argv` names, read past the top-level options; None where that is not plain
    (no command, `--help` or an unknown option before it): the whole parser then reads `argv`."""
    pre = _PreParser(add_help=False)
    pre.add_argument("--config")
    pre.add_argument("--tag")
    pre.add_argument("command", nargs="?")
    pre.add_argument("rest", nargs=argparse.REMAINDER)
    try:
        ns, unknown = pre.parse_known_args(argv)
    except _Unsure:
        return None
    return ns.command if ns.command in COMMANDS and not unknown else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    only = named_command(argv)
    args = build_parser(only).parse_args(argv)
    if only is not None and args.command != only:  # never expected: read again with every command's flags
        args = build_parser().parse_args(argv)
    command = command_class(args.command)
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
