"""`dit-ar search`: the handbook search subcommand (no torch imports here).

`pytest_ditar/cli.py` registers it with ``add_search_parser(subparsers)`` and calls
``run_search(args, handbook_dir)`` with the handbook directory resolved from the config.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_ditar.knowledge import search as knowledge

CLASSES = ("exact", "numerical", "approximate", "quantization", "reference")


def add_search_parser(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "search",
        help="BM25 search over the handbook sections",
        description="Search the research handbook (BM25 over page sections). Write the mechanism, "
        "the bottleneck and model/hardware terms, e.g. 'cuda graphs scheduler batch 1'.",
    )
    p.add_argument("query", help="search terms")
    p.add_argument("--k", type=int, default=5, help="number of hits (default 5)")
    p.add_argument("--json", action="store_true", help="print hits as a JSON list")
    # dest differs from "tag" because the top-level dit-ar parser has its own --tag (session tag)
    p.add_argument("--tag", dest="search_tag", default=None, help="only pages carrying this tag")
    p.add_argument("--class", dest="cls", default=None, choices=CLASSES, help="only pages of this class")
    return p


def run_search(args: argparse.Namespace, handbook_dir: Path) -> int:
    handbook_dir = Path(handbook_dir)
    if not handbook_dir.is_dir():
        print(f"dit-ar search: handbook directory not found: {handbook_dir}", file=sys.stderr)
        return 2
    k = getattr(args, "k", 5)
    if k is None or k < 1:
        print("dit-ar search: --k must be >= 1", file=sys.stderr)
        return 2
    hits = knowledge.search(
        handbook_dir,
        args.query,
        k=k,
        tag=args.search_tag if hasattr(args, "search_tag") else getattr(args, "tag", None),
        cls=getattr(args, "cls", None),
    )
    if getattr(args, "json", False):
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
