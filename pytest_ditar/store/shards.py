"""A session's quality results, errors and candidate outputs as files, and back.

One format serves two hand-offs: an xdist worker's shard to the controller (so the controller's
decision sees one session) and the quality phase's record to the decide phase (`dit-ar
experiment --workers N`). Latents travel losslessly (float32 .npy inside one .npz), images as
uint8 arrays, so the class-claim check and the champion snapshot on the receiving side see
exactly what the candidate produced.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np

from pytest_ditar.core.errors import CandidateError
from pytest_ditar.core.outputs import ItemOutput
from pytest_ditar.core.quality import ContractResult, Metrics
from pytest_ditar.store.atomic import atomic_file


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


def dump(sess: Any, directory: Path, name: str) -> dict[str, Any]:
    """Write `sess`'s outputs to <directory>/<name>.npz; return the JSON-able payload."""
    directory.mkdir(parents=True, exist_ok=True)
    npz = directory / f"{name}.npz"
    arrays: dict[str, Any] = {}  # ndarrays; as dict[str, ndarray], savez's **kwds would also fill its allow_pickle
    outputs = {}
    for item_id, out in sess.outputs.items():
        k = _key(item_id)
        arrays[f"lat_{k}"] = np.ascontiguousarray(out.latents, dtype=np.float32)
        arrays[f"img_{k}"] = np.ascontiguousarray(out.image, dtype=np.uint8)
        outputs[item_id] = {"key": k, "seconds": out.seconds}
    with atomic_file(npz) as fh:  # a reader never sees half a file
        np.savez(fh, **arrays)
    return {"quality": [result_to_dict(r) for r in sess.quality.values()],
            "errors": [error_to_dict(e) for e in sess.errors],
            "outputs": outputs, "npz": str(npz)}


def load(payload: dict[str, Any]) -> tuple[list[ContractResult], list[CandidateError], list[ItemOutput]]:
    results = [result_from_dict(d) for d in payload.get("quality", [])]
    errors = [error_from_dict(d) for d in payload.get("errors", [])]
    outs: list[ItemOutput] = []
    if payload.get("outputs"):
        with np.load(payload["npz"]) as z:
            for item_id, meta in payload["outputs"].items():
                outs.append(ItemOutput(item_id, z[f"lat_{meta['key']}"], z[f"img_{meta['key']}"],
                                       float(meta["seconds"])))
    return results, errors, outs


def merged(sess: Any, payloads: Iterable[dict[str, Any]]
           ) -> tuple[dict[str, ContractResult], dict[str, ItemOutput], list[CandidateError]]:
    """`sess`'s quality results, outputs and errors with the shards' folded in, in corpus order, so
    the merged session reads like a serial one (the decision's first reason does not depend on which
    worker finished first)."""
    order = {it.id: n for n, it in enumerate(sess.suite.corpus)}
    results, errors, outs = list(sess.quality.values()), list(sess.errors), list(sess.outputs.values())
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

