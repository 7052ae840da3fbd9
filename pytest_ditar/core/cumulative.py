"""The one cumulative speedup to cite: the champion over the original baseline, chained.

Each KEEP's speedup is its objective lane's median ratio over the champion before it, with a 95%
CI, measured in its own run with both sides in the same rounds. It is cited net of the harness's
round trip (core.roundtrip: the same fixed cost in every call of both sides shrinks a short call's
ratio toward 1, so a product of gross ratios falls short of an outside timing of the two commits),
its interval scaled with it, where every kept row has the net figure; the gross product is stated
beside it. The champion over the baseline is their product; its 95% CI combines the runs' intervals
in log space as independent estimates (each run's half-widths, each side apart, taken as 1.96
standard errors and added in quadrature), which is a
confidence interval for the product, unlike the product of the bounds. The stored medians of the
baseline and the champion were timed in different runs, under whatever load each had: `status`
shows their ratio beside this one, never in its place. Pure: numbers in, numbers out.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_ditar.core.rerun import RunRow

Z95 = 1.959963984540054


def chained(kept: Iterable[tuple[float | None, float | None, float | None]]
            ) -> tuple[float, float | None, float | None]:
    """(speedup, ci_low, ci_high) of the product of the kept (speedup, ci_low, ci_high) steps; the CI
    is None when any step lacks a valid interval (a ratio alone cannot carry its error forward)."""
    log_sum, var_low, var_high, known = 0.0, 0.0, 0.0, True
    for m, lo, hi in kept:
        if not (m and m > 0 and math.isfinite(m)):
            raise ValueError(f"a kept speedup must be finite and > 0, got {m!r}")
        log_sum += math.log(m)
        if lo is None or hi is None or not (0 < lo <= m <= hi and math.isfinite(hi)):
            known = False
            continue
        # each side of an asymmetric interval on its own: one KEEP keeps exactly its own interval
        var_low += ((math.log(m) - math.log(lo)) / Z95) ** 2
        var_high += ((math.log(hi) - math.log(m)) / Z95) ** 2
    point = math.exp(log_sum)
    if not known:
        return point, None, None
    return point, math.exp(log_sum - Z95 * math.sqrt(var_low)), math.exp(log_sum + Z95 * math.sqrt(var_high))


@dataclass(frozen=True)
class Cited:
    """The champion over the baseline, as `status`, `compare baseline champion` and the report
    all give it: the KEEPs' paired speedups chained, net of the harness's round trip where each
    KEEP measured it (`net`), the gross product beside it."""

    speedup: float
    ci_low: float | None
    ci_high: float | None
    keeps: int
    gross: float | None = None  # the gross speedups' product, where `speedup` is net
    net: bool = False

    def text(self) -> str:
        known = self.ci_low is not None and self.ci_high is not None
        ci = f" ci95=[{self.ci_low:.3f},{self.ci_high:.3f}]" if known else ""
        return f"{self.speedup:.3f}x{ci} chained over {self.keeps} KEEP(s)"

    def basis(self) -> str:
        """What the figure is net of, and the gross product beside it ("" where it is the gross one)."""
        if not (self.net and self.gross):
            return ""
        return (f"net of the harness's round trip (each call's, both sides alike); through the harness "
                f"{self.gross:.3f}x, the verdicts' own figures chained")


def _num(x: str | int | float) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def steps(kept: Sequence[RunRow]) -> tuple[list[tuple[float | None, float | None, float | None]], bool]:
    """Each kept row's (speedup, ci_low, ci_high) to chain, and whether they are net of the round
    trip: net (the interval scaled by net/gross) only where every row has it, so one product
    never mixes the two."""
    gross = [(_num(r.metric), _num(r.ci_low), _num(r.ci_high)) for r in kept]
    scaled: list[tuple[float | None, float | None, float | None]] = []
    for r, (m, lo, hi) in zip(kept, gross):
        n = _num(r.net)
        if n is None or n <= 0 or m is None or m <= 0:
            return gross, False
        f = n / m
        scaled.append((n, None if lo is None else lo * f, None if hi is None else hi * f))
    return scaled, bool(scaled)


def cite(kept: Sequence[RunRow]) -> Cited | None:
    """The one figure to cite from the kept ledger rows (metric, ci_low, ci_high, net), oldest first;
    None before any KEEP or where a kept row has no speedup."""
    if not kept:
        return None
    chosen, is_net = steps(kept)
    try:
        point, lo, hi = chained(chosen)
        gross = chained((_num(r.metric), None, None) for r in kept)[0]
    except ValueError:
        return None
    return Cited(point, lo, hi, len(kept), gross if is_net else None, is_net)
