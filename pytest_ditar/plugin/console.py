"""Live progress bars of a gated run (the end-of-run table is loop.run.table's).

Progress bars (tqdm) draw only when stderr is a terminal; pytest captures output while a test
runs, so each draw briefly suspends capture, as pytest's own live logging does.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

import pytest

from pytest_ditar.core.vocabulary import ENV_PROGRESS


class LiveBars:
    """tqdm bars keyed by name, drawn with pytest's capture suspended; no-ops when not a terminal.

    `set(key, done, total)` creates the bar on first use and closes it when done reaches total.
    DITAR_PROGRESS=0 turns bars off, DITAR_PROGRESS=1 forces them on.
    """

    def __init__(self, config: pytest.Config | None = None, enabled: bool | None = None) -> None:
        env = os.environ.get(ENV_PROGRESS, "")
        if enabled is None:
            # Read at configure time, when pytest's capture is suspended and stderr is the real one.
            enabled = env == "1" or (env != "0" and sys.stderr.isatty())
        self.enabled = enabled
        self._config = config
        self._bars: dict[str, Any] = {}

    def _plugin(self, name: str) -> Any:
        # Looked up when drawing: the terminal reporter does not exist yet when bars are created.
        return self._config.pluginmanager.getplugin(name) if self._config is not None else None

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        capman = self._plugin("capturemanager")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                yield
        else:
            yield

    def set(self, key: str, done: int, total: int, desc: str | None = None) -> None:
        if not self.enabled or total <= 0:
            return
        with self._uncaptured():
            bar = self._bars.get(key)
            if bar is None:
                if done >= total:
                    return
                from tqdm import tqdm

                tr = self._plugin("terminalreporter")
                if tr is not None:
                    tr.ensure_newline()  # start below pytest's line of dots, not over it
                bar = self._bars[key] = tqdm(total=total, desc=desc or key, leave=False, file=sys.stderr,
                                             dynamic_ncols=True, mininterval=0.2)
            bar.n = min(done, total)
            bar.refresh()
            if done >= total:
                bar.close()
                del self._bars[key]

    def close(self) -> None:
        with self._uncaptured():
            for bar in self._bars.values():
                bar.close()
        self._bars.clear()


BARS_KEY = pytest.StashKey[LiveBars]()


def install_bars(config: pytest.Config) -> None:
    """Call while stderr is still the real one (before configure): decides tty or not."""
    config.stash[BARS_KEY] = LiveBars(config)


def bars(config: pytest.Config) -> LiveBars:
    """The session's bars; disabled ones when none were installed."""
    b = config.stash.get(BARS_KEY, None)
    if b is None:
        b = config.stash[BARS_KEY] = LiveBars(config, enabled=False)
    return b
