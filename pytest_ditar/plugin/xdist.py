"""pytest-xdist integration: `pytest -m quality -n <gpus>`.

- Each worker is pinned to its own GPU by its id (gwN -> cuda:N) unless --ditar-device is given.
- The gate's guards run ONCE, on the controller, after the first worker reported its collection
  and before xdist schedules any test (pytest_xdist_node_collection_finished runs just before
  the scheduler in DSession.worker_collectionfinish). The controller writes its go/no-go, the
  run's class and run dir to a file whose path every worker got in `workerinput`; a worker reads
  it before its first ditar test, so a guarded candidate never runs on any worker.
- Workers send their results (loop.run.results.RunResults: quality results, errors and candidate
  outputs) back through `config.workeroutput` (outputs as an .npz beside it); the controller merges
  them into its gate's RunResults in `pytest_testnodedown`, so the decision, the class-claim check
  and the champion snapshot see one run (the way syrupy merges snapshot reports).
- Perf lanes never run inside a worker: timing next to other busy workers is poisoned.
- Quality items of one harness batch are one scheduling scope (the controller supplies xdist's
  scope scheduler), so a batch is generated once, on one worker.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_ditar.core.errors import CandidateError
from pytest_ditar.hardware.fingerprint import cuda_device_count
from pytest_ditar.loop.run import phases
from pytest_ditar.plugin.keys import collected_keys, get_gate, item_key
from pytest_ditar.runtime.harness import batches
from pytest_ditar.store.atomic import write_json_atomic

PERF_REFUSAL = "perf lanes do not run under xdist workers: run them serially (dit-ar experiment does this)"
WORKER_DEVICE_ENV = "PYTEST_XDIST_WORKER"


def worker_id(config: Any | None = None) -> str | None:
    """The xdist worker id (gw0, gw1, ...) in a worker, else None."""
    if config is not None and hasattr(config, "workerinput"):
        return config.workerinput.get("workerid")
    return os.environ.get(WORKER_DEVICE_ENV)


def is_worker(config: Any) -> bool:
    return hasattr(config, "workerinput")


def is_controller(config: Any) -> bool:
    """xdist distributes this session (-n N with N > 0) and we are the controller."""
    if is_worker(config):
        return False
    # checked at our pytest_configure, before xdist registers its DSession: read the options
    n = getattr(config.option, "numprocesses", None)
    return bool(n) or getattr(config.option, "dist", "no") != "no"


def device_for_worker(wid: str | None, cuda_available: bool | None = None, count: int | None = None) -> str | None:
    """gwN -> cuda:N (modulo the GPU count) when CUDA is available; None (auto: cpu) otherwise."""
    if not wid or not wid.startswith("gw"):
        return None
    if cuda_available is None:
        count = cuda_device_count()
        cuda_available = count > 0
    if not cuda_available or not count:
        return None
    return f"cuda:{int(wid[2:]) % count}"


def worker_device(config: Any) -> str | None:
    """The device a worker is pinned to (None outside workers)."""
    return device_for_worker(worker_id(config)) if is_worker(config) else None


def _param_id(nodeid: str) -> str | None:
    """`path::test_quality[xl-003]` -> `xl-003`."""
    head, sep, tail = nodeid.rpartition("[")
    return tail.split("]", 1)[0] if sep and "]" in tail else None


class ControllerPlugin:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.exchange = Path(tempfile.mkdtemp(prefix="ditar-xdist-"))
        self.go_file = self.exchange / "go.json"
        self.decided = False

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config, log):
        """xdist's scope scheduler with one scope per harness batch, so a batch is generated once.

        xdist's own `loadgroup` reads a group suffix that it appends to node ids, and that no
        longer takes on pytest >= 9.2 (pytest-xdist#1386): every item was then scheduled alone
        and each worker regenerated whole batches. The scope here comes from the item's id."""
        gate = get_gate(config)
        if gate is None or config.getvalue("dist") not in ("load", "loadgroup", "loadscope", "loadfile"):
            return None
        from xdist.scheduler import LoadScopeScheduling

        s = gate.sess
        group_of = {it.id: f"ditar-batch-{n}"
                    for n, b in enumerate(batches(s.suite.corpus, s.suite, s.suite.pipeline.batch))
                    for it in b}

        class BatchScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return group_of.get(_param_id(nodeid), nodeid)

        return BatchScheduling(config, log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput["ditar_exchange"] = str(self.exchange)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        seen = self.exchange / f"collected-{node.gateway.id}.json"
        data = json.loads(seen.read_text()) if seen.is_file() else {"items": [], "lanes": []}
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if data.get("device") and tr is not None:
            tr.write_line(f"ditar: {node.gateway.id}: {data['device']}")  # the header line a serial run shows
        if self.decided:
            return
        self.decided = True
        gate = get_gate(self.config)
        go: dict[str, Any] = {"run": True, "reason": "", "judged_class": None, "gated": False, "run_dir": None}
        if gate is not None:
            gate.collected(data["items"], data["lanes"])
            ok = gate.before_tests()
            if ok and gate.gated and gate.lanes_collected and gate.opts.phase != phases.QUALITY:
                # A gated run would time lanes inside busy workers: refuse before anything runs.
                gate.refuse(f"{PERF_REFUSAL}; use `dit-ar experiment --workers N` or run "
                            "`pytest -m quality -n N --ditar-phase=quality` then `pytest -m perf --ditar-phase=decide`")
                ok = False
            go = {"run": bool(ok), "reason": gate.refusal or "guard violation: the candidate never runs",
                  "judged_class": gate.sess.judged_class, "gated": gate.gated,
                  "run_dir": str(gate.sess.run_dir()) if gate.gated else None}
        write_json_atomic(self.go_file, go, default=str)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        out = getattr(node, "workeroutput", None) or {}
        gate = get_gate(self.config)
        if gate is None:
            return
        raw = out.get("ditar")
        if raw:
            payload = json.loads(raw)
            gate.results.absorb(payload, gate.sess.suite.corpus)  # one run's results, as if serial
            if payload.get("clock"):
                gate.sess.clock.absorb(payload["clock"])  # the run's time line covers every worker
        elif error is not None and self.decided:
            # A worker that died (segfault, os._exit) took the candidate with it: a crash.
            gate.results.add_error(CandidateError("exception", f"xdist worker {node.gateway.id} died: {error}"))

    def pytest_unconfigure(self, config) -> None:
        shutil.rmtree(self.exchange, ignore_errors=True)


class WorkerPlugin:
    def __init__(self, config: pytest.Config):
        self.config = config
        # xdist sets workerinput (and workeroutput) on a worker's config; pytest.Config does not declare them
        workerinput = config.workerinput  # type: ignore[attr-defined]
        self.exchange = Path(workerinput["ditar_exchange"]) if "ditar_exchange" in workerinput else None
        self.go: dict[str, Any] | None = None

    @pytest.hookimpl(tryfirst=True)  # before xdist tells the controller that collection finished
    def pytest_collection_finish(self, session) -> None:
        """Report what this worker will run, after `-m`/`-k` deselection, for the gate's full-run test."""
        items, lanes = collected_keys(session.items)
        found: dict[str, Any] = {"items": items, "lanes": lanes}
        gate = get_gate(self.config)
        if gate is not None and found["items"]:
            found["device"] = gate.device_line()
        if self.exchange is not None:
            write_json_atomic(self.exchange / f"collected-{worker_id(self.config)}.json", found, default=str)

    def _read_go(self) -> dict[str, Any]:
        if self.go is None:
            f = self.exchange / "go.json" if self.exchange else None
            self.go = json.loads(f.read_text()) if f and f.is_file() else {
                "run": False, "reason": "no go-ahead from the xdist controller (pytest-ditar plugin missing there?)"}
            gate = get_gate(self.config)
            if gate is not None and self.go.get("run"):
                gate.follow(self.go.get("judged_class"), self.go.get("run_dir"), bool(self.go.get("gated")))
        return self.go

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item_key(item) is None:
            return
        go = self._read_go()
        if not go.get("run"):
            pytest.skip(f"ditar: {go.get('reason')}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        if item.get_closest_marker("perf"):
            pytest.fail(PERF_REFUSAL, pytrace=False)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session) -> None:
        gate = get_gate(self.config)
        if gate is None or self.exchange is None:
            return
        r = gate.results
        if not (r.outputs or r.quality or r.errors):
            return
        payload = r.dump(self.exchange, f"shard-{worker_id(self.config)}")
        payload["clock"] = gate.sess.clock.to_payload()
        self.config.workeroutput["ditar"] = json.dumps(payload, default=str)  # type: ignore[attr-defined]


def register(config: pytest.Config) -> None:
    """Called from the plugin's pytest_configure: add the controller or worker side."""
    if is_worker(config):
        config.pluginmanager.register(WorkerPlugin(config), "ditar-xdist-worker")
    elif is_controller(config):
        config.pluginmanager.register(ControllerPlugin(config), "ditar-xdist-controller")
