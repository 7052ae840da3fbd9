"""A run's outcome as one JSON document for CI and scripts: `dit-ar experiment --json`, and
`--ditar-json=PATH` of a gated run (`record`, kind "gate") or of `pytest --ditar-guard`
(`guard_record`, kind "guard").

Made from what the run itself wrote, never from a second judgment: the verdict line (the last
line of every gated run, core.decision.verdict_line) and, for a decided run, its summary.json;
a guard's, from its lanes' outcomes and its failures. docs/verdict-json.md documents it, and
pytest_ditar/schemas/verdict.schema.json is its JSON Schema; `schema_version` is core.vocabulary's.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ditar.core.vocabulary import SCHEMA_VERSION

# key=value tokens after the status; a reason is quoted with \" and \\ escaped
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\[[^\]]*\]|\S+)')
_HEAD = re.compile(r"^DITAR (VERDICT|REFUSED): ?(\S*)")


def parse_line(line: str) -> dict[str, Any]:
    """The fields of a verdict line: status, lane, speedup, ci95, quality, class, commit,
    reason, unmeasured, off_target, sandbox. A refusal's line is its reason. {} for anything else."""
    line = line.strip()
    head = _HEAD.match(line)
    if not head:
        return {}
    if head.group(1) == "REFUSED":
        return {"status": "REFUSED", "reason": line.split(":", 1)[1].strip()}
    out: dict[str, Any] = {"status": head.group(2)}
    for key, raw in _FIELD.findall(line[head.end():]):
        out[key] = _value(key, raw)
    return out


def _value(key: str, raw: str) -> Any:
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


def record(line: str | None, exit_status: int, summary: Mapping[str, Any] | None = None,
           run_dir: str | None = None, errors: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The run's JSON document: the verdict line's fields, the summary's reasons and lanes, the exit
    status; `errors`: the candidate's failures ({kind, message, where}) where the caller has them."""
    fields = parse_line(line or "")
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "gate",
        "verdict": fields.get("status"),  # None: the run ended before it decided (pytest's own error)
        "exit_status": exit_status,
        "line": line,
        "commit": fields.get("commit"),
        "lane": fields.get("lane"),
        "speedup": fields.get("speedup"),
        "ci95": fields.get("ci95"),
        "quality": fields.get("quality"),
        "class": fields.get("class"),
        "reason": fields.get("reason", ""),
        "unmeasured": fields.get("unmeasured", []),
        "off_target": bool(fields.get("off_target", False)),
        "run_dir": run_dir,
    }
    if summary:
        doc["reasons"] = list(summary.get("reasons", []))
        doc["judged"] = summary.get("judged")
        doc["rerun_of"] = summary.get("rerun_of")
        doc["lanes"] = {name: _lane(data) for name, data in (summary.get("lanes") or {}).items()}
    if errors:
        doc["errors"] = [dict(e) for e in errors]
    return doc


def guard_record(line: str | None, exit_status: int, *, tolerance: float, failures: Sequence[str],
                 failing: Sequence[str], lanes: Mapping[str, Mapping[str, Any]], objective: str,
                 errors: Sequence[Mapping[str, Any]] = (), run_dir: str | None = None,
                 refusal: str | None = None) -> dict[str, Any]:
    """`pytest --ditar-guard`'s document. `lanes`: name -> a LaneResult's dict (as summary.json
    holds it); `failing`: the lanes the guard fails on. Its headline lane (`lane`, `speedup`,
    `ci95`) is the first failing lane, else the objective lane."""
    shown = {name: _lane(data) for name, data in lanes.items()}
    head = next((n for n in failing if n in shown), objective)
    lane = shown.get(head) or {}
    passed = line is not None and line.startswith("DITAR GUARD: PASS")
    verdict = "REFUSED" if refusal is not None else None if line is None else "PASS" if passed else "FAIL"
    unresolved = line.partition(" unresolved=")[2].split(",") if passed and line and " unresolved=" in line else []
    return {"schema_version": SCHEMA_VERSION, "kind": "guard", "verdict": verdict, "exit_status": exit_status,
            "line": line if refusal is None else f"DITAR REFUSED: {refusal}", "lane": head if lane else None,
            "speedup": lane.get("speedup"), "ci95": lane.get("ci95", [None, None]), "tolerance": tolerance,
            "reason": refusal if refusal is not None else (failures[0] if failures else ""),
            "failures": list(failures), "failing_lanes": [n for n in failing],
            "unresolved": [u for u in unresolved if u], "lanes": shown,
            "errors": [dict(e) for e in errors], "run_dir": run_dir}


def _lane(data: Mapping[str, Any]) -> dict[str, Any]:
    oc = data.get("outcome") or {}
    samples = (data.get("measurement") or {}).get("samples") or []
    return {"verdict": oc.get("verdict"), "objective": oc.get("objective"), "speedup": oc.get("speedup"),
            "ci95": [oc.get("ci_low"), oc.get("ci_high")], "reason": oc.get("reason", ""), "rounds": len(samples),
            "champion_source": data.get("champion_source")}


def markdown(doc: Mapping[str, Any], shapes: Mapping[str, tuple[int, int]], medians: Mapping[str, float]) -> str:
    """A run's summary.md (a CI step summary): the verdict, then per lane its verdict, speedup and CI,
    and the candidate's median as seconds per call, images per second and ms per denoising step
    (`shapes`: lane -> (batch, steps); `medians`: lane -> the candidate's median seconds per call)."""
    lines = [f"**{doc.get('verdict') or 'no verdict'}** `{doc.get('commit') or '?'}` class {doc.get('class') or '?'}",
             ""]
    if doc.get("reason"):
        lines += [f"Reason: {doc['reason']}", ""]
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
            speed = f"{lane['speedup']:.3f}x" if lane.get("speedup") is not None else "n/a"
            med, (batch, steps) = medians.get(name), shapes.get(name, (0, 0))
            units = (f"{med:.4f} | {batch / med:.2f} | {1e3 * med / steps:.2f}" if med and batch and steps
                     else "n/a | n/a | n/a")
            lines.append(f"| {name} | {lane.get('verdict')} | {speed} | {ci} | {units} | {lane.get('rounds', 0)} |")
    return "\n".join(lines) + "\n"
