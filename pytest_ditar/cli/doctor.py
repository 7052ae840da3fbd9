"""`dit-ar doctor`: the seed's start-up checks as a short pass/fail table."""
from __future__ import annotations

import argparse
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path
from pytest_ditar.cli.suite import cpu_threads, model_where
from pytest_ditar.config.project import load_config
from pytest_ditar.config.semantic import OWNER, availability, needed
from pytest_ditar.config.suite import load_suite
from pytest_ditar.core.errors import DitarError
from pytest_ditar.hardware import devstate
from pytest_ditar.hardware.exclusivity import doctor_row
from pytest_ditar.hardware.stack import stack_rows
from pytest_ditar.hardware.topology import collect, doctor_rows
from pytest_ditar.loop.tags import resolve_tag
from pytest_ditar.runtime import sandbox
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import load_snapshot
from pytest_ditar.vcs import queries

PASS, FAIL, WARN = "pass", "FAIL", "warn"


class Doctor(Command):
    name = "doctor"
    help = "check branch, tree, baseline, config, versions, device"

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        rows = _checks(config_path(args), args.tag)
        width = max(len(r[0]) for r in rows)
        for name, result, detail in rows:
            print(f"{name:<{width}}  {result:<4}  {detail}")
        failed = [r for r in rows if r[1] == FAIL]
        print(f"doctor: {len(rows) - len(failed)}/{len(rows)} checks pass"
              + (f"; fix: {', '.join(r[0] for r in failed)}" if failed else ""))
        return 1 if failed else 0


def _checks(path: Path, tag: str | None) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    try:
        cfg = load_config(path)
        rows.append(("config", PASS, str(cfg.path)))
    except DitarError as exc:
        return [("config", FAIL, str(exc))]
    try:
        suite = load_suite(cfg.suite_dir)
        rows.append(("suite", PASS,
                     f"{suite.name}: {len(suite.corpus)} items, lanes {', '.join(ln.name for ln in suite.lanes)}"))
        suite.lane(cfg.objective_lane)
        suite.check_objective(cfg.objective_lane, cfg.path)
    except DitarError as exc:
        rows.append(("suite", FAIL, str(exc)))
        return rows
    rows.append(model_row(suite))
    rows += class_rows(cfg)
    rows.append(sandbox_row(cfg))
    st = queries.state(cfg.root)
    tag = resolve_tag(cfg, tag)
    want = cfg.branch_prefix + tag
    rows.append(("branch", PASS if st.branch == want else FAIL,
                 f"{st.branch}" + ("" if st.branch == want
                                   else f" (expected {cfg.branch_prefix}<tag>; run `dit-ar init --tag T`)")))
    rows.append(("clean tree", PASS if st.is_repo and not st.dirty_paths else FAIL,
                 "clean" if not st.dirty_paths else ", ".join(st.dirty_paths[:4])))
    paths = TagPaths.of(cfg.root, cfg.state_dir, tag)
    try:
        snap = load_snapshot(paths.baseline)
        rows.append(("baseline", PASS,
                     f"{len(snap.item_ids)} items, commit {str(snap.manifest.get('git_sha'))[:7]}, verifies"))
    except DitarError as exc:
        rows.append(("baseline", FAIL, str(exc)))
    rep = Ledger(paths.dir).verify()
    rows.append(("ledger", PASS if rep.ok else FAIL, f"{rep.n_rows} rows" if rep.ok else "; ".join(rep.problems[:2])))
    rows += stack_rows(cfg.target, PASS, WARN, FAIL)
    rows.append(doctor_row(PASS, WARN, FAIL))  # NVML: without it a CUDA lane is UNSTABLE, never unchecked
    rows.append(devstate.doctor_row(PASS, WARN))  # persistence and application clocks: set, or how to
    rows += doctor_rows(collect(), {ln.name: ln.gpus for ln in suite.lanes})  # GPU count, pair links, slow-link warning
    return rows


def model_row(suite) -> tuple[str, str, str]:
    """Where the workers load the model from (PipelineSpec.model_dir), and their CPU threads."""
    where, threads = model_where(suite), cpu_threads()
    return ("model", FAIL if where.startswith("not found") or threads.startswith("none") else PASS,
            f"{where}; a worker's torch threads: {threads}")


def sandbox_row(cfg) -> tuple[str, str, str]:
    """The workers' sandbox (runtime.sandbox): can one be made here, and is it on?"""
    if not cfg.sandboxed:
        return ("sandbox", WARN, 'off ("sandbox": "off" in the config): workers run unsandboxed and every verdict '
                                 "line and ledger row says sandbox=off")
    a = sandbox.availability()
    if a.problem:
        return ("sandbox", FAIL, a.problem + " (a gated run is refused)")
    cache = "an overlay of the champion's" if a.overlay else "an empty tmpfs (this bwrap or kernel mounts no overlay)"
    return ("sandbox", PASS, f"{a.version} ({a.origin}): read-only filesystem but each worker's scratch, private PID, "
                             f"network and IPC namespaces; the candidate's compile cache is {cache}; "
                             + ("every host folder through an overlay of its own (no FIFO of the host's opens)"
                                if a.shield else "host folders bound as they are (this kernel mounts no overlay of "
                                "them: a FIFO the agent makes outside $HOME and the temporary folders opens)"))


def class_rows(cfg) -> list[tuple[str, str, str]]:
    """One row per class: can this session judge it? An unavailable class is a warn, not a FAIL: the
    session runs with the others, and only the project owner can change it (program.md section 4)."""
    rows = []
    for cls, why in availability(cfg):
        if why is None:
            how = ("CLIP score and LPIPS from local files" if needed(cfg.thresholds_for(cls))
                   else "latent and pixel floors")
            rows.append((f"class {cls}", PASS, f"available ({how})"))
        else:
            rows.append((f"class {cls}", WARN, f"unavailable: {why}; {OWNER}"))
    return rows
