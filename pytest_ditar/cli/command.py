"""What every `dit-ar` subcommand is, and the look-ups several of them share.

cli.main imports a command's module only when that command runs (every one for `dit-ar --help`),
so a command module imports what it needs at its top. Every command module imports this one:
it stays light (the config and tag look-ups), and the session (numpy, the workers) loads inside
`open_session`, for the commands that generate (`dit-ar search` and `dit-ar status` must start
fast).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pytest_ditar.config.project import load_config
from pytest_ditar.config.suite import load_suite
from pytest_ditar.loop.integrity.tags import resolve_tag


class Command:
    """One subcommand: its name, its help line, its flags and what it does (asv's shape)."""

    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str | None] = None

    @classmethod
    def setup_parser(cls, subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
        parser = subparsers.add_parser(cls.name, help=cls.help, description=cls.description)
        cls.add_arguments(parser)
        return parser

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The command's own flags; a command without any keeps this."""

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        """Do the command; the return value is the process's exit status."""
        raise NotImplementedError


def config_path(args: argparse.Namespace) -> Path:
    return Path(args.config).resolve()


def open_session(args: argparse.Namespace, device: str | None = None) -> Any:
    """The full session (suite, model settings, device): for the commands that generate."""
    # start-up: every command module imports this one; the session (numpy, the workers) only those that generate
    from pytest_ditar.loop.run.session import open_session

    return open_session(config_path(args), tag=args.tag, device=device)


def light_session(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """Config, suite and tag without touching torch (status and report must be quick)."""
    cfg = load_config(config_path(args))
    return cfg, load_suite(cfg.suite_dir), resolve_tag(cfg, args.tag)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Under `--json` stdout is the document's: what the command (or a process it starts) writes
    there meanwhile goes to stderr, at the file descriptor, so a child's output cannot slip in."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def print_document(make: Callable[[], tuple[Mapping[str, object], int]]) -> int:
    """Run `make` (the command's work, returning its document and exit status) with stdout sent to
    stderr, then print the document alone on stdout; returns the status."""
    with stdout_to_stderr():
        doc, code = make()
    print(json.dumps(doc, indent=1, default=str))
    return code
