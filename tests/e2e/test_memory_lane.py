"""A lane of another kind through the seam (loop.perf.lanekinds, issue 40): peak memory per call at one
batch size (`kind: memory`), on the tiny suite, end to end: the baseline keeps its peaks, a gated
run measures the candidate's beside the champion's worker, a regression is a DISCARD named on the
verdict line, an honest win is KEPT with the lane OK, and the terminal table, summary.json and the
report show the figure."""
import json

import yaml

from candidates import REDUNDANT, STOCK, _patch
from conftest import make_project

LANE = {"name": "peak_b3", "kind": "memory", "batch": 3, "repeats": 3, "warmup": 1}
# The champion's code without its redundant pass (2x faster at batch 1) that, only at batch 3 (the memory lane's), holds
# 192 MiB more for the length of its call: faster where timed, heavier where its memory is measured.
HEAVIER = _patch("    def generate(self, request: Request) -> Generated:\n",
                 "    def generate(self, request: Request) -> Generated:\n"
                 "        import torch\n"
                 "        _held = torch.ones(48 * 2**20) if len(request.labels) == 3 else None  # 192 MiB, touched\n")


# The same, hiding it: before it returns it lets the buffer go and resets its process's high-water mark
# (the figure its worker reports from inside); the judge's own reading from outside still saw it.
HIDDEN = HEAVIER.replace(
    "        return Generated(latents=self._latents, images=images)",
    "        if _held is not None:\n"
    "            del _held\n"
    "            open('/proc/self/clear_refs', 'w').write('5')\n"
    "        return Generated(latents=self._latents, images=images)")


def _project(pytester, tmp_path):
    proj = make_project(pytester, mutable_source=REDUNDANT, root=tmp_path)
    suite = yaml.safe_load((proj.root / "suites/tiny/suite.yaml").read_text())
    suite["lanes"].append(LANE)
    (proj.root / "suites/tiny/suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    proj.git("commit", "-qam", "a memory lane")
    assert proj.ditar("init", "--tag", "t").returncode == 0
    res = proj.ditar("baseline")
    assert res.returncode == 0, res.stdout + res.stderr
    return proj


def test_a_memory_lane_keeps_its_peaks_discards_a_heavier_win_and_keeps_an_honest_one(pytester, model_cache,
                                                                                      tmp_path):
    proj = _project(pytester, tmp_path / "p")
    base = json.loads((proj.root / ".autoresearch/t/baseline/lanes.json").read_text())["peak_b3"]
    peaks = base["measurement"]["peaks"]["candidate"]
    assert len(peaks) == 3 and all(x > 0 for x in peaks) and base["figure"].startswith("peak "), base
    assert base["measurement"]["samples"] == []  # nothing timed: a memory lane keeps no clock

    _, res, line = proj.experiment(HEAVIER, "exact", "Drop the pass, hold a buffer")
    assert line.startswith("DITAR VERDICT: DISCARD "), res.stdout[-3000:]
    assert 'reason="guard lane peak_b3 regressed: peak ' in line and "more than the tolerance of 5%" in line, line
    summary = _last_summary(proj)
    assert summary["decision"] == "DISCARD"
    lanes = summary["lanes"]
    assert lanes["latency_b1"]["outcome"]["verdict"] == "FASTER"  # the win stands where it was timed
    heavy = lanes["peak_b3"]
    assert heavy["outcome"]["verdict"] == "REGRESSED" and heavy["outcome"]["figure"].endswith("%)"), heavy
    cand, champ = heavy["measurement"]["peaks"]["candidate"], heavy["measurement"]["peaks"]["champion"]
    assert min(cand) - max(champ) > 0.15, (cand, champ)  # about 192 MiB more, call after call

    # the attack: a worker whose own figure shows no growth; the judge's reading from outside does
    _, res, line = proj.experiment(HIDDEN, "exact", "Drop the pass, hold a buffer, hide it")
    assert line.startswith("DITAR VERDICT: DISCARD ") and "guard lane peak_b3 regressed" in line, res.stdout[-3000:]

    _, res, line = proj.experiment_judged(STOCK, "exact", "Drop the redundant pass")
    assert line.startswith("DITAR VERDICT: KEEP "), res.stdout[-3000:]
    honest = _last_summary(proj)["lanes"]["peak_b3"]
    assert honest["outcome"]["verdict"] == "OK" and "within the tolerance of 5%" in honest["outcome"]["reason"]
    table = next(ln for ln in res.stdout.splitlines() if ln.startswith("ditar:   peak_b3 "))
    assert " guard " in table and " OK " in table and "GiB (" in table, table  # the figure where a speedup goes

    rep = proj.ditar("report", "--out", str(proj.root / "rep"))
    assert rep.returncode == 0, rep.stderr
    html = (proj.root / "rep/index.html").read_text()
    assert "peak_b3" in html and honest["outcome"]["figure"] in html


def test_a_memory_lane_cannot_be_the_objective_and_an_unknown_kind_names_the_key(pytester, model_cache, tmp_path):
    proj = make_project(pytester, root=tmp_path / "p", config={"objective_lane": "peak_b3"})
    suite = yaml.safe_load((proj.root / "suites/tiny/suite.yaml").read_text())
    suite["lanes"].append(LANE)
    (proj.root / "suites/tiny/suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    res = proj.ditar("doctor")
    assert "key 'objective_lane' names peak_b3, a memory lane" in res.stdout + res.stderr, res.stdout + res.stderr
    suite["lanes"][-1] = {**LANE, "kind": "energy"}
    (proj.root / "suites/tiny/suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    res = proj.ditar("suite")
    assert "key 'lanes[2].kind' is 'energy'; valid: time, memory" in res.stdout + res.stderr, res.stdout + res.stderr


def _last_summary(proj) -> dict:
    runs = sorted((proj.root / ".autoresearch/t/runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return json.loads((runs[-1] / "summary.json").read_text())
