"""`dit-ar search`: BM25 over the handbook's sections (no torch or pytest imports on this path)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.config.project import load_config
from pytest_ditar.core.vocabulary import HANDBOOK_CLASSES
from pytest_ditar.knowledge import search as knowledge

DEFAULT_HANDBOOK = Path("knowledge/handbook")  # without a config: relative to the working directory


class Search(Command):
    name = "search"
    help = "BM25 search over the handbook sections"
    description = ("Search the research handbook (BM25 over page sections). Write the mechanism, the bottleneck and "
                   "model/hardware terms, e.g. 'cuda graphs scheduler batch 1'.")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("query", help="search terms")
        parser.add_argument("--k", type=int, default=5, help="number of hits (default 5)")
        parser.add_argument("--json", action="store_true", help="print hits as a JSON list")
        # dest differs from "tag" because the top-level dit-ar parser has its own --tag (session tag)
        parser.add_argument("--tag", dest="search_tag", default=None, help="only pages carrying this tag")
        parser.add_argument("--class", dest="cls", default=None, choices=HANDBOOK_CLASSES,
                            help="only pages of this class")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        handbook = DEFAULT_HANDBOOK
        path = config_path(args)
        if path.is_file():
            cfg = load_config(path)
            handbook = cfg.root / cfg.knowledge_dir
        return cls.search_in(args, handbook)

    @staticmethod
    def search_in(args: argparse.Namespace, handbook_dir: Path) -> int:
        """Print the hits for `args.query` in `handbook_dir`: 0, or 2 when there is nothing to search."""
        handbook_dir = Path(handbook_dir)
        if not handbook_dir.is_dir():
            print(f"dit-ar search: handbook directory not found: {handbook_dir}", file=sys.stderr)
            return 2
        if args.k is None or args.k < 1:
            print("dit-ar search: --k must be >= 1", file=sys.stderr)
            return 2
        hits = knowledge.search(handbook_dir, args.query, k=args.k, tag=args.search_tag, class_name=args.cls)
        if args.json:
            print(json.dumps([dict(rank=i, **h.to_dict()) for i, h in enumerate(hits, start=1)], indent=2))
            return 0
        if not hits:
            print(f"no handbook section matches {args.query!r}")
            return 0
        for i, h in enumerate(hits, start=1):
            print(f"{i}. {h.path} :: {h.heading}  (score {h.score:.3f}, class {h.cls})")
            if h.snippet:
                print(f"   {h.snippet}")
        return 0
