"""The `--json` documents of the commands that report (`doctor`, `suite`, `profile`), made from the
values the command computed, never from its printed lines, and each with the step that comes next
(the `next` field: what the command's `ditar: next:` line says, or would say). Their schemas ship in
pytest_ditar/schemas/ (<kind>.schema.json); docs/verdict-json.md lists them. `dit-ar mcp` returns
these same documents as its tools' structured results."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_ditar.core.vocabulary import SCHEMA_VERSION

PASS, FAIL, WARN = "pass", "FAIL", "warn"  # a doctor row's result, as its table prints it

# After a profile: the next step its summary ends with (cli.profile prints it as its `ditar: next:` line).
PROFILE_NEXT = ("the largest phase above is the bottleneck: `dit-ar search \"<that phase> <mechanism> "
                "<model/hardware>\"`, then one hypothesis against it (program.md section 2)")
SUITE_NEXT = ("`dit-ar doctor` checks this session can run it; then `dit-ar profile` shows where the time goes "
              "(a hypothesis of a class marked can judge)")
FIRST_HYPOTHESIS = ("`dit-ar status` says where the session stands; then one hypothesis: `dit-ar profile`, "
                    "edit mutable/, `dit-ar try`, commit with its `Ditar-Class:` trailer, `dit-ar experiment`")


@dataclass(frozen=True)
class Check:
    """One row of `dit-ar doctor`'s table."""

    name: str
    result: str  # PASS, FAIL or WARN
    detail: str


def doctor_next(checks: Sequence[Check], host: str | None) -> str:
    """What the table calls for: the failing rows' fix, the baseline where only it is missing, else
    the loop's first step (with the host's sentence where it was probed)."""
    failed = [c.name for c in checks if c.result == FAIL]
    if failed == ["baseline"]:
        return "`dit-ar baseline` (before any change to mutable/)"
    if "branch" in failed:
        return "`dit-ar init --tag T` (the branch row names the expected branch), then `dit-ar baseline`"
    if failed:
        return f"fix the FAIL rows ({', '.join(failed)}; each row's detail says how), then `dit-ar doctor` again"
    return FIRST_HYPOTHESIS + (f"; the host now: {host}" if host else "")


def doctor_document(checks: Sequence[Check], host: str | None, exit_status: int) -> dict[str, object]:
    failed = [c.name for c in checks if c.result == FAIL]
    return {"schema_version": SCHEMA_VERSION, "kind": "doctor", "exit_status": exit_status,
            "checks": [{"name": c.name, "result": c.result, "detail": c.detail} for c in checks],
            "passed": len(checks) - len(failed), "total": len(checks), "failed": failed, "host": host,
            "next": doctor_next(checks, host)}


def profile_document(summary: Mapping[str, object] | None, out_dir: str | None, exit_status: int,
                     error: str | None = None, logs: Sequence[str] = ()) -> dict[str, object]:
    """`dit-ar profile --json`: the profile's summary.json as it was written, where it lies, and the
    next step; a candidate that failed: its error and the workers' last lines instead."""
    return {"schema_version": SCHEMA_VERSION, "kind": "profile", "exit_status": exit_status, "out_dir": out_dir,
            "summary": dict(summary) if summary is not None else None, "error": error, "logs": list(logs),
            "next": PROFILE_NEXT if error is None else
            "the candidate did not run (its error above): fix it, then `dit-ar profile` again"}
