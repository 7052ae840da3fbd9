"""`dit-ar recover`: restore a deleted or damaged state directory from refs/ditar/<tag>."""
from __future__ import annotations

import argparse

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.config.project import load_config
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.loop.run.verify import recover
from pytest_ditar.store.paths import TagPaths


class Recover(Command):
    name = "recover"
    help = "restore the tag's state directory from its backup in git (refs/ditar/<tag>)"
    description = ("Every baseline and every recorded run is backed up to the hidden git ref refs/ditar/<tag>. "
                   "This writes that backup back into .autoresearch/<tag>/ when it is missing or fails to verify.")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--force", action="store_true", help="restore even over a state directory that verifies")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = load_config(config_path(args))
        return recover(cfg.root, TagPaths.of(cfg.root, cfg.state_dir, resolve_tag(cfg, args.tag)), force=args.force)
