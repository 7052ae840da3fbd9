"""`dit-ar compare A B` (issue 28) through the console script: the baseline against the champion
(stored samples, timed apart: unpaired and labelled so), a kept run against the baseline it was
timed beside (paired on its own rounds), a run that never reached its lanes, a cross-host pair,
`--json` and `--markdown`, and a side that names nothing timed."""
import json
import re
import shutil

from candidates import RAISES, REDUNDANT, STOCK
from conftest import research_project


def test_compare_baseline_champion_runs_and_hosts(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    _, res, line = proj.experiment_judged(STOCK, "exact", "Drop the redundant pass")
    assert line.startswith("DITAR VERDICT: KEEP "), res.stdout[-3000:]
    _, res, line = proj.experiment(RAISES, "exact", "A candidate that raises")
    assert line.startswith("DITAR VERDICT: CRASH "), res.stdout[-3000:]
    keep, crash = (r["run"] for r in proj.ledger()[-2:])

    res = proj.ditar("compare", "baseline", "champion")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert out.startswith("A = baseline (") and "B = champion (" in out, out
    assert "latency_b1" in out and "unpaired: timed apart" in out and "throughput_b8" in out, out
    # why its figures differ from those of `compare baseline <the run that kept it>` (issue 50)
    why = next(ln for ln in out.splitlines() if ln.startswith("why these figures: "))
    assert "chained: the KEEPs' own paired speedups multiplied" in why and "unpaired: medians stored by" in why, why
    assert "paired: B's run's own rounds" not in why, why

    # one figure for the champion over the baseline: status, compare and the report cite the same
    st = proj.ditar("status").stdout
    figure = re.search(r"speedup over the baseline (\S+x ci95=\[\S+\] chained over 1 KEEP\(s\)) \(cite this\)", st)
    assert figure, st
    figure = figure.group(1)
    assert f"champion over the baseline on latency_b1: {figure} (cite this" in out, out
    cited = json.loads(proj.ditar("compare", "baseline", "champion", "--json").stdout)["lanes"]["latency_b1"]
    assert cited["cited"] == figure and cited["verdict"] == "FASTER" and cited["how"].startswith("chained: 1 KEEP(s)")
    assert cited["threshold"] == proj.config()["perf"]["min_speedup"], cited  # the bar every KEEP cleared
    rep = proj.ditar("report", "--out", str(proj.root / "rep"))
    assert rep.returncode == 0, rep.stderr
    assert figure in (proj.root / "rep/index.html").read_text()

    doc = json.loads(proj.ditar("compare", "baseline", str(keep), "--json").stdout)
    objective = doc["lanes"]["latency_b1"]
    assert objective["how"] == "paired: B's own rounds against A" and objective["kind"] == "paired", objective
    said = proj.ditar("compare", "baseline", str(keep)).stdout
    assert "why these figures: paired: B's run's own rounds of A and B" in said and "chained:" not in said, said
    summary = json.loads((proj.root / doc["b"]["where"] / "summary.json").read_text())
    judged = summary["lanes"]["latency_b1"]
    assert objective["rounds"] == [len(judged["measurement"]["champion_samples"])] * 2
    # the gate's own rules on the run's own rounds: the verdict and speedup it recorded
    assert objective["verdict"] == "FASTER" and abs(objective["speedup"] - judged["outcome"]["speedup"]) < 0.02, \
        (objective, judged["outcome"])
    assert objective["threshold"] == judged["min_effect"], (objective, judged["min_effect"])  # the gate's own bar
    # one KEEP: the chain is its paired figure, cited net of the harness's round trip, the gross beside
    assert abs(objective["speedup"] - (cited["gross"] or cited["speedup"])) < 0.02, (objective, cited)

    res = proj.ditar("compare", f"run:{keep}", str(crash))
    assert res.returncode == 0 and "not timed on B (the run never reached its lanes)" in res.stdout, res.stdout
    assert "quality: A 6/6 passed (class exact); B " in res.stdout, res.stdout

    # the same run on another host: the comparison says so and names what differs
    other = proj.root / "elsewhere"
    shutil.copytree(doc["b"]["where"], other)
    s = json.loads((other / "summary.json").read_text())
    s["fingerprint"] = {**(s["fingerprint"] or {}), "device_name": "NVIDIA RTX A5500"}
    (other / "summary.json").write_text(json.dumps(s))
    res = proj.ditar("compare", doc["b"]["where"], str(other), "--markdown")
    assert res.returncode == 0 and res.stdout.startswith("**A** run "), res.stdout
    assert "| latency_b1 |" in res.stdout and "Cross-host: device_name: " in res.stdout
    assert "vs NVIDIA RTX A5500" in res.stdout, res.stdout
    assert "unpaired: timed apart on different hosts" in res.stdout, res.stdout

    res = proj.ditar("compare", "baseline", "no-such-rev")
    assert res.returncode == 2 and "'no-such-rev' is no run dir, run number or commit" in res.stderr, res.stderr
    res = proj.ditar("compare", "baseline", "champion", "--lane", "nope")
    assert res.returncode == 2 and "no lane nope on either side (lanes: latency_b1, throughput_b8)" in res.stderr
