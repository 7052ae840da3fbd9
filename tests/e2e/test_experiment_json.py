"""`dit-ar experiment --json` (issue 28): stdout is one JSON document that agrees with the run's
summary.json and its verdict line (which go to stderr with the rest of pytest's output), for a
KEEP, a DISCARD and a refusal; a script reads the verdict without parsing pytest's output. Issue 40:
the document is the run's own verdict.json and its ledger row, field for field, all made from one
value (core.verdict_json.Verdict), none read back from the printed line."""
import json
import statistics

from candidates import ALTERS, REDUNDANT, STOCK
from conftest import not_judged, research_project
from jsonschemas import available, validate


def _run(proj, cls: str, subject: str):
    res = proj.ditar("experiment", "--classification", cls, "--description", subject, "--json")
    doc = json.loads(res.stdout)  # the whole of stdout: one document
    if available():
        validate(doc, "verdict")  # against the shipped schema (pytest_ditar/schemas/verdict.schema.json)
    line = next((ln for ln in reversed(res.stderr.splitlines()) if ln.startswith("DITAR ")), "")
    return res, doc, line


def _same_as_the_record(proj, doc) -> None:
    """The --json document is verdict.json, and each field the ledger row holds too is the row's."""
    # the run's verdict.json, written before its next step is known, is the document but that step
    assert json.loads((proj.root / doc["run_dir"] / "verdict.json").read_text()) == \
        {k: v for k, v in doc.items() if k != "next"} and doc["next"]
    row = {k: None if v == "" else v for k, v in proj.ledger()[-1].items()}  # the ledger writes a None as ""
    assert row["commit"].startswith(doc["commit"]) and len(doc["commit"]) == 7
    assert (row["status"], row["lane"], row["metric"], [row["ci_low"], row["ci_high"]]) == \
        (doc["verdict"], doc["lane"], doc["speedup"], doc["ci95"])
    kept = (row["cumulative_class"], bool(int(row["judged"])), row["rerun_of"], bool(int(row["off_target"])))
    assert kept == (doc["class"], doc["judged"], doc["rerun_of"], doc["off_target"])
    assert doc["quality"] == {"passed": row["quality_pass"], "total": row["quality_total"]}
    assert doc["reason"] == ("" if doc["verdict"] == "KEEP" else row["reason"]) and doc["reasons"][0] == row["reason"]


def test_experiment_json_matches_the_summary_and_the_verdict_line(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    for subject in ("Drop the redundant pass", "Drop the redundant pass, once more"):  # once more if not judged
        sha = proj.commit_candidate(STOCK, "exact", subject)
        res, doc, line = _run(proj, "exact", subject)
        if not not_judged(line):
            break
    assert line.startswith("DITAR VERDICT: KEEP ") and doc["line"] == line, res.stderr[-3000:]
    assert doc["verdict"] == "KEEP" and doc["exit_status"] == res.returncode == 0 and doc["schema_version"] == 1
    assert doc["commit"] == sha[:7] and doc["class"] == "exact"
    summary = json.loads((proj.root / doc["run_dir"] / "summary.json").read_text())
    assert summary["decision"] == doc["verdict"] and summary["reasons"] == doc["reasons"]
    objective = doc["lanes"][doc["lane"]]
    outcome = summary["lanes"][doc["lane"]]["outcome"]
    assert objective["verdict"] == outcome["verdict"] == "FASTER" and objective["speedup"] == outcome["speedup"]
    assert abs(doc["speedup"] - outcome["speedup"]) < 5e-4 and doc["ci95"][0] <= doc["speedup"] <= doc["ci95"][1]
    assert objective["rounds"] == len(summary["lanes"][doc["lane"]]["measurement"]["samples"]) > 0
    row = proj.ledger()[-1]
    assert doc["quality"] == {"passed": row["quality_pass"], "total": row["quality_total"]}
    # summary.md beside it, for a CI step summary: the same verdict, each lane in throughput units too
    md = (proj.root / doc["run_dir"] / "summary.md").read_text()
    median = statistics.median(summary["lanes"][doc["lane"]]["measurement"]["samples"])
    assert md.startswith(f"**KEEP** `{sha[:7]}` class exact") and f"| {doc['lane']} | FASTER | " in md, md
    assert f"| {median:.4f} | {1 / median:.2f} | " in md, (md, median)  # latency_b1: batch 1
    _same_as_the_record(proj, doc)

    proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    res, doc, line = _run(proj, "exact", "Lower guidance")
    assert doc["verdict"] == "DISCARD" and doc["exit_status"] == res.returncode == 1 and doc["reason"], doc
    assert doc["reason"] in line and doc["reasons"][0] == doc["reason"], (doc, line)
    _same_as_the_record(proj, doc)

    proj.write("mutable/pipeline.py", STOCK + "\n# an edit left uncommitted\n")
    res, doc, _ = _run(proj, "exact", "Dirty tree")
    assert doc["verdict"] == "REFUSED" and doc["exit_status"] == res.returncode == 4 and doc["reason"], doc
    assert doc["run_dir"] is None and "lanes" not in doc
