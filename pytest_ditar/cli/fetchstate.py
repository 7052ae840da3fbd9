"""`dit-ar fetch-state`: bring a tag's research state from a remote into a fresh clone (CI), verified."""
from __future__ import annotations

import argparse

from pytest_ditar.cli.command import Command, config_path, open_session
from pytest_ditar.config.project import load_config
from pytest_ditar.loop.judge.ci import write_outputs
from pytest_ditar.loop.run.verify import verify
from pytest_ditar.loop.share.remote import fetch_state


class FetchState(Command):
    name = "fetch-state"
    help = "fetch refs/ditar/* from a remote, restore the tag's state directory from it and verify it (CI)"
    description = ("A fresh clone has no .autoresearch/ (it is git-ignored). This fetches the state's backup "
                   "(refs/ditar/<tag>, pushed from the research clone with `git push origin 'refs/ditar/*'`), "
                   "writes it into the state directory, fetches the commits it names where the clone lacks them, "
                   "and verifies it, so that `pytest --ditar-guard --ditar-tag=<tag>` can run (docs/ci.md).")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--remote", default="origin", help="remote name or URL (default: %(default)s)")
        # also after the subcommand, where a CI line puts it; `dit-ar --tag T fetch-state` works too
        parser.add_argument("--tag", default=argparse.SUPPRESS,
                            help="the tag to restore (default: $DITAR_TAG, else the one tag the remote holds)")
        parser.add_argument("--force", action="store_true",
                            help="write the fetched state over an existing state directory")
        parser.add_argument("--sample", type=int, default=0,
                            help="also run all of `dit-ar verify`'s checks, re-generating N baseline items "
                                 "(needs the model; default %(default)s: the state's own checks only)")
        parser.add_argument("--device", default=None, help="with --sample: cpu, cuda or cuda:N")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg = load_config(config_path(args))
        paths, ok = fetch_state(cfg, args.remote, args.tag, force=args.force)
        if ok and args.sample > 0:
            args.tag = paths.tag
            sess = open_session(args, args.device)
            try:
                ok = verify(sess, sample=args.sample) == 0
            finally:
                sess.close()
        if not ok:
            print(f"fetch-state: the state of tag {paths.tag} fails to verify; the guard would refuse it")
            return 1
        print(f"fetch-state: tag {paths.tag} verifies; next: pytest --ditar-guard --ditar-tag={paths.tag}")
        import os

        write_outputs(os.environ, {"tag": paths.tag})  # GitHub Actions: the guard step reads it (action.yml)
        return 0
