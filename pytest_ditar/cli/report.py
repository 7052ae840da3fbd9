"""`dit-ar report`: the session's HTML page (progress plot, ledger, image diffs)."""
from __future__ import annotations

import argparse

from pytest_ditar.cli.command import Command, light_session
from pytest_ditar.core.errors import DitarError
from pytest_ditar.report.html import build_report
from pytest_ditar.store.paths import TagPaths


class Report(Command):
    name = "report"
    help = "HTML report (progress plot, ledger, image diffs) in .autoresearch/<tag>/report/"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out", default=None, help="output directory (default: <state dir>/report)")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg, _suite, tag = light_session(args)
        state = TagPaths.of(cfg.root, cfg.state_dir, tag).dir
        if not state.is_dir():
            raise DitarError(f"{state}: no research state for tag '{tag}' "
                             "(run `dit-ar init` and `dit-ar baseline` first)")
        index = build_report(state, args.out, lane=cfg.objective_lane, target=cfg.target, title=f"pytest-ditar: {tag}")
        print(f"report {index}")
        print(f"plot   {index.parent / 'progress.png'}")
        return 0
