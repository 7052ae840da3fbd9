"""Attacks on the timing: caches, precomputation, clocks, timing detection, early returns and
interference with the champion's worker. Each runs `dit-ar experiment` on the tiny suite."""
from __future__ import annotations

import pytest

from .attacks import (
    A01_MEMO,
    A02_FILE_CACHE,
    A03_PRECOMPUTE,
    A04_CLOCK,
    A05_COUNT_SKIP,
    A06_EARLY_RETURN,
    A07_BUSY_DAEMON,
    A08_STOP_CHAMPION,
    A18_JUDGE_SECRETS,
    A19_SIBLING_STOPPED,
    A20_BACKGROUND_THREAD,
    arm,
)
from .conftest import (
    KEYS,
    assert_decided_and_reverted,
    assert_not_kept,
    engaged,
    experiment,
)

pytestmark = pytest.mark.adversarial

DISCARD, EITHER = ("DISCARD",), ("DISCARD", "CRASH")

CASES = [  # id, source, the reason must name one of, verdicts accepted, evidence that the trick was played
    ("01-memoize-repeats", A01_MEMO, KEYS["caching"], DISCARD, "memo_hit"),
    ("02-cross-process-cache", A02_FILE_CACHE, KEYS["caching"], DISCARD, "file_cache_hit"),
    ("03-precompute-in-build", A03_PRECOMPUTE, KEYS["precompute"], EITHER, "replay"),
    ("04-clock-patching", A04_CLOCK, KEYS["clock"], EITHER, "clock_warped"),
    ("05-count-calls-skip-steps", A05_COUNT_SKIP, KEYS["audit"], DISCARD, "skipping_steps"),
    ("06-early-return-constant", A06_EARLY_RETURN, KEYS["early_return"], DISCARD, "early_return"),
    ("07-detached-busy-loop", A07_BUSY_DAEMON, KEYS["interference"], EITHER, "busy_progress"),
    ("08-sigstop-champion", A08_STOP_CHAMPION, KEYS["champion_process"], EITHER, "stopper_progress"),
    ("18-judge-secrets-cache", A18_JUDGE_SECRETS, KEYS["secret"], EITHER, "replay_predicted"),
    ("19-sibling-stopped-skip-steps", A19_SIBLING_STOPPED, KEYS["audit"], DISCARD, "timed_detected"),
    ("20-background-thread-precompute", A20_BACKGROUND_THREAD, KEYS["precompute"], EITHER, "replay"),
]


@pytest.mark.parametrize("source,keys,statuses,trick", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_timing_attack_is_not_kept(research, scratch, source, keys, statuses, trick):
    proj = research
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, arm(source, scratch), "a faster pipeline, honestly")
    if not engaged(scratch, trick):  # the defences left the trick no opening: an honest A/A
        keys, statuses = keys + KEYS["aa"], EITHER
    assert_not_kept(j, keys, scratch, statuses)
    assert_decided_and_reverted(proj, j, base, before)  # nothing lost: one new row, back on the champion
