"""One run's resources: config, suite, device, tag, the workers and the code built for them,
the caches (baseline, model, fingerprint, evaluators) and the clock. What the run produces lives
in loop.run.results.RunResults (owned by the gate); the session reports its own failures (a build
that failed, a role's code changed) through the `on_error` it is opened with."""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from pytest_ditar.config.project import Config, load_config
from pytest_ditar.config.suite import Suite, load_suite
from pytest_ditar.core.errors import CandidateError, ConfigError
from pytest_ditar.core.timings import PhaseClock
from pytest_ditar.core.vocabulary import ENV_CONFIG, ENV_CPU_THREADS, ENV_TAG
from pytest_ditar.hardware.cachekey import device_key
from pytest_ditar.hardware.fingerprint import Fingerprint, collect
from pytest_ditar.loop.integrity import roles
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.loop.integrity.worktrees import bound_device
from pytest_ditar.runtime import boxdir, compiled, logs, zygote
from pytest_ditar.runtime.clock import process_start_epoch
from pytest_ditar.runtime.group import GroupWorker
from pytest_ditar.runtime.harness import make_spec, pick_device, require_pipeline
from pytest_ditar.runtime.models import resolve_model_dir
from pytest_ditar.runtime.semantic import SessionScores
from pytest_ditar.runtime.worker import CandidateWorker
from pytest_ditar.runtime.worker_process import worker_threads
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import Snapshot, load_snapshot
from pytest_ditar.vcs import queries

ROLE_CODE_CHANGED = "role code modified during the run"


def _ignore(exc: CandidateError) -> None:
    """Where no gate decides (a CLI command): a failure is raised to its caller, nothing else."""


def open_session(config_path: str | Path, tag: str | None = None, device: str | None = None,
                 on_error: Callable[[CandidateError], None] = _ignore) -> "DitarSession":
    """The session of `config_path`'s project: its suite loaded and checked, its tag resolved."""
    cfg = load_config(config_path)
    suite = load_suite(cfg.suite_dir)
    suite.check_objective(cfg.objective_lane, cfg.path)
    name = resolve_tag(cfg, tag)
    return DitarSession(cfg=cfg, suite=suite, tag=name, device=device or "auto", state_dir=cfg.state_path / name,
                        on_error=on_error)


@dataclass
class DitarSession:
    cfg: Config
    suite: Suite
    tag: str
    device: str
    state_dir: Path  # <state>/<tag>: the tag's ledger, baseline, champions and runs
    # where the candidate's failures found here go (the gate's RunResults.add_error)
    on_error: Callable[[CandidateError], None] = _ignore
    judged_class: str = "exact"  # the class this run is judged under (cumulative for gated runs; loop.run.classes)
    candidate: CandidateWorker | None = None
    candidate_error: CandidateError | None = None  # its build failed: not built again this session
    _model_dir: Path | None = None
    _baseline: Snapshot | None = None
    _run_dir: Path | None = None
    _fingerprint: Fingerprint | None = None
    # (candidate dir, name) -> its worker (one process each)
    _workers: dict[tuple[Path, str], CandidateWorker] = field(default_factory=dict)
    # "candidate" or a commit -> its code as written for its workers (loop.integrity.roles)
    _code: dict[str, roles.Code] = field(default_factory=dict)
    _code_changed: bool = False  # a role's code changed since written: said once (check_worktrees)
    memory_budget_gib: float | None = None  # set by a gated run: each worker's allocator is capped at it
    semantic: SessionScores = field(default_factory=SessionScores)  # evaluators, built on first use + score cache
    # where this run's wall time goes, from the judge process's start
    clock: PhaseClock = field(default_factory=lambda: PhaseClock(process_start=process_start_epoch()))
    holdout_reference: Any = None  # loop.run.holdout.Reference: the baseline's fresh outputs, made early
    # set once the candidate is recorded as the champion (a KEEP, a baseline): close() adds what it
    # compiled to the tag's compile cache (runtime.compiled)
    keep_compiled: bool = False
    # Keys the stream of timed requests (core.requests); made when the run starts, recorded in
    # the run's summary only after the candidate has finished.
    request_secret: str = field(default_factory=lambda: secrets.token_hex(32))

    def run_dir(self, use: Path | None = None) -> Path:
        """This run's log directory; kept on DISCARD/CRASH (state dirs are git-ignored). `use`: log
        into one another process made (the xdist controller's, phase 1's, a guard's temporary one)."""
        if use is not None:
            self._run_dir = Path(use)
        if self._run_dir is None:
            self._run_dir = TagPaths(self.state_dir).new_run_dir(queries.state(self.cfg.root).head)
        return self._run_dir

    # ---- how the run is judged, set through these methods (no other module writes a session) ----
    def judge_as(self, judged_class: str) -> None:
        """The class this run is judged under (a gated run's cumulative one)."""
        self.judged_class = judged_class

    def cap_memory(self, gib: float | None) -> None:
        """Workers built from now on cap their allocator at `gib` (a gated run's target memory)."""
        self.memory_budget_gib = gib

    def keep_compilations(self) -> None:
        """The candidate is now the champion (a KEEP, a baseline): close() adds what it compiled to the
        tag's compile cache."""
        self.keep_compiled = True

    def hold_reference(self, reference: Any) -> None:
        """The baseline's fresh outputs for the holdout, made early (loop.run.holdout.Reference)."""
        self.holdout_reference = reference

    # ---- caches -------------------------------------------------------------------------------
    def resolved_device(self) -> str:
        if self.device == "auto":
            # a tag bound with `dit-ar init --gpu N` runs on cuda:N (when CUDA is there)
            self.device = bound_device(self.state_dir) or pick_device(None)
        return self.device

    def fingerprint(self) -> Fingerprint:
        """The device's hardware fingerprint, collected once per session.

        It comes from the candidate's worker (started, not yet built): the judge itself never
        imports torch nor opens a CUDA context, so nothing of it sits on the GPU it times."""
        if self._fingerprint is None:
            try:
                info = self.worker(self.code(), "candidate").hello()
                self._fingerprint = Fingerprint.from_dict(info["fingerprint"])
            except ConfigError:  # no candidate package to start a worker for: ask here
                self._fingerprint = collect(self.resolved_device())
        return self._fingerprint

    def model_dir(self) -> Path:
        if self._model_dir is None:
            self._model_dir = resolve_model_dir(self.suite)
        return self._model_dir

    def baseline(self) -> Snapshot:
        if self._baseline is None:
            self._baseline = load_snapshot(TagPaths(self.state_dir).baseline, "baseline")
        return self._baseline

    # ---- workers and the code they build ------------------------------------------------------
    def worker(self, code: Path, name: str, ranks: int = 1) -> CandidateWorker:
        """The (started) worker process for the package `code` (written by `code()`), one per
        package and name per session (a second name on one package is a second build: the
        champion's twin); `ranks` > 1: a group of that many ranks (runtime.group), for a multi-GPU
        lane. Every role's worker is made alike (runtime.boxdir): nothing it can observe but its
        code says which role it plays; only the candidate's compilations are ever kept
        (runtime.compiled)."""
        if ranks > 1:
            name = f"{name}-{ranks}ranks"
        key = (Path(code).resolve(), name)
        if key not in self._workers:
            require_pipeline(key[0])  # a missing package is a usage error, before any process starts
            cwd = boxdir.new("work")
            spec = make_spec(self.suite, self.model_dir(), self.resolved_device())
            kind: Any = CandidateWorker if ranks == 1 else partial(GroupWorker, ranks=ranks)
            cache = compile_cache(self.state_dir, self.resolved_device())
            w = kind(name, key[0], spec, log_path=boxdir.new("logs") / "worker.log",
                     memory_budget_gib=self.memory_budget_gib, cwd=cwd, env=worker_env(self.cfg, cwd, cache),
                     cpu_threads=threads_for(spec.device),
                     build_timeout_s=self.cfg.build_timeout_s, sandboxed=self.cfg.sandboxed,
                     compile_cache=cache, keep_compile_writes=name.startswith("candidate"),
                     masks=role_masks(self.cfg), reads=(str(self.cfg.root.resolve()),))
            self._workers[key] = w.start(fingerprint=True)
        return self._workers[key]

    def code(self, commit: str | None = None) -> Path:
        """A role's package as its worker imports it (loop.integrity.roles). `commit` None: the candidate's,
        HEAD's blobs of the mutable paths, or, where they differ from HEAD (`dit-ar try`, a guard of
        an edited tree), the working tree's regular files; else `commit`'s, from its blobs."""
        key = commit or "candidate"
        if key not in self._code:
            under = self.cfg.mutable_paths
            if commit is not None:
                self._code[key] = roles.from_commit(self.cfg.root, commit, under, self.cfg.candidate_dir,
                                                    boxdir.new("code"))
            else:
                require_pipeline(self.cfg.candidate_path)
                st = queries.state(self.cfg.root)
                dirty = any(roles.under_any(p, under) for p in st.dirty_paths)
                dest = boxdir.new("code")
                self._code[key] = (roles.from_worktree(self.cfg.root, under, self.cfg.candidate_dir, dest)
                                   if dirty or not st.head else
                                   roles.from_commit(self.cfg.root, st.head, under, self.cfg.candidate_dir, dest))
        return self._code[key].package

    def get_candidate(self, ranks: int = 1, start_only: bool = False) -> CandidateWorker:
        """The candidate's worker, built once per session; a failed build is remembered, not retried,
        and a candidate that hung (a timeout) is not run again. `ranks` > 1: the candidate's group for
        a multi-GPU lane (its own build, once per session). `start_only`: send the build without
        waiting (it builds while the judge does other work) and return the worker; one already built
        (or whose build failed) is returned (raised) as without it."""
        if start_only and (ranks > 1 or (self.candidate is None and self.candidate_error is None)):
            w = self.worker(self.code(), "candidate", ranks)
            w.cap_memory(self.memory_budget_gib)
            w.request_build()
            return w
        if ranks > 1:
            w = self.worker(self.code(), "candidate", ranks)
            w.cap_memory(self.memory_budget_gib)
            with self.clock.span("build.candidate"):
                w.built(self.cfg.build_timeout_s)
            self.clock.built(w.name, w.build_s, w.build_detail)
            return w
        if self.candidate_error is not None:
            raise self.candidate_error
        hung = self.candidate.error if self.candidate is not None else None
        if hung is not None and hung.kind == "timeout":
            raise hung
        if self.candidate is None:
            try:
                w = self.worker(self.code(), "candidate")
                w.cap_memory(self.memory_budget_gib)
                with self.clock.span("build.candidate"):
                    self.candidate = w.built(self.cfg.build_timeout_s)
                self.clock.built(w.name, w.build_s, w.build_detail)
                self.clock.imported(float(zygote.imports_s() or 0.0), zygote.state())  # most of a CPU build's wait
            except CandidateError as exc:
                self.candidate_error = exc
                self.on_error(exc)
                raise
        return self.candidate

    def build_at_commit(self, commit: str, phase: str = "build.worktree", start_only: bool = False,
                        ranks: int = 1, role: str = "commit") -> CandidateWorker:
        """The candidate package of `commit`, written from its blobs (code), built in its worker:
        one per role, so the holdout's baseline never shares the champion's process (its fresh items
        would be a history of requests the candidate's side has not), and the champion's twin
        (role "twin") is a second, independent build of it. `start_only` sends the build and
        returns at once, so it overlaps the candidate's."""
        with self.clock.span(phase):  # writing the code and the wait count to the phase that needed it
            w = self.worker(self.code(commit), f"{role}-{commit[:7]}", ranks)
            w.cap_memory(self.memory_budget_gib)
            if start_only:
                w.request_build()
                return w
            w.built(self.cfg.build_timeout_s)
            self.clock.built(w.name, w.build_s, w.build_detail)
            err = self.check_worktrees()
            if err is not None:
                raise err
            return w

    def check_worktrees(self) -> CandidateError | None:
        """A CRASH error, reported once (on_error), when a file of the code written for a role this
        run builds changed since (read-only to every worker: only something outside the judge can);
        None while all are intact."""
        for code in self._code.values():
            paths = roles.changed(code)
            if paths:
                err = CandidateError("exception", f"{ROLE_CODE_CHANGED} ({code.source}): {', '.join(paths[:5])}")
                if not self._code_changed:
                    self._code_changed = True
                    self.on_error(err)
                return err
        return None

    def close(self) -> str | None:
        """Stop every worker (and whatever they started); keep their logs beside the run's when the
        run has a log directory. Returns the line that says what a kept candidate's compilations
        added to the tag's compile cache, if anything was said."""
        for w in self._workers.values():  # all at once: each tears down its CUDA context in parallel
            w.ask_to_quit()
        if self.holdout_reference is not None:  # its worker, if still busy, was killed just now
            self.holdout_reference.join(10.0)
        for w in self._workers.values():
            w.close()
        note = add_compiled(self._workers.values(), self.keep_compiled,
                            lambda: compile_cache(self.state_dir, self.resolved_device()))
        if self._run_dir is not None:
            keep_logs(self._run_dir, self._workers.values())
        return note


def threads_for(device: str) -> int:
    """Each worker's torch intra-op threads on `device` (runtime.worker_process.worker_threads)."""
    try:
        return worker_threads(device, len(os.sched_getaffinity(0)), os.environ.get(ENV_CPU_THREADS))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def role_masks(cfg: Config) -> tuple[str, ...]:
    """What every worker's sandbox hides: the repository's git folder (its worktree's too), its
    mutable paths (the working tree is the candidate: a champion comparing itself with them
    would know its role) and the state directory."""
    root = cfg.root.resolve()
    hidden = [root / ".git", *(root / p.strip("/") for p in cfg.mutable_paths), cfg.state_path.resolve()]
    common = queries.git_dirs(root)
    return tuple(dict.fromkeys(str(p) for p in [*hidden, *common] if os.path.lexists(p)))


def worker_env(cfg: Config, cwd: Path, cache: Path) -> dict[str, str]:
    """The judge's environment less what names the state directory, the judge's own settings or
    the moment (pytest's current test: a champion built during a test would see it), plus the
    compile cache's variables; the same for every role (runtime.boxdir)."""
    state = str(cfg.state_path.resolve())
    env = {k: v for k, v in os.environ.items()
           if state not in v and k not in (ENV_CONFIG, ENV_TAG, "OLDPWD", "PYTEST_CURRENT_TEST")}
    env["PWD"] = str(cwd)
    if env.get("PYTHONPATH"):  # the worker starts elsewhere: relative entries must keep their meaning
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) if p else p
                                            for p in env["PYTHONPATH"].split(os.pathsep))
    # torch.compile's caches, one folder per tag and device stack: the champion's side (the
    # champion, its twin, the holdout's baseline) writes it, the candidate reads it through an
    # overlay of its own sandbox (DitarSession.worker; runtime.sandbox), so a rebuilt champion
    # compiles once per machine and the candidate starts from what the champion compiled. Added
    # after the filter on purpose: this names the state directory, which the sandbox shows read-only.
    where = boxdir.CACHE if cfg.sandboxed else str(cache)
    env.update(TORCHINDUCTOR_CACHE_DIR=where, TRITON_CACHE_DIR=f"{where}/triton",
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    return env


def compile_cache(state_dir: Path, device: str) -> Path:
    """torch.compile's cache of this tag and device stack: the champion's (DitarSession.worker)."""
    return TagPaths(state_dir.resolve()).compile_cache(device_key(device))


def keep_logs(run_dir: Path, workers: Iterable[CandidateWorker]) -> None:
    """Each worker's log (made under a name that says nothing of its role) beside the run's, under
    the role's name; one folder per judge process: xdist workers and the decide phase share a run dir."""
    who = os.environ.get("PYTEST_XDIST_WORKER") or f"judge-{os.getpid()}"
    for w in workers:
        folder = w.log_path.parent
        for f in sorted(folder.iterdir()) if folder.is_dir() else []:
            own = f == w.log_path or f.name.startswith(f"{w.name}.")  # a group's rank logs carry its name
            dest = run_dir / "workers" / who / (f"{w.name}.log" if f == w.log_path
                                                else f.name if own else f"{w.name}.{f.name}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            logs.keep_capped(f, dest)  # each capped, the cut said (runtime.logs)


def add_compiled(workers: Iterable[CandidateWorker], keep: bool, cache_of: Callable[[], Path]) -> str | None:
    """After their processes have ended: what a kept candidate compiled goes into the tag's compile
    cache (only names still free there), so the new champion's next build finds it; a discarded
    candidate's writes are dropped. A cache, never state: a failure is a note, not the run's.
    Returns the line that says what was added, or why not."""
    writes = [(w, w.compile_writes) for w in workers if w.compile_writes is not None]
    kept = [(w, folder) for w, folder in writes if w.keep_compile_writes]  # a reference's are never kept
    note = None
    if keep and kept:
        cache = cache_of()
        done, room = compiled.Promoted(), compiled.MAX_BYTES - compiled.size_of(cache)
        for _w, folder in kept:
            try:
                done += compiled.promote(folder / "upper", cache, room - done.bytes)
            except OSError as exc:
                note = f"ditar: compile cache: the kept candidate's compilations not added ({exc})"
        note = done.note(cache) or note
    for w, _folder in writes:
        w.drop_compile_writes()
    return note
