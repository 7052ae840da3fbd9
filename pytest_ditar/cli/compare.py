"""`dit-ar compare A B`: two timed sides, lane by lane, under the gate's own rules.

A side is `baseline`, `champion`, a run directory, a run number of the ledger (`3` or `run:3`),
or a commit (`HEAD~2`, a sha): a commit is the baseline's, a stored champion's, or that of the
newest run that timed it. Per lane: both medians, B's speedup over A with its 95% CI and the
verdict core.stats gives at the gate's own threshold (core.effect). Paired where B is a run timed
against A (its own interleaved rounds of A), else unpaired and labelled so: timed apart, the host's
drift between the two sits in the ratio. The baseline against a kept commit (the champion) gives,
on the objective lane, the figure `status` and the report cite: the KEEPs' paired speedups chained
(core.cumulative.cite), the timed-apart ratio beside it. Hosts that differ are named (a cross-host comparison). Reads
only; never times, records or touches git beyond resolving a commit.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from pytest_ditar.cli.command import Command, light_session
from pytest_ditar.core import effect, stats
from pytest_ditar.core.cumulative import Cited, cite
from pytest_ditar.core.decision import champion_row, kept_rows
from pytest_ditar.core.errors import DitarError
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LedgerRow, RunSummary, read_lanes
from pytest_ditar.store.snapshot import lane_samples
from pytest_ditar.vcs.queries import ref_commit

HOST_KEYS = ("device_name", "driver", "cuda", "torch", "diffusers", "cpu_model", "power_limit_w")


@dataclass
class Side:
    name: str  # as the user gave it
    label: str  # what it resolved to
    commit: str | None
    samples: dict[str, list[float]]  # lane -> per-call seconds
    quality: str
    fingerprint: Mapping[str, object] | None
    run: RunSummary | None = None  # a run's summary.json (None for stored snapshots)
    where: str = ""


class SideDoc(TypedDict):
    spec: str
    label: str
    commit: str | None
    quality: str
    where: str


class LaneDoc(TypedDict, total=False):
    """One lane of the comparison: `verdict` None where a side never timed it (then `how` says why)."""

    verdict: str | None
    how: str
    a_median_s: float
    b_median_s: float
    speedup: float
    ci95: list[float | None]
    p_value: float | None
    reason: str
    rounds: list[int]
    threshold: float
    kind: str
    cited: str
    gross: float | None  # the chained verdicts' own figures, where `speedup` is net of the round trip
    basis: str
    timed_apart: dict[str, object]


class CompareDoc(TypedDict):
    a: SideDoc
    b: SideDoc
    cross_host: list[str]
    lanes: dict[str, LaneDoc]


@dataclass(frozen=True)
class Gate:
    """What the gate judges a lane by: its threshold rule's inputs (core.effect) and, for the
    baseline against a kept commit, the chained figure to cite (None otherwise)."""

    objective_lane: str
    min_speedup: float
    noise_k: float
    alpha: float
    max_cv: float
    noise: Mapping[str, Mapping[str, float] | None]  # lane -> the baseline's stored A/A noise (lanes.json)
    cited: Cited | None = None


class Compare(Command):
    name = "compare"
    help = "compare two runs, commits, the baseline or the champion, lane by lane (reads only)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", help="baseline, champion, a run dir, a run number (3 or run:3) or a commit")
        parser.add_argument("b", help="the side judged against A, named the same ways")
        parser.add_argument("--lane", action="append", default=None, help="only this lane (repeatable)")
        out = parser.add_mutually_exclusive_group()
        out.add_argument("--json", action="store_true", help="the comparison as JSON")
        out.add_argument("--markdown", action="store_true", help="a Markdown table (a CI step summary)")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        cfg, _, tag = light_session(args)
        paths = TagPaths.of(cfg.root, cfg.state_dir, tag)
        a, b = (resolve(spec, cfg.root, paths) for spec in (args.a, args.b))
        gate = Gate(cfg.objective_lane, cfg.perf.min_speedup, cfg.perf.noise_k, cfg.perf.alpha, cfg.perf.max_cv,
                    _baseline_noise(paths.baseline), _cited(a, b, paths))
        doc = compare(a, b, args.lane, gate)
        if args.json:
            print(json.dumps(doc, indent=1))
        else:
            print("\n".join(markdown(doc) if args.markdown else text(doc)))
        return 0


def resolve(spec: str, root: Path, paths: TagPaths) -> Side:
    """The side `spec` names; a DitarError that says what it takes where it names nothing timed."""
    rows = Ledger(paths.dir).rows()
    sha_ = _manifest(paths.baseline).get("git_sha")
    base_sha = sha_ if isinstance(sha_, str) else None
    if spec == "baseline":
        return _stored(spec, "baseline", paths.baseline, base_sha)
    if spec == "champion":
        row = champion_row(rows)
        if row is None:
            return _stored(spec, "baseline (nothing kept yet)", paths.baseline, base_sha)
        return _stored(spec, "champion", paths.champion(row.commit), row.commit)
    given = Path(spec)
    if (given / "summary.json").is_file():
        return _run(spec, given)
    number = spec.removeprefix("run:")
    if number.isdigit():
        return _ledger_run(spec, int(number), rows, paths)
    sha = ref_commit(root, spec)
    if sha is None:
        raise DitarError(f"compare: {spec!r} is no run dir, run number or commit; give baseline, champion, "
                         "a run dir, a run number (3 or run:3) or a commit")
    return _commit(spec, sha, base_sha, paths)


def _ledger_run(spec: str, number: int, rows: list[LedgerRow], paths: TagPaths) -> Side:
    """The ledger's run `number`, by its newest run folder."""
    row = next((r for r in rows if r.run == number), None)
    if row is None:
        raise DitarError(f"compare: the ledger has no run {number} (runs 1-{len(rows)})")
    run_dir = paths.newest_run(row.commit)
    if run_dir is None:
        raise DitarError(f"compare: run {number} ({row.status}) left no summary.json under {paths.runs}")
    return _run(spec, run_dir)


def _commit(spec: str, sha: str, base_sha: str | None, paths: TagPaths) -> Side:
    """Commit `sha` as it was timed: the baseline's or a champion's snapshot, else its newest run."""
    if sha == base_sha:
        return _stored(spec, "baseline", paths.baseline, sha)
    if (paths.champion(sha) / "lanes.json").is_file():
        return _stored(spec, "stored champion", paths.champion(sha), sha)
    run_dir = paths.newest_run(sha)
    if run_dir is None:
        raise DitarError(f"compare: commit {sha[:7]} ({spec}) was never timed: no run, champion or baseline has it")
    return _run(spec, run_dir)


def _baseline_noise(base: Path) -> dict[str, Mapping[str, float] | None]:
    """lane -> the A/A noise the baseline stored: the gate's threshold reads it (core.effect)."""
    p = base / "lanes.json"
    lanes = read_lanes(json.loads(p.read_text())) if p.is_file() else {}
    return {k: v.noise for k, v in lanes.items()}


def _cited(a: Side, b: Side, paths: TagPaths) -> Cited | None:
    """The chained figure of the baseline (A) against a kept commit (B), up to that KEEP; else None."""
    if not a.commit or a.commit != _manifest(paths.baseline).get("git_sha") or not b.commit:
        return None
    kept = kept_rows(Ledger(paths.dir).rows())
    upto = next((i for i, r in enumerate(kept) if r.commit and b.commit.startswith(r.commit)), None)
    return None if upto is None else cite(kept[:upto + 1])


def _manifest(d: Path) -> dict[str, object]:
    p = d / "manifest.json"
    data = json.loads(p.read_text()) if p.is_file() else {}
    return data if isinstance(data, dict) else {}


def _stored(spec: str, what: str, d: Path, commit: str | None) -> Side:
    lanes_file = d / "lanes.json"
    if not lanes_file.is_file():
        raise DitarError(f"compare: {spec}: no stored lanes at {lanes_file} (run `dit-ar baseline` first)")
    samples = lane_samples(json.loads(lanes_file.read_text()))
    label = f"{what} ({commit[:7]})" if commit else what
    fingerprint = _manifest(d).get("fingerprint")
    return Side(spec, label, commit, samples, "the reference" if what == "baseline" else "passed when kept",
                fingerprint if isinstance(fingerprint, Mapping) else None, where=str(d))


def _run(spec: str, d: Path) -> Side:
    summary = RunSummary.from_json(json.loads((d / "summary.json").read_text()))
    samples = {k: list(v.measurement.get("samples") or []) for k, v in summary.lanes.items()}
    q = summary.quality
    passed = sum(1 for r in q.values() if r.get("passed"))
    quality = f"{passed}/{len(q)} passed (class {summary.cls or '?'})" if q else "not run"
    label = f"run {d.name} ({str(summary.commit)[:7]}, {summary.decision})"
    return Side(spec, label, summary.commit, samples, quality, summary.fingerprint, run=summary, where=str(d))


def _paired(a: Side, b: Side, lane: str) -> tuple[list[float], list[float]] | None:
    """A's and B's calls from one run's interleaved rounds, where B is a run timed against A."""
    if not b.run or not a.commit or b.run.champion != a.commit:
        return None
    m = _measurement(b.run, lane)
    champ, cand = _floats(m.get("champion_samples")), _floats(m.get("samples"))
    return (champ, cand) if champ and len(champ) == len(cand) else None


def _measurement(run: RunSummary | None, lane: str) -> Mapping[str, object]:
    rec = run.lanes.get(lane) if run is not None else None
    return rec.measurement if rec is not None else {}


def _floats(v: object) -> list[float]:
    return [float(x) for x in v] if isinstance(v, list) else []


def host_difference(a: Side, b: Side) -> list[str]:
    """The fingerprint fields that differ ("key: A vs B"); [] where both hosts look alike or one is unknown."""
    if not a.fingerprint or not b.fingerprint:
        return []
    return [f"{k}: {a.fingerprint.get(k)} vs {b.fingerprint.get(k)}" for k in HOST_KEYS
            if a.fingerprint.get(k) != b.fingerprint.get(k)]


def compare(a: Side, b: Side, only: list[str] | None, gate: Gate) -> CompareDoc:
    lanes = [name for name in dict.fromkeys([*a.samples, *b.samples]) if not only or name in only]
    if only and not lanes:
        raise DitarError(f"compare: no lane {', '.join(only)} on either side (lanes: "
                         f"{', '.join(dict.fromkeys([*a.samples, *b.samples])) or 'none'})")
    cross = host_difference(a, b)
    out: CompareDoc = {"a": _side_doc(a), "b": _side_doc(b), "cross_host": cross, "lanes": {}}
    for lane in lanes:
        pair = _paired(a, b, lane)
        xa, xb = pair if pair else (a.samples.get(lane) or [], b.samples.get(lane) or [])
        if len(xa) < 2 or len(xb) < 2:
            side = "A" if len(xa) < 2 else "B"
            out["lanes"][lane] = {"verdict": None, "how": f"not timed on {side} (the run never reached its lanes)"}
            continue
        # the gate's own threshold: a lane its sequential plan grew (B's run, paired) at min_speedup,
        # anything else at k x the baseline's A/A noise, never below it
        measured = _measurement(b.run, lane)
        grown = pair is not None and bool(measured.get("looks"))
        bar = effect.threshold(gate.noise.get(lane), paired=pair is not None, grown=grown,
                               min_speedup=gate.min_speedup, noise_k=gate.noise_k)
        c = stats.compare(xa, xb, min_effect=bar, alpha=gate.alpha, max_cv=gate.max_cv, paired=pair is not None)
        how = "paired: B's own rounds against A" if pair else "unpaired: timed apart"
        row: LaneDoc = {"a_median_s": statistics.median(xa), "b_median_s": statistics.median(xb),
               "speedup": c.speedup, "ci95": [c.ci_low, c.ci_high], "p_value": c.p_value,
               "verdict": c.verdict, "reason": c.reason, "rounds": [len(xa), len(xb)], "threshold": bar,
               "how": how + (" on different hosts" if cross else ""), "kind": "paired" if pair else "unpaired"}
        if lane == gate.objective_lane and gate.cited is not None and pair is None:
            row = _cited_row(row, gate.cited, gate.min_speedup)
        out["lanes"][lane] = row
    return out


def _cited_row(row: LaneDoc, cited: Cited, bar: float) -> LaneDoc:
    """The objective lane of the baseline against a kept commit: the chained paired figure (what
    status and the report cite), judged at the bar each KEEP cleared; the timed-apart ratio kept beside."""
    lo, hi = cited.ci_low, cited.ci_high
    verdict = stats.FASTER if lo is not None and lo > 1.0 + bar else stats.NOT_FASTER
    return {**row, "speedup": cited.speedup, "ci95": [lo, hi], "p_value": None, "verdict": verdict, "threshold": bar,
            "reason": f"chained over {cited.keeps} KEEP(s)", "cited": cited.text(), "gross": cited.gross,
            "basis": cited.basis(),
            "timed_apart": {"speedup": row["speedup"], "ci95": row["ci95"], "verdict": row["verdict"]},
            "kind": "chained",
            "how": f"chained: {cited.keeps} KEEP(s), each paired in its own run (cite this); timed apart: "
                   f"{row['speedup']:.3f}x"}


def _side_doc(s: Side) -> SideDoc:
    return {"spec": s.name, "label": s.label, "commit": s.commit, "quality": s.quality, "where": s.where}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _ci(r: LaneDoc, sep: str = ",") -> str:
    lo, hi = r["ci95"]
    return f"[{lo:.3f}{sep}{hi:.3f}]" if lo is not None and hi is not None else "n/a"


def text(doc: CompareDoc) -> list[str]:
    lines = [f"A = {doc['a']['label']}", f"B = {doc['b']['label']}"]
    lines.append(f"{'lane':<16} {'A median':>12} {'B median':>12} {'B vs A':>8}  {'ci95':<16} {'bar':>7} "
                 f"{'verdict':<11} how")
    for lane, r in doc["lanes"].items():
        if r["verdict"] is None:
            lines.append(f"{lane:<16} {'-':>12} {'-':>12} {'-':>8}  {'-':<16} {'-':>7} {'-':<11} {r['how']}")
            continue
        bar = f"{1 + r['threshold']:.3f}x"
        lines.append(f"{lane:<16} {_ms(r['a_median_s']):>12} {_ms(r['b_median_s']):>12} {r['speedup']:>7.3f}x  "
                     f"{_ci(r):<16} {bar:>7} {r['verdict']:<11} {r['how']}")
    for lane, r in doc["lanes"].items():
        if r.get("cited"):
            lines.append(f"champion over the baseline on {lane}: {r['cited']} (cite this, as `status` and the report)")
    lines.append("bar: the gate's threshold (B must be faster than A by more than this to be FASTER)")
    why = why_figures({r.get("kind") for r in doc["lanes"].values()})
    if why:
        lines.append(why)
    lines.append(f"quality: A {doc['a']['quality']}; B {doc['b']['quality']}")
    lines.append("hosts: " + ("CROSS-HOST, the ratio includes the machines' difference: " + "; ".join(doc["cross_host"])
                              if doc["cross_host"] else "the same (or one unknown)"))
    return lines


WHY = {  # what each kind of row is, so that two comparisons of the same commits are told apart (issue 50)
    "chained": "chained: the KEEPs' own paired speedups multiplied, each from the rounds that kept it and net of "
               "the harness's round trip where each KEEP measured it",
    "paired": "paired: B's run's own rounds of A and B (that run alone, at the bar its plan used)",
    "unpaired": "unpaired: medians stored by different runs, each under its own load and at the baseline's noise bar",
}


def why_figures(kinds: set[str | None]) -> str | None:
    """Why this comparison's figures need not match another's of the same commits: `compare baseline
    champion` chains the KEEPs (objective lane) and compares stored medians (other lanes), `compare
    baseline <run>` reads that run's own paired rounds."""
    said = [WHY[k] for k in WHY if k in kinds]
    if not said:
        return None
    return ("why these figures: " + "; ".join(said) + ". `compare baseline champion` and `compare baseline "
            "<the run that kept it>` read different rounds, so their figures and bars differ")


def markdown(doc: CompareDoc) -> list[str]:
    lines = [f"**A** {doc['a']['label']} vs **B** {doc['b']['label']}", "",
             "| lane | A median | B median | B vs A | 95% CI | bar | verdict | how |",
             "|---|---|---|---|---|---|---|---|"]
    for lane, r in doc["lanes"].items():
        if r["verdict"] is None:
            lines.append(f"| {lane} | - | - | - | - | - | - | {r['how']} |")
        else:
            lines.append(f"| {lane} | {_ms(r['a_median_s'])} | {_ms(r['b_median_s'])} | {r['speedup']:.3f}x | "
                         f"{_ci(r, ', ')} | {1 + r['threshold']:.3f}x | {r['verdict']} | {r['how']} |")
    lines += ["", f"Quality: A {doc['a']['quality']}; B {doc['b']['quality']}."]
    if doc["cross_host"]:
        lines.append("Cross-host: " + "; ".join(doc["cross_host"]) + ".")
    return lines
