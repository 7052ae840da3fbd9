"""A worker's torch intra-op threads: one on CPU, a share of the host's cores on a GPU, where a run
builds four workers at once and four full pools spin against each other."""
import pytest

from pytest_ditar.runtime.worker_process import BUILDS_AT_ONCE, worker_threads


def test_one_thread_on_cpu_and_a_share_of_the_cores_on_a_gpu():
    assert worker_threads("cpu", 16) == 1
    assert worker_threads("cuda", 16) == 16 // BUILDS_AT_ONCE == 4
    assert worker_threads("cuda:1", 64) == 16
    assert worker_threads("cuda", 2) == 1  # never none


def test_the_setting_wins_on_both_and_a_bad_one_is_named_with_the_fix():
    assert worker_threads("cpu", 16, "3") == 3 and worker_threads("cuda", 16, "3") == 3
    for bad in ("0", "-2", "many", "1.5"):
        with pytest.raises(ValueError, match=rf"DITAR_CPU_THREADS='{bad}': give a whole number of threads, at least 1"):
            worker_threads("cuda", 16, bad)
