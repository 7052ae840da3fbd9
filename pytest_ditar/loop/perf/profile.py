"""`dit-ar profile`: one call of the candidate under torch.profiler, attributed to the pipeline's
phases, with the Chrome trace and a JSON summary stored for the commit message to cite.

The candidate is the working tree's `mutable/` or a stored commit's (built from a worktree of it,
as the champion is: `DitarSession.build_at_commit`), in its own worker process
(runtime.profiler marks the phases there). The request has the lane's batch and is drawn fresh
(core.requests), like a timed round's; the worker warms up on the lane's fixed batch first. No
lane is timed, nothing goes into the ledger, and git is only read (a `--commit` adds its worktree
under the state directory, as a gated run does for its champion).

`--against REF` (a commit, `champion`, `baseline`) profiles REF's candidate on the same request
right after, and adds the difference per leaf phase and per kernel family (core.kernels.diff: each
set partitions a call's wall, so its deltas add up to the difference of the two walls); on a GPU
also per phase of the device time by launch (core.launches) with the device's idle time, and the
sum of those deltas against the differences of device busy, of the profiled and of the
unprofiled walls (core.launches.device_deltas).

Files: `<state>/<tag>/profiles/<stamp>-<sha7>/` (store.paths) or `--out DIR`: `trace.json`
(chrome://tracing, ui.perfetto.dev), `trace-ref.json` with `--against`, and `summary.json`
(`SUMMARY_KIND`).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ditar.core.attribution import Attribution, Span, attribute
from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.kernels import KernelTable, diff, headline, kernel_table
from pytest_ditar.core.launches import DeviceAttribution, Launch, attribute_launches, device_deltas
from pytest_ditar.core.vocabulary import SCHEMA_VERSION
from pytest_ditar.interface import Request
from pytest_ditar.loop.run import champion
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime.calls import fresh_request, lane_request, new_stream
from pytest_ditar.runtime.worker import CandidateWorker
from pytest_ditar.store.atomic import atomic_file, write_json_atomic
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import queries

SUMMARY_KIND = "ditar-profile"
TRACE = "trace.json"
REF_TRACE = "trace-ref.json"  # `--against`: the reference's call
SUMMARY = "summary.json"
POST_S = 600.0  # past the calls themselves: the profiler's event processing and the trace's export
MAX_DATA_BYTES = 256 << 20  # the worker's profile.json: spans, top operators


@dataclass
class Profiled:
    out_dir: Path
    trace: Path
    summary_path: Path
    summary: dict[str, Any]


def _steps(req: Request, steps: int) -> Request:
    return dataclasses.replace(req, steps=steps)


def ref_commit(sess: DitarSession, ref: str) -> str:
    """The commit `--against REF` names: `champion` (the last KEEP, else the baseline's commit),
    `baseline` (the baseline's commit), or any commit git knows."""
    if ref == "champion":
        sha = champion.commit(sess)
    elif ref == "baseline":
        sha = champion.baseline_commit(sess)
    else:
        sha = queries.ref_commit(sess.cfg.root, ref)
    if sha is None:
        raise DitarError(f"--against {ref}: " + (f"no {ref} yet (`dit-ar baseline` first)"
                                                 if ref in ("champion", "baseline") else
                                                 f"no such commit in {sess.cfg.root}"))
    return sha


def profile(sess: DitarSession, *, lane: str | None = None, commit: str | None = None, steps: int | None = None,
            out: str | Path | None = None, warmup: int = 1, against: str | None = None) -> Profiled:
    """Profile one call (see the module's docstring); with `against`, the same request on that
    commit's candidate too, and the difference. DitarError for bad input, CandidateError when the
    candidate fails."""
    cfg, suite = sess.cfg, sess.suite
    ln = suite.lane(lane or cfg.objective_lane)  # ConfigError naming the lane and the suite's lanes
    if steps is not None and steps < 1:
        raise DitarError(f"--steps {steps}: must be at least 1")
    if warmup < 0:
        raise DitarError(f"--warmup {warmup}: must be 0 or more")
    st = queries.state(cfg.root)
    sha = None
    if commit:
        sha = queries.ref_commit(cfg.root, commit)
        if sha is None:
            raise DitarError(f"--commit {commit}: no such commit in {cfg.root}")
    ref_sha = ref_commit(sess, against) if against else None
    n_steps = steps or ln.steps or suite.pipeline.steps
    stream = new_stream(suite)
    warm = _steps(lane_request(suite, ln), n_steps)
    reference = _steps(fresh_request(stream, suite, ln, "profile/reference"), n_steps)
    request = _steps(fresh_request(stream, suite, ln, "profile/call"), n_steps)
    timeout = cfg.item_timeout_s * (warmup + 2) * 4 + POST_S  # the profiler slows a call down
    calls = (warm, warmup, reference, timeout)
    label = sha or st.head
    out_dir = Path(out).resolve() if out else TagPaths(sess.state_dir).new_profile_dir(label)
    out_dir.mkdir(parents=True, exist_ok=True)
    worker = sess.build_at_commit(sha, "profile") if sha else sess.get_candidate()
    candidate = {"source": "commit" if sha else "working tree", "commit": label,
                 "dirty": bool(st.dirty_paths) if not sha else False, "dir": str(worker.candidate_dir)}
    summary = _one(worker, request, calls, out_dir / TRACE)
    summary.update(candidate=candidate, tag=sess.tag, lane=ln.name, batch=ln.batch, steps=n_steps, warmup=warmup,
                   request={"labels": list(request.labels), "seeds": list(request.seeds)})
    if ref_sha is not None:
        # the same request on the reference's build, right after: one call of each, one host
        ref_worker = sess.build_at_commit(ref_sha, "profile", role="reference")
        ref = _one(ref_worker, request, calls, out_dir / REF_TRACE)
        ref.update(candidate={"source": "commit", "commit": ref_sha, "ref": against})
        summary["against"] = compare(ref, summary)
    summary_path = out_dir / SUMMARY
    write_json_atomic(summary_path, summary)
    return Profiled(out_dir, out_dir / TRACE, summary_path, summary)


def _one(worker: CandidateWorker, request: Request, calls: tuple[Request, int, Request, float],
         trace: Path) -> dict[str, Any]:
    """One profiled call in `worker`: its trace copied to `trace`, its summary (`summarize`)."""
    warm, warmup, reference, timeout = calls
    trace_src, data_src = worker.profile(request, warm, warmup, reference, timeout)
    data = _read_data(data_src)
    try:
        att = attribute((Span.from_row(r) for r in data["spans"]), marks=data.get("marks"))
        table = kernel_table(((str(k[0]), int(k[1]), float(k[2])) for k in data.get("kernels", [])), att.wall_ms)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CandidateError("exception", f"the worker's profile data holds no usable spans: {exc}") from None
    with open(trace_src, "rb") as src, atomic_file(trace, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return summarize(data, att, table, trace=trace.name, dev=by_launch(data))


def by_launch(data: Mapping[str, object]) -> tuple[DeviceAttribution | None, str | None]:
    """The device time per phase by kernel launch (core.launches), where the worker read the
    launches from its trace (CUDA), and why not where it did not: (None, None) on a CPU."""
    if "launches" not in data:
        err = data.get("launch_error")
        return None, str(err) if err else None
    names, spans, rows = data.get("launch_names"), data.get("trace_spans"), data.get("launches")
    if not (isinstance(names, list) and isinstance(spans, list) and isinstance(rows, list)):
        return None, "the trace's launches are not lists"
    try:
        return attribute_launches([Span.from_row(r) for r in spans],
                                  (Launch.from_row(r, [str(n) for n in names]) for r in rows)), None
    except (TypeError, ValueError, IndexError) as exc:
        return None, f"the trace's launches are not usable: {exc}"[:300]


def compare(ref: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`--against`: per leaf phase (they partition the wall) and per kernel family (REST included),
    the candidate's call against the reference's (core.kernels.diff), and the top lines in one; on a
    GPU also per phase of the device time by launch (core.launches.device_deltas)."""
    parents = {p["parent"] for p in new["phases"]}

    def by_phase(s: dict[str, Any]) -> dict[str, float]:
        return {p["key"]: p["host_ms"] for p in s["phases"] if p["key"] not in parents}

    labels = {p["key"]: p["label"].rstrip(" *") for p in new["phases"]}
    phases = diff(by_phase(ref), by_phase(new), ref["call_wall_ms"], new["call_wall_ms"])
    fams = diff(ref["kernels"]["families"], new["kernels"]["families"], ref["call_wall_ms"], new["call_wall_ms"])
    a, b = ref.get("device_attribution"), new.get("device_attribution")  # on a GPU: device time by launch
    dev = device_deltas(a, b, (ref["call_wall_ms"], new["call_wall_ms"]),
                        (ref.get("unprofiled_wall_ms"), new.get("unprofiled_wall_ms"))) if a and b else None
    return {"ref": ref["candidate"]["ref"], "commit": ref["candidate"]["commit"], "phases": phases.to_dict(),
            "families": fams.to_dict(), "headline": headline(phases, labels), "summary": ref, "device_phases": dev}


def summarize(data: dict[str, Any], att: Attribution, table: KernelTable, trace: str = TRACE,
              dev: tuple[DeviceAttribution | None, str | None] = (None, None)) -> dict[str, Any]:
    """What summary.json holds (`SUMMARY_KIND`) of one side: the worker's data file, its
    attribution, its kernel table and (CUDA) its device time by launch (the candidate, lane and
    request are added by the caller)."""
    wall_s = att.wall_ms / 1e3
    flops = float(data.get("flops") or 0.0)
    return {
        "schema_version": SCHEMA_VERSION, "kind": SUMMARY_KIND,
        "device": data.get("device"), "threads": data.get("threads"), "torch": data.get("torch"),
        "call_wall_ms": att.wall_ms,
        "unprofiled_wall_ms": data["unprofiled_s"] * 1e3 if data.get("unprofiled_s") else None,
        # on a GPU, device busy is every kernel the device ran in the call (the kernel table's sum)
        "coverage": att.coverage, "steps_seen": att.steps,
        "device_ms": table.busy_ms if att.device_ms is not None else None,
        "device_linked_ms": att.device_ms,  # what the host operators say they launched
        "kernels": table.to_dict(),
        "phases": [dataclasses.asdict(r) for r in att.rows], "notes": att.notes,
        "top_ops": data.get("top_ops", []), "flops": flops,
        "achieved_flops_per_s": flops / wall_s if flops and wall_s > 0 else None,
        "marks": data.get("marks", {}), "events": data.get("events"), "trace": trace,
        # CUDA: every kernel's device time by the phase its launch lay in (core.launches)
        "device_attribution": dev[0].to_dict() if dev[0] is not None else None,
        "launch_notes": list(data.get("launch_notes", [])), "launch_error": dev[1],
    }


def logs_of(sess: DitarSession, lines: int = 20) -> list[str]:
    """The last lines of each worker's log (before the session closes and removes them)."""
    out = []
    for w in sess._workers.values():
        tail = w.log_tail(lines)
        if tail:
            out += [f"--- worker {w.name} log ({w.log_path}), last lines:", *tail.splitlines()]
    return out


def _read_data(path: Path) -> dict[str, Any]:
    """The worker's profile.json, as data (the candidate's process wrote it)."""
    try:
        if path.stat().st_size > MAX_DATA_BYTES:
            raise CandidateError("exception", f"the worker's profile data is over {MAX_DATA_BYTES >> 20} MiB")
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CandidateError("exception", f"the worker's profile data cannot be read: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("spans"), list):
        raise CandidateError("exception", "the worker's profile data is not a profile")
    return data
