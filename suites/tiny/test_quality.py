"""Quality contracts: one test per corpus item, candidate vs the ORIGINAL baseline."""
import pytest


@pytest.mark.quality
def test_quality(ditar_item, ditar_candidate_output, ditar_baseline_output, ditar_quality):
    ditar_quality.check(ditar_item, ditar_candidate_output, ditar_baseline_output)
