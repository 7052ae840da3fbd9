"""Storing the baseline: the unmodified pipeline over the whole corpus, written atomically."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.stats import noise_floor, paired_noise_floor
from pytest_ditar.loop.integrity import gitpins, stamps
from pytest_ditar.loop.integrity.backup import save_note
from pytest_ditar.loop.integrity.guards import hash_fixed_paths, is_mutable
from pytest_ditar.loop.perf import lanekinds
from pytest_ditar.loop.perf.reach import lane_reach
from pytest_ditar.loop.run import warmstart
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.runtime.cacheprobe import count_flops
from pytest_ditar.runtime.harness import batches, run_batch
from pytest_ditar.runtime.lanes import measure_lane
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LaneRecord, read_lanes
from pytest_ditar.store.snapshot import write_snapshot
from pytest_ditar.vcs import queries


def library_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for name in ("torch", "diffusers", "numpy", "pytest", "pytest-ditar"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = ""
    return out


_DETERMINISM = ("tf32_matmul", "tf32_cudnn", "cudnn_benchmark", "cudnn_deterministic", "deterministic_algorithms")


def check_mutable_committed(sess: DitarSession) -> None:
    st = queries.state(sess.cfg.root)
    if not st.is_repo:
        return
    dirty = [p for p in st.dirty_paths if is_mutable(p, sess.cfg.mutable_paths)]
    if dirty:
        raise DitarError(f"{sess.cfg.root}: uncommitted changes in mutable paths ({', '.join(dirty[:3])}); "
                         "the baseline must be the committed, unmodified pipeline: commit or stash them first")


def generate_corpus(sess: DitarSession, progress: Callable[[str], None] | None = None) -> tuple[list[ItemOutput], Any]:
    candidate = sess.get_candidate()
    outs: list[ItemOutput] = []
    groups = batches(sess.suite.corpus, sess.suite, sess.suite.pipeline.batch)
    bar = _bar(len(sess.suite.corpus), "baseline items")
    candidate.memory(reset=True)
    for group in groups:
        outs.extend(run_batch(candidate, group, sess.suite, sess.cfg.item_timeout_s))
        bar.update(len(group))
    bar.close()
    return outs, candidate.memory()


def _bar(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=not sys.stderr.isatty(), leave=False)


def create_baseline(sess: DitarSession, force: bool = False, extra_meta: dict[str, Any] | None = None,
                    extra_files: dict[str, bytes] | None = None, accept_noise: bool = True) -> Path:
    """Store the baseline; unless `accept_noise`, refuse (before anything is written) one whose
    objective lane's A/A is too noisy to judge a win under 1 + perf.max_baseline_win (noise_refusal)."""
    where = TagPaths(sess.state_dir).baseline
    if where.exists() and not force:
        raise DitarError(f"{where}: a baseline already exists (pass --force / --ditar-force to replace it)")
    check_mutable_committed(sess)
    t0 = time.perf_counter()
    outs, peak = generate_corpus(sess)
    t_items = time.perf_counter() - t0
    lanes = calibrate_lanes(sess)
    why = None if accept_noise else noise_refusal(sess, lanes)
    if why:
        raise DitarError(why)
    device = sess.resolved_device()
    fp = sess.fingerprint().to_dict()  # the worker's own torch flags, on a GPU: it is what ran
    st = queries.state(sess.cfg.root)
    meta = {
        "kind": "baseline",
        "tag": sess.tag,
        "git_sha": st.head,
        "branch": st.branch,
        "suite": sess.suite.name,
        "suite_hash": sess.suite.content_hash,
        "config_hash": sess.cfg.content_hash(),
        "config_sha256": sess.cfg.repo_config_sha256(),  # the repository's file: gated runs must match it
        "fixed_paths": hash_fixed_paths(sess.cfg.root, sess.cfg.fixed_paths),
        "git_pins": gitpins.pins(sess.cfg.root),  # the repository's git config and hooks (loop.integrity.gitpins)
        **stamps.stamp(sess.model_dir(), sess.cfg.root),  # the model's files and the Python environment
        "libraries": library_versions(),
        "device": device,
        "fingerprint": fp,
        "dtype": sess.suite.pipeline.dtype_for(device),
        "seeds": {it.id: it.seed for it in sess.suite.corpus},
        "determinism": {k: fp.get(k) for k in _DETERMINISM},
        "peak_allocated_gib": peak[0],
        "peak_reserved_gib": peak[1],
        "generate_seconds": round(t_items, 4),
        "calibrate_seconds": round(time.perf_counter() - t0 - t_items, 4),
        **(extra_meta or {}),
    }
    files = {"lanes.json": json.dumps(lanes, indent=1).encode(), **(extra_files or {})}
    path = write_snapshot(where, outs, meta, extra_files=files, force=force)
    _anchor_in_ledger(sess, path)
    sess.keep_compilations()  # the baseline's code is the first champion: its compilations are its cache's
    warmstart.hand_over(TagPaths(sess.state_dir))  # the first gated run forks from this run's zygote
    _back_up(sess)
    return path


def objective_reach(sess: DitarSession, lanes: dict[str, Any]) -> Any:
    """The objective lane's smallest resolvable win (core.reach.Reach) implied by the A/A just timed;
    None for a lane of another kind."""
    rec = read_lanes(lanes).get(sess.cfg.objective_lane)
    return lane_reach(rec.measurement, sess.suite.lane(rec.name), sess.cfg.perf) if rec and rec.noise else None


def noise_refusal(sess: DitarSession, lanes: dict[str, Any]) -> str | None:
    """Why this A/A is too noisy to be the baseline (its smallest resolvable win above 1 +
    perf.max_baseline_win), or None."""
    r = objective_reach(sess, lanes)
    bound = sess.cfg.perf.max_baseline_win
    if r is None or r.effect <= bound:
        return None
    load = f"; 1-minute load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores" if hasattr(os, "getloadavg") else ""
    return (f"the baseline's A/A noise is too large: lane {sess.cfg.objective_lane} {r.text()}, above the bound "
            f"1+{bound * 100:.0f}% (key 'perf.max_baseline_win'{load}); nothing was stored: take it on a quieter "
            "host (`dit-ar doctor` measures it now), or pass --accept-noise to store it anyway")


def manifest_summary(path: Path) -> str:
    m = json.loads((path / "manifest.json").read_text())
    return (f"baseline {path}: {len(m['items'])} items, suite {m['suite']} ({m['suite_hash'][:12]}), "
            f"device {m['device']}, commit {(m['git_sha'] or 'none')[:7]}, {m['generate_seconds']:.2f}s")


def calibrate_lanes(sess: DitarSession) -> dict[str, Any]:
    """Time every lane A/A (the baseline against itself, interleaved) to measure the noise floor;
    on a CPU, also the host's achievable FLOP/s, the ceiling of the CPU roofline (loop.run.champion)."""
    from dataclasses import asdict

    candidate = sess.get_candidate()
    host_flops = candidate.probe_flops() if sess.resolved_device() == "cpu" else None
    out: dict[str, Any] = {}
    for lane in sess.suite.lanes:
        kind = lanekinds.of(lane)
        if kind is not None:  # a lane of another kind: what its kind keeps (loop.perf.lanekinds)
            out[lane.name] = kind.baseline(candidate, sess.suite, lane, timeout_s=sess.cfg.item_timeout_s)
            continue
        # a multi-GPU lane's A/A is its group against itself, as its lanes will run; its FLOPs are
        # one pipeline's (the one-process build's), the work a split divides among the ranks
        timed = sess.get_candidate(getattr(lane, "gpus", 1))
        m = measure_lane(timed, sess.suite, lane, champion=timed, timeout_s=sess.cfg.item_timeout_s,
                         pin_cpu=sess.cfg.perf.pin_cpu)
        noise = asdict(noise_floor(m.samples, m.champion_samples, n_boot=sess.cfg.perf.n_boot))
        # The floor a paired (interleaved) comparison is held to: A/A on per-round ratios.
        noise["paired"] = asdict(paired_noise_floor(m.samples, m.champion_samples, n_boot=sess.cfg.perf.n_boot))
        out[lane.name] = LaneRecord(lane.name, m.to_dict(), noise=noise, flops=count_flops(candidate, sess.suite, lane),
                                    host_flops=host_flops).to_dict()
    return out


def _back_up(sess: DitarSession) -> None:
    """The new baseline and its ledger row go to refs/ditar/<tag> (a failure is said, not fatal)."""
    note = save_note(sess.cfg.root, TagPaths(sess.state_dir), f"ditar {sess.tag}: baseline")
    if note:
        print(note, file=sys.stderr)


def _anchor_in_ledger(sess: DitarSession, path: Path) -> None:
    """Record the manifest's hash in the hash-chained ledger, so an edited manifest is caught too."""
    import hashlib

    digest = hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest()
    m = json.loads((path / "manifest.json").read_text())
    Ledger(sess.state_dir).append({"commit": m.get("git_sha") or "", "status": "BASELINE",
                                   "description": f"baseline manifest sha256={digest}",
                                   "quality_total": len(m["items"]), "device": m["device"],
                                   "class": "exact", "cumulative_class": "exact"})
