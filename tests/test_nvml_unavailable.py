"""Without NVML a CUDA lane's exclusivity cannot be checked, and such a lane is UNSTABLE with that
reason (never a silent pass); `dit-ar doctor` says so in its "gpu exclusivity" row. There is no
GPU here: the decision is tested with NVML made unavailable, and the row through the CLI."""
import os
import re
import sys
from types import SimpleNamespace

import pytest

from pytest_ditar.core.decision import LaneOutcome, QualityOutcome, decide
from pytest_ditar.hardware import exclusivity


def _faster():
    return SimpleNamespace(outcome=LaneOutcome("latency_b1", True, "FASTER", 1.5, 1.4, 1.6, "faster"), comparison={})


def test_a_cuda_lane_without_pynvml_is_unstable_and_the_gate_discards_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    report = exclusivity.check("cuda:0")
    assert not report.checked and not report.ok
    assert report.message().startswith("GPU exclusivity cannot be checked: NVML unavailable (pynvml not importable: ")
    assert report.message().endswith("; pip install nvidia-ml-py)")
    lane = exclusivity.apply(_faster(), report)
    assert lane.outcome.verdict == "UNSTABLE" and lane.outcome.reason == report.message()
    d = decide(guards=[], quality=QualityOutcome(6, 6, ()), lanes=[lane.outcome], errors=[], vram_budget_gib=None,
               expected_items=6)
    assert d.status == "DISCARD" and d.reason == f"lane latency_b1 unstable: {report.message()}"


def test_nvml_that_fails_to_start_or_to_answer_is_unstable_too(monkeypatch):
    def init():
        raise RuntimeError("Driver Not Loaded")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=init))
    with exclusivity.Watch("cuda:1") as watch:
        pass
    assert watch.report.message() == ("GPU exclusivity cannot be checked: NVML unavailable (nvmlInit failed: "
                                      "RuntimeError: Driver Not Loaded)")
    assert exclusivity.apply(_faster(), watch.report).outcome.verdict == "UNSTABLE"

    def lister(gpu):
        raise OSError("query failed")

    report = exclusivity.check("cuda:0", lister, allowed={os.getpid()})
    assert not report.ok and report.message() == "GPU exclusivity cannot be checked: NVML query failed: query failed"
    # a CPU lane has no GPU to share: not checked, and fine
    assert exclusivity.check("cpu").ok and exclusivity.apply(_faster(), exclusivity.check("cpu")).outcome.verdict == "FASTER"


@pytest.mark.parametrize("cuda,status", [(2, "FAIL"), (0, "warn")])
def test_doctor_row_fails_only_where_a_cuda_lane_would_be_unstable(cuda, status):
    row = exclusivity.doctor_row("pass", "warn", "FAIL", cuda_devices=cuda, probe=lambda: (None, "NVML unavailable (x)"))
    assert row[:2] == ("gpu exclusivity", status) and row[2].startswith("GPU exclusivity cannot be checked" if cuda
                                                                        else "NVML unavailable (x); no CUDA device")
    ok = exclusivity.doctor_row("pass", "warn", "FAIL", cuda_devices=cuda, probe=lambda: (lambda gpu: [], ""))
    assert ok[1] == "pass"


def test_doctor_reports_nvml_it_cannot_import(project, monkeypatch, tmp_path):
    fake = tmp_path / "fake-site"
    fake.mkdir()
    (fake / "pynvml.py").write_text("raise ImportError('no NVML in this image')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    res = project.ditar("doctor")
    row = re.search(r"^gpu exclusivity +(\S+) +(.*)$", res.stdout, flags=re.M)
    assert row, res.stdout + res.stderr
    why = "NVML unavailable (pynvml not importable: no NVML in this image; pip install nvidia-ml-py)"
    assert row.groups() == ("warn", f"{why}; no CUDA device here, so CPU lanes are not affected")
