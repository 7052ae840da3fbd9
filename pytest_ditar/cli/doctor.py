"""`dit-ar doctor`: the seed's start-up checks as a short pass/fail table."""
from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from pytest_ditar.cli.command import Command, config_path, open_session, print_document
from pytest_ditar.cli.suite import cpu_threads, model_where
from pytest_ditar.config.project import load_config
from pytest_ditar.config.semantic import OWNER, availability, needed
from pytest_ditar.config.suite import load_suite
from pytest_ditar.core.documents import FAIL, PASS, WARN, Check, doctor_document
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.hostcheck import CHAMPION, NOISY, NOISY_BASELINE, SLOW_HOST
from pytest_ditar.hardware import devstate
from pytest_ditar.hardware.exclusivity import doctor_row
from pytest_ditar.hardware.stack import stack_rows
from pytest_ditar.hardware.topology import collect, doctor_rows
from pytest_ditar.loop.integrity import roles
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.runtime import sandbox_check
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import load_snapshot
from pytest_ditar.vcs import queries


class Doctor(Command):
    name = "doctor"
    help = "check branch, tree, baseline, config, versions, device; measure the host now"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--no-probe", action="store_true",
                            help="skip the host probe (a few seconds of A/A rounds of the objective lane)")
        parser.add_argument("--json", action="store_true",
                            help="print the checks as one JSON document on stdout "
                                 "(pytest_ditar/schemas/doctor.schema.json)")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        if getattr(args, "json", False):
            return print_document(lambda: cls.document(args))
        rows, host = cls.table(args)
        failed = [r for r in rows if r[1] == FAIL]
        width = max(len(r[0]) for r in rows)
        for name, result, detail in rows:
            print(f"{name:<{width}}  {result:<4}  {detail}")
        print(f"doctor: {len(rows) - len(failed)}/{len(rows)} checks pass"
              + (f"; fix: {', '.join(r[0] for r in failed)}" if failed else ""))
        if host is not None:
            print(f"host: {host}")
        return 1 if failed else 0

    @classmethod
    def table(cls, args: argparse.Namespace) -> tuple[list[tuple[str, str, str]], str | None]:
        """The checks' rows, then the host probe's (unless --no-probe), and the host's sentence."""
        rows = _checks(config_path(args), args.tag)
        host = None
        if not getattr(args, "no_probe", False):
            probed, host = host_rows(args, rows)
            rows += probed
        return rows, host

    @classmethod
    def document(cls, args: argparse.Namespace) -> tuple[dict[str, object], int]:
        """`--json`: the same rows as one document (core.documents.doctor_document) and the status."""
        rows, host = cls.table(args)
        code = 1 if any(r[1] == FAIL for r in rows) else 0
        return doctor_document([Check(*r) for r in rows], host, code), code


def host_rows(args: argparse.Namespace, rows: list[tuple[str, str, str]]) -> tuple[list[tuple[str, str, str]],
                                                                                  str | None]:
    """The host now (loop.perf.hostprobe): load, the objective lane's A/A noise and the champion's speed,
    as rows, and the one sentence that answers "can a modest win be judged now?"."""
    from pytest_ditar.loop.perf import hostprobe  # start-up: the session (numpy, the workers) only when probing

    load = hostprobe.load1()
    cores = os.cpu_count() or 1
    load_row = ("host load", WARN if load is not None and load >= cores else PASS,
                f"1-minute load {load:.1f} on {cores} cores" if load is not None else "unknown on this OS")
    needed = {"config", "suite", "baseline", "sandbox", "model"}
    broken = [r[0] for r in rows if r[0] in needed and r[1] == FAIL]
    if broken:
        return [load_row, ("host noise", WARN, f"not probed: {', '.join(broken)} FAIL above")], None
    sess = open_session(args)
    try:
        p = hostprobe.probe(sess, load)
    except DitarError as exc:
        return [load_row, ("host noise", WARN, f"not probed: {exc}")], None
    finally:
        sess.close()
    if p is None:
        return [load_row, ("host noise", PASS, "the objective lane is not timed: nothing to probe")], None
    h = p.host
    then = f" (at baseline time {h.load_then:.1f})" if h.load_then is not None else ""
    out = [(load_row[0], load_row[1], load_row[2] + then)]
    now = f"about 1+{h.reach_now * 100:.1f}%" if h.reach_now is not None else "n/a"
    base = f"1+{h.reach_then * 100:.1f}%" if h.reach_then is not None else "n/a"
    noisy = NOISY in h.causes or NOISY_BASELINE in h.causes
    out.append(("host noise", WARN if noisy else PASS,
                f"A/A of the baseline's code, {p.rounds} paired rounds in {p.seconds:.1f} s: smallest resolvable "
                f"win now {now}, at baseline time {base}"))
    speed = f"the baseline's code {p.baseline_ms:.2f} ms now" + (
        f", {p.baseline_then_ms:.2f} ms at baseline time ({h.anchor_ratio:.2f}x)"
        if p.baseline_then_ms is not None and h.anchor_ratio is not None else "")
    out.append(("host speed", WARN if SLOW_HOST in h.causes else PASS, speed))
    if p.champion:
        champ = f"champion {p.champion} {p.champion_ms:.2f} ms now" + (
            f", {p.champion_then_ms:.2f} ms kept ({h.champion_ratio:.2f}x)" if h.champion_ratio is not None else "")
        out.append(("champion speed", WARN if CHAMPION in h.causes else PASS, champ))
    return out, h.verdict()


def clean_tree_row(is_repo: bool, dirty: Sequence[str], mutable: Sequence[str]) -> tuple[str, str, str]:
    """An edit in the mutable paths only is a hypothesis being tried (`try` times the working tree; `try`'s
    UNSTABLE next: line sends the user here with it in place): a warn that says to keep it, never a FAIL
    that reads as "clean it up". Anything else dirty FAILs: `experiment` refuses it."""
    if is_repo and not dirty:
        return ("clean tree", PASS, "clean")
    named = ", ".join(dirty[:4])
    if is_repo and all(roles.under_any(p, mutable) for p in dirty):
        return ("clean tree", WARN, f"uncommitted edit: {named} (`dit-ar try` times it as it is; commit it, with "
                                    "its trailer, once `try` says FASTER, before `dit-ar experiment`)")
    return ("clean tree", FAIL, named)


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
    rows.append(clean_tree_row(st.is_repo, st.dirty_paths, cfg.mutable_paths))
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
    a = sandbox_check.availability()
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
