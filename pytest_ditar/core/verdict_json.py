"""A run's outcome as one JSON document for CI and scripts: `dit-ar experiment --json`, and
`--ditar-json=PATH` of a gated run (`record`, kind "gate") or of `pytest --ditar-guard`
(`guard_record`, kind "guard").

Made from the run's own outcome, never from a second judgment: a decided run's `Verdict` (its
decision and the fields its verdict line shows) and its lanes as summary.json holds them; a
guard's, from its lanes' outcomes and its failures. `parse_line` is for scripts that hold only a
printed line; the package itself never reads a line back. docs/verdict-json.md documents it, and
pytest_ditar/schemas/verdict.schema.json is its JSON Schema; `schema_version` is core.vocabulary's.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_ditar.core.ci import ErrorDoc, LaneDoc, VerdictDoc, md_code, md_text
from pytest_ditar.core.decision import Decision, verdict_line
from pytest_ditar.core.vocabulary import SCHEMA_VERSION

LaneData = Mapping[str, object]  # a LaneResult's dict (runtime.lanes), as summary.json holds it
Field = str | float | bool | list[float | None] | list[str] | dict[str, int] | None  # a verdict line's value

# key=value tokens after the status; a reason is quoted with \" and \\ escaped
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\[[^\]]*\]|\S+)')
_HEAD = re.compile(r"^DITAR (VERDICT|REFUSED): ?(\S*)")


def parse_line(line: str) -> dict[str, Field]:
    """The fields of a verdict line: status, lane, speedup, ci95, quality, class, commit,
    reason, unmeasured, off_target, sandbox. A refusal's line is its reason. {} for anything else."""
    line = line.strip()
    head = _HEAD.match(line)
    if not head:
        return {}
    if head.group(1) == "REFUSED":
        return {"status": "REFUSED", "reason": line.split(":", 1)[1].strip()}
    out: dict[str, Field] = {"status": head.group(2)}
    for key, raw in _FIELD.findall(line[head.end():]):
        out[key] = _value(key, raw)
    return out


def _value(key: str, raw: str) -> Field:
    if raw.startswith('"'):
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    if key == "ci95":
        return [_number(x) for x in raw.strip("[]").split(",")]
    if key == "speedup":
        return _number(raw.rstrip("x"))
    if key == "quality":
        passed, _, total = raw.partition("/")
        return None if raw == "n/a" else {"passed": int(passed), "total": int(total)}
    if key == "unmeasured":
        return raw.split(",")
    if key == "off_target":
        return raw == "1"
    return None if raw == "n/a" else raw


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Verdict:
    """A decided run's outcome as one value: the decision and the fields its verdict line shows. The
    line, verdict.json, `--ditar-json`, `dit-ar experiment --json` and summary.md are rendered from it;
    nothing reads the line back."""

    decision: Decision
    lane: str | None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    quality_pass: int | None = None
    quality_total: int | None = None
    judged_class: str | None = None
    commit: str | None = None
    off_target: bool = False
    sandbox_off: bool = False

    def line(self) -> str:
        return verdict_line(self.decision, lane=self.lane, speedup=self.speedup, ci_low=self.ci_low,
                            ci_high=self.ci_high, quality_pass=self.quality_pass, quality_total=self.quality_total,
                            judged_class=self.judged_class, commit=self.commit, off_target=self.off_target,
                            sandbox_off=self.sandbox_off)


def record(verdict: Verdict | None, exit_status: int, *, lanes: Mapping[str, LaneData] | None = None,
           run_dir: str | None = None, refusal: str | None = None, line: str | None = None,
           errors: Sequence[ErrorDoc] = (), next_step: str | None = None) -> VerdictDoc:
    """The run's JSON document (kind "gate"): a decided run's from its `verdict` (`lanes`: name -> a
    LaneResult's dict, as summary.json holds them), a refusal's from its reason, and otherwise (the
    run ended before it decided) the last line it printed, if any; `errors`: the candidate's failures
    ({kind, message, where}) where the caller has them; `next_step`: the run's `ditar: next:` step
    (its text), where the caller has it (`--ditar-json` and `experiment --json`; not the run's own
    verdict.json, written before the step is known)."""
    d = verdict.decision if verdict is not None else None
    doc: VerdictDoc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "gate",
        # None: the run ended before it decided (pytest's own error)
        "verdict": d.status if d is not None else "REFUSED" if refusal is not None else None,
        "exit_status": exit_status,
        "line": verdict.line() if verdict is not None else f"DITAR REFUSED: {refusal}" if refusal is not None
        else line,
        "commit": verdict.commit if verdict is not None else None,
        "lane": verdict.lane if verdict is not None else None,
        "speedup": verdict.speedup if verdict is not None else None,
        "ci95": [verdict.ci_low, verdict.ci_high] if verdict is not None else None,
        "quality": ({"passed": verdict.quality_pass, "total": verdict.quality_total}
                    if verdict is not None and verdict.quality_pass is not None and verdict.quality_total is not None
                    else None),
        "class": verdict.judged_class if verdict is not None else None,
        "reason": refusal if refusal is not None else d.reason if d is not None and d.status != "KEEP" else "",
        "unmeasured": list(d.unmeasured) if d is not None and d.status == "KEEP" else [],
        "off_target": bool(verdict.off_target) if verdict is not None else False,
        "run_dir": run_dir if d is not None else None,
    }
    if d is not None:
        doc["reasons"] = list(d.reasons)
        doc["judged"] = d.judged
        doc["rerun_of"] = d.rerun_of
        doc["lanes"] = {name: _lane(data) for name, data in (lanes or {}).items()}
    if errors:
        doc["errors"] = [ErrorDoc(**e) for e in errors]
    if next_step is not None:
        doc["next"] = next_step
    return doc


@dataclass(frozen=True)
class TryFigures:
    """`dit-ar try`'s outcome as the document shows it (loop.run.tryout.TryOutcome's fields)."""

    outcome: str
    lane: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    passed: int | None
    total: int | None
    judged_class: str | None


def try_record(out: TryFigures | None, exit_status: int, *, line: str | None, next_step: str | None,
               lanes: Mapping[str, LaneData] | None = None, refusal: str | None = None) -> VerdictDoc:
    """`dit-ar try --json`'s document (kind "try"): the outcome, never a verdict (nothing recorded);
    a refusal's from its reason; `out` None and no refusal: the run ended before it had an outcome."""
    return {"schema_version": SCHEMA_VERSION, "kind": "try",
            "outcome": out.outcome if out is not None else "REFUSED" if refusal is not None else None,
            "exit_status": exit_status, "line": f"DITAR REFUSED: {refusal}" if refusal is not None else line,
            "lane": out.lane if out is not None else None, "speedup": out.speedup if out is not None else None,
            "ci95": [out.ci_low, out.ci_high] if out is not None else None,
            "quality": ({"passed": out.passed, "total": out.total}
                        if out is not None and out.passed is not None and out.total is not None else None),
            "class": out.judged_class if out is not None else None, "reason": refusal or "",
            "lanes": {name: _lane(data) for name, data in (lanes or {}).items()}, "next": next_step}


def guard_record(line: str | None, exit_status: int, *, tolerance: float, failures: Sequence[str],
                 failing: Sequence[str], lanes: Mapping[str, LaneData], objective: str,
                 errors: Sequence[ErrorDoc] = (), run_dir: str | None = None,
                 refusal: str | None = None, unresolved: Sequence[str] = ()) -> VerdictDoc:
    """`pytest --ditar-guard`'s document. `lanes`: name -> a LaneResult's dict (as summary.json
    holds it); `failing`: the lanes the guard fails on. Its headline lane (`lane`, `speedup`,
    `ci95`) is the first failing lane, else the objective lane."""
    shown = {name: _lane(data) for name, data in lanes.items()}
    head = next((n for n in failing if n in shown), objective)
    lane = shown.get(head)
    passed = line is not None and not failures  # core.guard.line: a PASS where nothing failed
    verdict = "REFUSED" if refusal is not None else None if line is None else "PASS" if passed else "FAIL"
    return {"schema_version": SCHEMA_VERSION, "kind": "guard", "verdict": verdict, "exit_status": exit_status,
            "line": line if refusal is None else f"DITAR REFUSED: {refusal}", "lane": head if lane else None,
            "speedup": _float(lane["speedup"]) if lane else None,
            "ci95": [_float(x) for x in lane["ci95"]] if lane else [None, None], "tolerance": tolerance,
            "reason": refusal if refusal is not None else (failures[0] if failures else ""),
            "failures": list(failures), "failing_lanes": [n for n in failing],
            "unresolved": list(unresolved) if passed else [], "lanes": shown,
            "errors": [ErrorDoc(**e) for e in errors], "run_dir": run_dir}


def _float(x: object) -> float | None:
    """A lane's figure as the document's number (it is one already; anything else is none)."""
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _mapping(x: object) -> Mapping[str, object]:
    return x if isinstance(x, Mapping) else {}


def _lane(data: LaneData) -> LaneDoc:
    oc = _mapping(data.get("outcome"))
    samples = _mapping(data.get("measurement")).get("samples")
    samples = samples if isinstance(samples, list) else []
    return {"verdict": oc.get("verdict"), "objective": oc.get("objective"), "speedup": oc.get("speedup"),
            "ci95": [oc.get("ci_low"), oc.get("ci_high")], "reason": oc.get("reason", ""), "rounds": len(samples),
            "champion_source": data.get("champion_source"), "figure": oc.get("figure")}


def markdown(doc: VerdictDoc, shapes: Mapping[str, tuple[int, int]], medians: Mapping[str, float]) -> str:
    """A run's summary.md (a CI step summary): the verdict, then per lane its verdict, speedup and CI,
    and the candidate's median as seconds per call, images per second and ms per denoising step
    (`shapes`: lane -> (batch, steps); `medians`: lane -> the candidate's median seconds per call)."""
    # the reason quotes the candidate's exception, the class its commit's trailer: rendered as text
    # (lane names, verdicts and figures are the suite's and the judge's own)
    lines = [f"**{md_text(doc.get('verdict') or 'no verdict')}** `{md_code(doc.get('commit') or '?')}` "
             f"class {md_text(doc.get('class') or '?')}", ""]
    if doc.get("reason"):
        lines += [f"Reason: {md_text(doc['reason'])}", ""]
    q = doc.get("quality")
    if q:
        lines += [f"Quality: {q['passed']}/{q['total']} contracts passed.", ""]
    lanes = doc.get("lanes") or {}
    if lanes:
        lines += ["| lane | verdict | speedup | 95% CI | s/call | images/s | ms/step | rounds |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, lane in lanes.items():
            lo, hi = lane.get("ci95") or [None, None]
            ci = f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "n/a"
            speed = f"{lane['speedup']:.3f}x" if lane.get("speedup") is not None else lane.get("figure") or "n/a"
            med, (batch, steps) = medians.get(name), shapes.get(name, (0, 0))
            units = (f"{med:.4f} | {batch / med:.2f} | {1e3 * med / steps:.2f}" if med and batch and steps
                     else "n/a | n/a | n/a")
            lines.append(f"| {name} | {lane.get('verdict')} | {speed} | {ci} | {units} | {lane.get('rounds', 0)} |")
    return "\n".join(lines) + "\n"
