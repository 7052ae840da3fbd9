"""An attack on a guard lane's burden of proof: a real win on the objective lane, and on a guard
lane a slowdown beyond the tolerance hidden in noise the candidate makes itself. A guard lane that
"cannot prove a regression" used to pass, so the noisier the slowdown, the safer the KEEP."""
from __future__ import annotations

import pytest

from .attacks import GEN_RETURN, GEN_SIG, STOCK
from .conftest import experiment

pytestmark = pytest.mark.adversarial

# Dropping the baseline's redundant pass halves every call (a real 2x on both lanes). On batches
# over 1 the candidate then sleeps a random 1.0-3.4 times its own call, drawn from the OS: its
# median call there is ~1.4x the champion's (a 30% slowdown, six times the 5% tolerance) and no
# two rounds alike.
JITTERED = STOCK.replace(GEN_SIG, GEN_SIG + "        import time as _t; _t0 = _t.perf_counter()\n").replace(
    GEN_RETURN,
    "        if len(request.labels) > 1:\n"
    "            _u = int.from_bytes(__import__('os').urandom(2), 'big') / 65535\n"
    "            _t.sleep((1.0 + 2.4 * _u) * (_t.perf_counter() - _t0))\n" + GEN_RETURN)
assert JITTERED.count("_t.sleep") == 1


def test_a_slowdown_hidden_in_the_candidates_own_noise_on_a_guard_lane_is_not_kept(slow_research):
    proj = slow_research
    base = proj.head()
    j = experiment(proj, JITTERED, "Drop the redundant pass")
    assert j.status != "KEEP", "the attack was KEPT" + j.show()
    assert "throughput_b8" in j.reason, j.show()
    assert proj.head() == base


# The same real 2x, and on batch 1 (the objective lane) every third call sleeps 8 times its own
# call: the median call is the 2x win, the mean call 1.7x the champion's. Drawn at random instead
# (40% of calls), it was KEPT at 1.894x; a share the lane's rounds happen to miss still is (a lane
# that stops after a dozen rounds may see few of them: docs/trust.md).
TAILED = STOCK.replace(GEN_SIG, GEN_SIG + "        import time as _t; _t0 = _t.perf_counter()\n").replace(
    GEN_RETURN,
    "        if len(request.labels) == 1:\n"
    "            self._calls = getattr(self, '_calls', 0) + 1\n"
    "            if self._calls % 3 == 0:\n"
    "                _t.sleep(8.0 * (_t.perf_counter() - _t0))\n" + GEN_RETURN)
assert TAILED.count("_t.sleep") == 1


def test_a_win_in_the_median_call_that_is_a_loss_in_the_mean_is_not_kept(slow_research):
    proj = slow_research
    base = proj.head()
    j = experiment(proj, TAILED, "Drop the redundant pass")
    assert j.status == "DISCARD" and "its mean call is slower" in j.reason, j.show()
    assert proj.head() == base
