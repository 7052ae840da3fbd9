"""Ten A/A perf runs of an unchanged candidate: none may be called FASTER (long: ten lanes)."""
import re

import diffusers  # noqa: F401 - preloaded so pytester's in-process runs do not re-import torch
import torch  # noqa: F401

from candidates import COMMENT_ONLY


def test_unchanged_candidate_is_never_kept_over_ten_aa_runs(research):
    """Ten A/A perf runs of a commit that changes nothing: no run may call it FASTER."""
    proj = research
    proj.commit_candidate(COMMENT_ONLY, "exact", "same code")
    verdicts = []
    for _ in range(10):
        res = proj.pytester.runpytest_inprocess("-p", "no:cacheprovider", "-m", "perf", "-k", "latency_b1")
        m = re.search(r"ditar: lane latency_b1: (\w+)", res.stdout.str())
        assert m, res.stdout.str()[-2000:]
        verdicts.append(m.group(1))
    assert "FASTER" not in verdicts, verdicts
    assert set(verdicts) <= {"NOT_FASTER", "SLOWER", "UNSTABLE"}
