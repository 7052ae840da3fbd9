"""A run's quality results, errors and candidate outputs (loop.run.results.RunResults) as files, and back.

One format serves two hand-offs: an xdist worker's shard to the controller (so the controller's
decision sees one run) and the quality phase's record to the decide phase (`dit-ar
experiment --workers N`). Latents travel losslessly (float32 .npy inside one .npz), images as
uint8 arrays, so the class-claim check and the champion snapshot on the receiving side see
exactly what the candidate produced. A payload carries its format's version (`api_version`, as
asv's Results does); one of another version is refused, never misread (a payload without one is
version 1, the format before the key).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from pytest_ditar.core.errors import CandidateError, DitarError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import ContractResult, Metrics
from pytest_ditar.store.atomic import atomic_file

API_VERSION = 1  # the payload's format: bump it with an upgrade path in load() when a field changes


def result_to_dict(r: ContractResult) -> dict[str, Any]:
    return {"item_id": r.item_id, "cls": r.class_name, "metrics": r.metrics.as_dict(), "failures": list(r.failures)}


def result_from_dict(d: dict[str, Any]) -> ContractResult:
    return ContractResult(d["item_id"], d["cls"], Metrics(**d["metrics"]), tuple(d["failures"]))


def error_to_dict(e: CandidateError) -> dict[str, Any]:
    return {"kind": e.kind, "message": e.message, "item": e.item, "seconds": e.seconds, "where": e.where}


def error_from_dict(d: dict[str, Any]) -> CandidateError:
    return CandidateError(d["kind"], d["message"], item=d.get("item"), seconds=d.get("seconds"), where=d.get("where"))


def _key(item_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in item_id)


def dump(outputs_made: Iterable[ItemOutput], quality: Iterable[ContractResult], errors: Iterable[CandidateError],
         directory: Path, name: str) -> dict[str, Any]:
    """Write the outputs to <directory>/<name>.npz; return the JSON-able payload."""
    directory.mkdir(parents=True, exist_ok=True)
    npz = directory / f"{name}.npz"
    arrays: dict[str, Any] = {}  # ndarrays; as dict[str, ndarray], savez's **kwds would also fill its allow_pickle
    outputs = {}
    for out in outputs_made:
        item_id = out.item_id
        k = _key(item_id)
        arrays[f"lat_{k}"] = np.ascontiguousarray(out.latents, dtype=np.float32)
        arrays[f"img_{k}"] = np.ascontiguousarray(out.image, dtype=np.uint8)
        outputs[item_id] = {"key": k, "seconds": out.seconds}
    with atomic_file(npz) as fh:  # a reader never sees half a file
        np.savez(fh, **arrays)
    return {"api_version": API_VERSION, "quality": [result_to_dict(r) for r in quality],
            "errors": [error_to_dict(e) for e in errors], "outputs": outputs, "npz": str(npz)}


def load(payload: dict[str, Any]) -> tuple[list[ContractResult], list[CandidateError], list[ItemOutput]]:
    version = payload.get("api_version", 1)
    if version != API_VERSION:
        raise DitarError(f"a results record of format {version}, this judge reads {API_VERSION}: "
                         "run the quality phase again with this version")
    results = [result_from_dict(d) for d in payload.get("quality", [])]
    errors = [error_from_dict(d) for d in payload.get("errors", [])]
    outs: list[ItemOutput] = []
    if payload.get("outputs"):
        with np.load(payload["npz"]) as z:
            for item_id, meta in payload["outputs"].items():
                outs.append(ItemOutput(item_id, z[f"lat_{meta['key']}"], z[f"img_{meta['key']}"],
                                       float(meta["seconds"])))
    return results, errors, outs


def merged(corpus_ids: Sequence[str], quality_made: Iterable[ContractResult], outputs_made: Iterable[ItemOutput],
           errors_made: Iterable[CandidateError], payloads: Iterable[dict[str, Any]]
           ) -> tuple[dict[str, ContractResult], dict[str, ItemOutput], list[CandidateError]]:
    """The quality results, outputs and errors given with the shards' folded in, in corpus order, so
    the merged results read like a serial run's (the decision's first reason does not depend on
    which worker finished first)."""
    order = {item_id: n for n, item_id in enumerate(corpus_ids)}
    results, errors, outs = list(quality_made), list(errors_made), list(outputs_made)
    for p in payloads:
        r, e, o = load(p)
        results += r
        errors += e
        outs += o
    big = len(order) + 1
    quality = {r.item_id: r for r in sorted(results, key=lambda r: order.get(r.item_id, big))}
    outputs = {o.item_id: o for o in sorted(outs, key=lambda o: order.get(o.item_id, big))}
    # errors without an item (a build failure) come first, as they would in a serial run
    return quality, outputs, sorted(errors, key=lambda e: -1 if e.item is None else order.get(e.item, big))

