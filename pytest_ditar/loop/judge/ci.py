"""What a run leaves for CI once it has decided: `--ditar-json=PATH`, and under GitHub Actions its
step summary, annotations and outputs; junit testsuite properties where pytest wrote a junit file.

Read at the end of a gated run, a guard or a refusal (plugin.gateplugin calls `publish` with the
exit status): the document (core.verdict_json) is made from what the run decided, and everything
else from the document (core.ci). The GitHub variables are read from the judge's environment
(docs/trust.md): `GITHUB_ACTIONS=true` prints the annotations (the runner reads them from stdout),
`GITHUB_STEP_SUMMARY` and `GITHUB_OUTPUT` name files the runner gave the step, appended to. The
workers never see these files: a candidate's sandbox binds none of them, and what it can put into a
reason is escaped (core.ci).
"""
from __future__ import annotations

import secrets
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pytest_ditar.core import ci, guard, verdict_json
from pytest_ditar.loop.judge.gate import Gate
from pytest_ditar.loop.judge.nextstep import PREFIX, next_step
from pytest_ditar.store.atomic import write_json_atomic, write_text_atomic


def _errors(gate: Gate) -> list[ci.ErrorDoc]:
    seen: set[str] = set()
    out: list[ci.ErrorDoc] = []
    for e in gate.results.errors:
        if str(e) not in seen:
            seen.add(str(e))
            out.append({"kind": e.kind, "message": e.message, "where": e.where, "item": e.item})
    return out


def document(gate: Gate, exit_status: int) -> ci.VerdictDoc:
    """The run's JSON document: a guard's (kind "guard") or a gated run's, refused or decided (kind "gate")."""
    s = gate.sess
    if gate.opts.guard is not None:
        tol = float(gate.opts.guard)
        outcomes = gate.results.outcomes()
        expected = sorted(gate.lanes_collected)
        return verdict_json.guard_record(
            gate.guard_line, exit_status, tolerance=tol, failures=list(gate.guard_failures),
            failing=guard.failing_lanes(outcomes, expected, tol) if gate.guard_line else [],
            lanes=gate.results.lanes_dict(),
            objective=s.cfg.objective_lane, errors=_errors(gate), refusal=gate.refusal,
            unresolved=guard.unresolved(outcomes, tol),
            run_dir=str(s.run_dir()) if gate.guard_failures else None)  # a PASS's folder is removed
    errors = _errors(gate) if gate.gated else ()
    step = _next(gate)
    if gate.opts.try_only:  # `dit-ar try --json`: its outcome, no verdict
        out = gate.try_outcome
        return verdict_json.try_record(out, exit_status, line=out.line() if out is not None else gate.final_line(),
                                       next_step=step, lanes=gate.results.lanes_dict() if out is not None else None,
                                       refusal=gate.refusal)
    if gate.result is not None:
        return verdict_json.record(gate.result, exit_status, lanes=gate.results.lanes_dict(), run_dir=str(s.run_dir()),
                                   errors=errors, next_step=step)
    return verdict_json.record(None, exit_status, refusal=gate.refusal, line=gate.final_line(), errors=errors,
                               next_step=step)


def _next(gate: Gate) -> str | None:
    """The run's `ditar: next:` step, its text (loop.judge.nextstep)."""
    line = next_step(gate)
    return line[len(PREFIX):] if line and line.startswith(PREFIX) else line


@dataclass(frozen=True)
class Published:
    annotations: tuple[str, ...] = ()  # GitHub's workflow commands, for the run's end (core.ci.resume_commands)
    notes: tuple[str, ...] = ()  # summary lines: each file that could not be written


def publish(gate: Gate, exit_status: int, *, json_path: Path | None, junit_path: Path | None,
            env: Mapping[str, str]) -> Published:
    """Write what CI reads; returns the annotations to print and a note per file not written."""
    if gate.opts.try_only and json_path is not None:  # `dit-ar try --json`: the outcome's document, nothing else
        doc = document(gate, exit_status)
        try:
            write_json_atomic(json_path, doc, indent=1, default=str)
        except (OSError, ValueError) as exc:
            return Published(notes=(f"ditar: --ditar-json {json_path} not written: {type(exc).__name__}: {exc}",))
        return Published()
    if gate.opts.guard is None and not gate.gated and gate.refusal is None:  # a report-only run decides nothing
        return Published(notes=(f"ditar: --ditar-json {json_path} not written: a report-only run decides nothing "
                                "(a gated run, a guard or a refusal writes it)",) if json_path is not None else ())
    doc = document(gate, exit_status)
    notes: list[str] = []

    def attempt(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except (OSError, ValueError, ET.ParseError) as exc:  # a convenience for CI: never the verdict's undoing
            notes.append(f"ditar: {what} not written: {type(exc).__name__}: {exc}")

    if json_path is not None:
        attempt(f"--ditar-json {json_path}", lambda: write_json_atomic(json_path, doc, indent=1, default=str))
    if junit_path is not None and junit_path.is_file():
        attempt(f"junit properties in {junit_path}", lambda: add_junit_properties(junit_path, ci.junit_properties(doc)))
    if env.get("GITHUB_STEP_SUMMARY"):
        attempt("$GITHUB_STEP_SUMMARY", lambda: _append(Path(env["GITHUB_STEP_SUMMARY"]), _markdown(doc)))
    if env.get("GITHUB_OUTPUT"):
        attempt("$GITHUB_OUTPUT", lambda: write_outputs(env, ci.outputs(doc)))
    lines = ci.annotation_lines(doc) if env.get("GITHUB_ACTIONS") == "true" else []
    return Published(tuple(lines), tuple(notes))


def write_outputs(env: Mapping[str, str], values: Mapping[str, str]) -> None:
    """Append `values` to the step's `$GITHUB_OUTPUT` (nothing where the variable is not set)."""
    if env.get("GITHUB_OUTPUT"):
        _append(Path(env["GITHUB_OUTPUT"]), ci.output_text(values, f"ghadelimiter_{secrets.token_hex(16)}"))


def _markdown(doc: ci.VerdictDoc) -> str:
    if doc.get("kind") == "guard":
        return ci.guard_markdown(doc)
    md = None
    if doc.get("run_dir"):
        p = Path(str(doc["run_dir"])) / "summary.md"
        md = p.read_text() if p.is_file() else None
    return ci.gate_markdown(doc, md)


def _append(path: Path, text: str) -> None:
    """Append to a file the CI runner made for the step (it reads it once the step ends)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text if text.endswith("\n") else text + "\n")


def add_junit_properties(path: Path, props: list[tuple[str, str]]) -> None:
    """Add testsuite `<property>`s to the junit file pytest wrote. The gate decides after junitxml
    wrote it (its session finish runs last, so that other plugins' files are filed with the run), so
    pytest's record_testsuite_property, which is read when the file is written, comes too late."""
    tree = ET.parse(path)
    root = tree.getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None or not props:
        return
    holder = suite.find("properties")
    if holder is None:
        holder = ET.Element("properties")
        suite.insert(0, holder)
    for name, value in props:
        ET.SubElement(holder, "property", name=name, value=value)
    write_text_atomic(path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
