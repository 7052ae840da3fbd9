"""Where the plugin keeps a run's session and gate on pytest's config, and what a ditar test item
is keyed by. A leaf: hooks, fixtures and the xdist halves all read these here, so none of them
imports another for it."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_ditar.loop.judge.gate import Gate
    from pytest_ditar.loop.run.session import DitarSession

RUN_PLUGIN = "ditar-gate"  # the name a ditar run's GatePlugin is registered under: the hooks' way to it
SESSION_KEY = pytest.StashKey["DitarSession"]()
GATE_KEY = pytest.StashKey["Gate"]()
# pytest's option parser, kept from pytest_load_initial_conftests (the hook that hands it over) for
# plugin.artifacts, which asks it for pytest-benchmark's --benchmark-json value
PARSER_KEY = pytest.StashKey[pytest.Parser]()


def keep_parser(config: pytest.Config, parser: pytest.Parser) -> None:
    config.stash[PARSER_KEY] = parser


def get_session(config: pytest.Config) -> "DitarSession":
    """The run's session; a usage error where no ditar config is active."""
    sess = config.stash.get(SESSION_KEY, None)
    if sess is None:
        raise pytest.UsageError("pytest-ditar is not configured (pass --ditar-config PATH)")
    return sess


def get_gate(config: pytest.Config) -> "Gate | None":
    """The run's gate; None where no ditar config is active."""
    return config.stash.get(GATE_KEY, None)


def item_key(item: pytest.Item) -> tuple[str, str] | None:
    """("item", corpus id) for a quality test, ("lane", name) for a perf test, else None."""
    cs = getattr(item, "callspec", None)
    if cs is None:
        return None
    if "ditar_item" in cs.params and item.get_closest_marker("quality"):
        return "item", cs.params["ditar_item"].id
    if "ditar_lane" in cs.params and item.get_closest_marker("perf"):
        return "lane", cs.params["ditar_lane"].name
    return None


def collected_keys(items: list[pytest.Item]) -> tuple[list[str], list[str]]:
    """The corpus ids and lane names that `items` will run."""
    keys = [k for k in map(item_key, items) if k is not None]
    return [v for kind, v in keys if kind == "item"], [v for kind, v in keys if kind == "lane"]
