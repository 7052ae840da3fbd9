"""What a CI system reads of a run, made from its JSON document (core.verdict_json): GitHub Actions'
workflow commands (`::error`/`::warning` annotations), its `$GITHUB_OUTPUT` lines and a step
summary in Markdown; and junit testsuite properties for any CI that reads junit (Jenkins, GitLab).

Pure text from a document: loop.judge.ci writes it where the CI's variables point. Every text a
candidate can influence (a reason quotes its exception) is escaped as GitHub's runner expects, so
no reason can end an annotation early or start a workflow command of its own on a new line. And
the rest of what a run prints (pytest's own report of a failure quotes the exception as it is,
line breaks included) is never read as a command: a ditar run under GitHub Actions stops the
runner's command processing with a token it makes (`stop_commands`) before any test runs, and
resumes it (`resume_commands`) only for its own annotations, at the end.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypedDict


class LaneDoc(TypedDict):
    """One lane of the document: its outcome's fields as the LaneResult held them (passed on as they are)."""

    verdict: object
    objective: object
    speedup: object
    ci95: list[object]
    reason: object
    rounds: int
    champion_source: object
    figure: object


class ErrorDoc(TypedDict, total=False):
    kind: str
    message: str
    where: str | None
    item: str | None


# The run's document, core.verdict_json writes it (schemas/verdict.schema.json); "class" is a keyword,
# hence the functional form.
VerdictDoc = TypedDict("VerdictDoc", {
    "schema_version": int, "kind": str, "verdict": "str | None", "exit_status": int, "line": "str | None",
    "commit": "str | None", "lane": "str | None", "speedup": "float | None", "ci95": "list[float | None] | None",
    "quality": "dict[str, int | None] | None", "class": "str | None", "reason": str, "unmeasured": "list[str]",
    "off_target": bool, "run_dir": "str | None", "reasons": "list[str]", "judged": bool, "rerun_of": "int | None",
    "lanes": "dict[str, LaneDoc]", "errors": "list[ErrorDoc]", "tolerance": float, "failures": "list[str]",
    "failing_lanes": "list[str]", "unresolved": "list[str]", "next": "str | None", "outcome": "str | None"},
    total=False)
OUTPUT_KEYS = ("verdict", "lane", "speedup", "ci_low", "ci_high", "exit_status", "kind", "reason")
_WHERE = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+)\b")  # RunError.where: "mutable/pipeline.py:57 in generate"


def escape_data(text: str) -> str:
    """A workflow command's message: % and line breaks encoded (the runner decodes them)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: also its separators, ':' and ','."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, title: str | None = None, file: str | None = None,
               line: int | None = None) -> str:
    """`::error file=...,line=...,title=...::message` (level: error, warning or notice)."""
    props = [f"file={escape_property(file)}"] if file else []
    props += [f"line={int(line)}"] if file and line is not None else []
    props += [f"title={escape_property(title)}"] if title else []
    return f"::{level}{' ' + ','.join(props) if props else ''}::{escape_data(message)}"


def stop_commands(token: str) -> str:
    """GitHub's runner reads no workflow command on the lines after this one until `resume_commands(token)`:
    what pytest prints of a run (a candidate's exception text among it) cannot be read as one."""
    return f"::stop-commands::{token}"


def resume_commands(token: str) -> str:
    return f"::{token}::"


def where(text: str | None) -> tuple[str, int] | None:
    """(file, line) of a candidate error's frame ("mutable/pipeline.py:57 in generate"), else None."""
    m = _WHERE.match(text or "")
    return (m.group("file"), int(m.group("line"))) if m else None


def annotation_lines(doc: VerdictDoc) -> list[str]:
    """What failed, as annotations: a guard's failures (each names its lane and reason) and the
    lanes it left unresolved; a gated run's DISCARD/CRASH/REFUSED with its reason, each REGRESSED
    lane, each CRASH error at its `mutable/...:LINE`, and a KEEP's unmeasured guard lanes."""
    verdict = doc.get("verdict")
    if doc.get("kind") == "guard":
        return _guard_annotations(doc)
    if verdict is None:
        return [annotation("error", "the run ended before it decided (pytest's own error or an interrupt)",
                           title="ditar: no verdict")]
    out = []
    if verdict == "CRASH":
        out += _crash_annotations(doc)
    elif verdict in ("DISCARD", "REFUSED"):
        out.append(annotation("error", str(doc.get("reason") or ""), title=f"ditar {verdict}"))
    for name, lane in (doc.get("lanes") or {}).items():
        if lane.get("verdict") == "REGRESSED":
            out.append(annotation("error", f"lane {name}: {lane.get('reason', '')}",
                                  title=f"ditar lane {name} REGRESSED"))
    out += [annotation("warning", f"guard lane {name} could not be measured", title="ditar KEEP: unmeasured")
            for name in doc.get("unmeasured") or []]
    return out


def _guard_annotations(doc: VerdictDoc) -> list[str]:
    """A guard's failures (each names its lane and reason) and the lanes it left unresolved."""
    verdict = doc.get("verdict")
    if verdict == "REFUSED":
        return [annotation("error", str(doc.get("reason") or ""), title="ditar guard REFUSED")]
    out = [annotation("error", f, title="ditar guard FAIL") for f in doc.get("failures") or []]
    if verdict == "FAIL" and not out:
        out.append(annotation("error", str(doc.get("line") or "the guard failed"), title="ditar guard FAIL"))
    lanes = doc.get("lanes") or {}
    out += [annotation("warning", f"lane {name}: {_reason(lanes.get(name))}".rstrip(": "),
                       title=f"ditar guard: lane {name} unresolved") for name in doc.get("unresolved") or []]
    return out


def _crash_annotations(doc: VerdictDoc) -> list[str]:
    """Each CRASH error at its `mutable/...:LINE`; the run's reason where none has a place."""
    errors = [e for e in doc.get("errors") or [] if where(e.get("where"))]
    out = []
    for e in errors:
        file, line = where(e.get("where")) or ("", 0)
        out.append(annotation("error", f"{e.get('kind')}: {e.get('message')}", title="ditar CRASH",
                              file=file, line=line))
    if not errors:
        out.append(annotation("error", str(doc.get("reason") or ""), title="ditar CRASH"))
    return out


def _reason(lane: LaneDoc | None) -> object:
    return lane.get("reason", "") if lane else ""


def outputs(doc: VerdictDoc) -> dict[str, str]:
    """`$GITHUB_OUTPUT`'s values (OUTPUT_KEYS), "" for what the run has not got."""
    low, high = (list(doc.get("ci95") or []) + [None, None])[:2]
    values = {"verdict": doc.get("verdict"), "lane": doc.get("lane"), "speedup": doc.get("speedup"),
              "ci_low": low, "ci_high": high, "exit_status": doc.get("exit_status"), "kind": doc.get("kind"),
              "reason": doc.get("reason")}
    return {k: "" if values[k] is None else str(values[k]) for k in OUTPUT_KEYS}


def output_text(values: Mapping[str, str], delimiter: str) -> str:
    """`$GITHUB_OUTPUT` lines: `name=value`, or the `name<<DELIM` form for a value with a line
    break (`delimiter`: a random token the value cannot contain)."""
    lines = []
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            if delimiter in value:
                raise ValueError("the output's delimiter occurs in its value")
            lines += [f"{key}<<{delimiter}", value, delimiter]
        else:
            lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def _num(x: object, fmt: str = "{:.3f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def guard_markdown(doc: VerdictDoc) -> str:
    """A guard's step summary: the outcome, its failures, and one row per lane."""
    tol = doc.get("tolerance")
    head = f"### pytest-ditar guard: **{doc.get('verdict') or 'no verdict'}**"
    lines = [head + (f" (tolerance {tol:.0%})" if isinstance(tol, (int, float)) else ""), ""]
    if doc.get("verdict") == "REFUSED":
        return "\n".join([*lines, f"Refused: {_md(str(doc.get('reason') or ''))}", ""]) + "\n"
    lines += [f"- {_md(f)}" for f in doc.get("failures") or []]
    lines += [f"- lane {name} unresolved: too noisy to show or rule out a slowdown"
              for name in doc.get("unresolved") or []]
    lanes = doc.get("lanes") or {}
    if lanes:
        lines += ["", "| lane | verdict | speedup | 95% CI | rounds |", "|---|---|---|---|---|"]
        for name, lane in lanes.items():
            lo, hi = (list(lane.get("ci95") or []) + [None, None])[:2]
            ci = f"[{_num(lo)}, {_num(hi)}]" if lo is not None and hi is not None else "n/a"
            lines.append(f"| {name} | {lane.get('verdict')} | {_num(lane.get('speedup'), '{:.3f}x')} | {ci} | "
                         f"{lane.get('rounds', 0)} |")
    lines += ["", f"`{md_code(doc.get('line') or '')}`"]
    return "\n".join(lines) + "\n"


def gate_markdown(doc: VerdictDoc, summary_md: str | None) -> str:
    """A gated run's step summary: its summary.md where it wrote one, else the verdict and reason."""
    head = "### pytest-ditar gate\n\n"
    if summary_md:
        return head + summary_md + (f"\n`{md_code(doc['line'])}`\n" if doc.get("line") else "")
    lines = [f"**{doc.get('verdict') or 'no verdict'}**"]
    if doc.get("reason"):
        lines += ["", f"Reason: {_md(str(doc['reason']))}"]
    if doc.get("line"):
        lines += ["", f"`{md_code(doc['line'])}`"]
    return head + "\n".join(lines) + "\n"


_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:$])")


def md_text(text: object) -> str:
    """A candidate-influenced text as Markdown prose that renders as exactly that text (GitHub's
    step summary): one line, HTML's special characters as entities (no tag, no comment, no entity
    of the candidate's), every other ASCII punctuation Markdown reads backslash-escaped (no
    heading, emphasis, link, image, table cell or autolink of the candidate's)."""
    flat = " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCT.sub(r"\\\1", flat)


def md_code(text: object) -> str:
    """A text shown inside a Markdown code span (`...`): one line, and no backtick that would end
    the span (inside one nothing else is read as Markdown or HTML)."""
    return " ".join(str(text).split()).replace("`", "'")


_md = md_text


def junit_properties(doc: VerdictDoc) -> list[tuple[str, str]]:
    """The testsuite properties a junit reader shows: ditar.verdict, .lane, .speedup, .ci_low, .ci_high, .kind."""
    values = outputs(doc)
    return [(f"ditar.{k}", values[k]) for k in ("kind", "verdict", "lane", "speedup", "ci_low", "ci_high") if values[k]]
