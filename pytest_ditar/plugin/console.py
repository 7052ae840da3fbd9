"""Terminal output of a gated run: the end-of-run table and live progress bars.

The table is plain ASCII in fixed columns so it survives CI logs, `tee` and an agent's reader.
Progress bars (tqdm) draw only when stderr is a terminal; pytest captures output while a test
runs, so each draw briefly suspends capture, as pytest's own live logging does.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Any, Iterator

import pytest


def _f(x: Any, spec: str) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "-"
    return format(v, spec) if math.isfinite(v) else str(v)


def run_table(lanes: list[Any], quality: list[Any], decision: Any, cls: str) -> list[str]:
    """Lines of the end-of-run table: one row per lane, then quality, then the verdict.

    `lanes` are perf.LaneResult (or anything with `.outcome`), `quality` quality.ContractResult.
    """
    rows = [("lane", "role", "verdict", "speedup", "ci95", "median ms", "champion", "peak GiB")]
    for lr in lanes:
        oc = getattr(lr, "outcome", None)
        if oc is None:
            continue
        samples = getattr(getattr(lr, "measurement", None), "samples", None) or []
        med = sorted(samples)[len(samples) // 2] * 1e3 if samples else None
        ci = f"[{_f(oc.ci_low, '.3f')}, {_f(oc.ci_high, '.3f')}]" if oc.ci_low is not None else "-"
        rows.append((oc.name, "objective" if oc.objective else "guard", oc.verdict,
                     f"{_f(oc.speedup, '.3f')}x" if oc.speedup is not None else "-", ci, _f(med, ".2f"),
                     getattr(lr, "champion_source", "-"), _f(oc.peak_vram_gib, ".2f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["ditar: ---- run summary " + "-" * 40]
    if len(rows) > 1:
        out += ["ditar:   " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    else:
        out.append("ditar:   no lane was timed")
    total = len(quality)
    passed = sum(1 for r in quality if r.passed)
    if total:
        worst = min(quality, key=lambda r: r.metrics.psnr if r.metrics.psnr == r.metrics.psnr else -1.0)
        out.append(f"ditar:   quality {passed}/{total} passed (class {cls}); lowest PSNR {_f(worst.metrics.psnr, '.2f')} dB "
                   f"on {worst.item_id}")
    else:
        out.append(f"ditar:   quality not run (class {cls})")
    if decision is not None:
        out.append(f"ditar:   verdict {decision.status}" + (f": {decision.reason}" if decision.reason else ""))
    return out


class LiveBars:
    """tqdm bars keyed by name, drawn with pytest's capture suspended; no-ops when not a terminal.

    `set(key, done, total)` creates the bar on first use and closes it when done reaches total.
    DITAR_PROGRESS=0 turns bars off, DITAR_PROGRESS=1 forces them on.
    """

    def __init__(self, config: pytest.Config | None = None, enabled: bool | None = None) -> None:
        env = os.environ.get("DITAR_PROGRESS", "")
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
