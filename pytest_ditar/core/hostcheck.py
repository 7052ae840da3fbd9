"""`dit-ar doctor`'s answer about the host now (issue 50): can a modest win be judged on it, and if
not, what to do. From figures the judge measured a moment ago (the load, an A/A probe of the
baseline's code and the champion's speed beside it, loop.perf.hostprobe) and the ones the baseline
stored. Pure: numbers in, a frozen answer out; the wording is read from its fields.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MODEST = 0.10  # "a modest win": 1.10x, about what an honest exact edit gains late in a session
NOISIER = 1.5  # the smallest resolvable win now this many times the baseline's: the host is noisier
SLOWER = 1.15  # the baseline's code this much slower than at baseline time: the host is slower
BUILD = 1.15  # the champion slower than kept by this much more than the baseline's code: not the host

QUIET, BUSY, NOISY, SLOW_HOST, NOISY_BASELINE, CHAMPION = (
    "quiet", "busy", "noisy", "slower host", "noisy baseline", "champion slower")


@dataclass(frozen=True)
class HostNow:
    """What the probe measured, and what the baseline stored."""
    cores: int
    load1: float | None  # the 1-minute load average before the probe
    load_then: float | None  # the median load over the baseline's A/A rounds
    reach_now: float | None  # the smallest win resolvable now, as a fraction (0.05: 1.05x)
    reach_then: float | None  # the same from the baseline's stored A/A
    anchor_ratio: float | None  # the baseline's code: median now / median at baseline time
    champion_ratio: float | None = None  # the champion: median now / its stored median (None: it is the baseline)

    @property
    def busy(self) -> bool:
        """Every core has a runnable task: a worker shares its core with something else."""
        return self.load1 is not None and self.load1 >= self.cores

    @property
    def causes(self) -> tuple[str, ...]:
        """Everything measured that stands between this host and a modest win, most pressing first."""
        out = []
        if self.busy:
            out.append(BUSY)
        if self.reach_now is not None and self.reach_now > MODEST:
            out.append(NOISY)
        if self.anchor_ratio is not None and self.anchor_ratio > SLOWER:
            out.append(SLOW_HOST)
        if (self.champion_ratio is not None and self.anchor_ratio is not None
                and self.champion_ratio > self.anchor_ratio * BUILD):
            out.append(CHAMPION)
        if self.reach_then is not None and self.reach_then > MODEST and NOISY not in out and BUSY not in out:
            out.append(NOISY_BASELINE)  # the host is quiet now, the baseline was taken on a noisy one
        return tuple(out)

    @property
    def modest_judgeable(self) -> bool:
        """A 1+MODEST win can be told from this host's noise now (the probe's own figure)."""
        return self.reach_now is not None and self.reach_now <= MODEST and BUSY not in self.causes

    def verdict(self) -> str:
        """One plain sentence: can a modest win be judged now, what was measured against it, what to do."""
        modest = f"a {1 + MODEST:.2f}x win"
        now = f"about 1+{self.reach_now * 100:.1f}%" if self.reach_now is not None else "not measured"
        then = f"1+{self.reach_then * 100:.1f}%" if self.reach_then is not None else "n/a"
        reach = f"smallest resolvable win now {now}, at baseline time {then}"
        causes = self.causes
        if not causes:
            return f"quiet: {modest} can be judged now ({reach})"
        can = f"{modest} {'can' if self.modest_judgeable else 'cannot'} be judged now ({reach})"
        return f"{can}; " + "; ".join(_FACTS[c](self) for c in causes) + "; do: " + _DO[causes[0]]


_FACTS: dict[str, Callable[[HostNow], str]] = {
    BUSY: lambda h: (f"the host is busy (load {h.load1:.1f} on {h.cores} cores"
                     + (f", {h.load_then:.1f} at baseline time" if h.load_then is not None else "") + ")"),
    NOISY: lambda h: "the host is noisier than at baseline time" if h.reach_then is not None and
    h.reach_now is not None and h.reach_now > h.reach_then * NOISIER else "the host is noisier than a modest win",
    SLOW_HOST: lambda h: (f"the host is slower than at baseline time (the baseline's code {h.anchor_ratio:.2f}x as "
                          "slow: the host, not a build)"),
    CHAMPION: lambda h: (f"the champion runs {h.champion_ratio:.2f}x as slow as kept while the baseline's code runs "
                         f"{h.anchor_ratio:.2f}x: the champion's build, not the host"),
    NOISY_BASELINE: lambda h: "the baseline's own A/A noise is large",
}
_DO = {
    BUSY: "stop the other load, or wait until it ends, then `dit-ar doctor` again",
    NOISY: "wait for a quieter host (or stop what shares it), then `dit-ar doctor` again",
    SLOW_HOST: "wait for the host's usual speed; if it stays so, re-take the baseline on it (`dit-ar baseline "
               "--force`, before the first KEEP)",
    CHAMPION: "the champion that runs is not the one kept: `dit-ar verify`, and report it",
    NOISY_BASELINE: "re-take the baseline on this quieter host now (`dit-ar baseline --force`, before the first KEEP)",
}
