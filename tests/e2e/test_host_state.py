"""Issue 41: the device's and the host's state per timed round, read by the judge, in a gated run's
summary.json (on this CPU host: the load average and, where the host says it, the CPU frequency;
NVML's clocks, reasons, power and energy on a GPU: core.devstate, hardware.devstate); and the
next-step line after a DISCARD names `dit-ar profile --against champion`."""
import json

from pytest_ditar.hardware.devstate import cpu_mhz

from candidates import COMMENT_ONLY
from jsonschemas import available, validate


def test_a_gated_runs_summary_holds_each_rounds_host_state(research):
    proj = research
    sha, res, line = proj.experiment(COMMENT_ONLY, "exact", "the same code again")
    out = res.stdout + res.stderr
    assert line.startswith("DITAR VERDICT: DISCARD"), out[-3000:]
    run = max((proj.root / ".autoresearch/t/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    summary = json.loads(run.read_text())
    if available():
        validate(summary, "summary")
    m = summary["lanes"]["latency_b1"]["measurement"]
    states = m["rounds_state"]
    assert len(states) == len(m["samples"]) == len(m["champion_samples"]) > 0  # one per timed round
    assert all(s["load1"] >= 0 for s in states)
    if cpu_mhz() is not None:  # /sys cpufreq or /proc/cpuinfo: a VM may say neither
        assert all(s["cpu_mhz"] > 0 for s in states)
    assert not any("sm_mhz" in s or "reasons" in s for s in states)  # no GPU here: no NVML fields made up
    assert m["energy_j"] == {} and m["energy_per_image_j"] == {}
    nxt = next(ln for ln in out.splitlines() if ln.startswith("ditar: next: "))
    assert f"`dit-ar profile --commit {sha[:7]} --against champion`" in nxt, nxt

