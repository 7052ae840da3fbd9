"""`dit-ar status`: where the research session stands, in a few lines an agent can read."""
from __future__ import annotations

import json
import statistics
from typing import Any

from pytest_ditar.core.decision import cumulative_class
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.snapshot import load_snapshot, verify_snapshot


def collect_status(cfg, suite, tag: str, n: int = 10) -> dict[str, Any]:
    state = cfg.state_path / tag
    ledger = Ledger(state)
    out: dict[str, Any] = {"tag": tag, "suite": suite.name, "objective_lane": cfg.objective_lane, "state_dir": str(state)}
    base_dir = state / "baseline"
    if (base_dir / "manifest.json").is_file():
        snap = load_snapshot(base_dir, verify=False)
        problems = verify_snapshot(snap)
        m = snap.manifest
        out["baseline"] = {"commit": m.get("git_sha"), "items": len(m.get("items", {})), "device": m.get("device"),
                           "created": m.get("created"), "verifies": not problems, "problems": problems[:3]}
        lanes = snap.read_json("lanes.json") or {}
        out["baseline"]["lanes"] = {k: {"median_s": statistics.median(v["samples"]),
                                        "noise_half_width": v["noise"]["ci_half_width"]} for k, v in lanes.items()}
    else:
        out["baseline"] = None
    report = ledger.verify()
    rows = ledger.rows() if ledger.jsonl_path.exists() and not report.problems else _rows_lenient(ledger)
    exps = [r for r in rows if r.get("status") in ("KEEP", "DISCARD", "CRASH")]
    kept = [r for r in exps if r.get("status") == "KEEP"]
    out["ledger"] = {"rows": len(rows), "verifies": report.ok, "problems": list(report.problems[:5]),
                     "repairable": list(getattr(report, "repairable", ()))}
    out["cumulative_class"] = cumulative_class([str(r["class"]) for r in kept])
    out["champion"] = ({"commit": kept[-1]["commit"], "lane": kept[-1]["lane"], "speedup_vs_previous": kept[-1]["metric"],
                        "cumulative_speedup": _product([r["metric"] for r in kept])} if kept else None)
    out["counts"] = {s: sum(1 for r in exps if r["status"] == s) for s in ("KEEP", "DISCARD", "CRASH")}
    out["recent"] = [{k: r.get(k) for k in ("run", "commit", "class", "status", "metric", "ci_low", "ci_high",
                                            "quality_pass", "quality_total", "description", "reason")} for r in exps[-n:]]
    return out


def _rows_lenient(ledger: Ledger) -> list[dict[str, Any]]:
    if not ledger.jsonl_path.exists():
        return []
    rows = []
    for line in ledger.jsonl_path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _product(xs: list[Any]) -> float | None:
    p = 1.0
    for x in xs:
        try:
            p *= float(x)
        except (TypeError, ValueError):
            return None
    return p


def status(light: tuple, n: int = 10, as_json: bool = False) -> int:
    cfg, suite, tag = light
    st = collect_status(cfg, suite, tag, n)
    if as_json:
        print(json.dumps(st, indent=1, default=str))
        return 0 if st["ledger"]["verifies"] else 1
    b = st["baseline"]
    print(f"tag {tag}  suite {suite.name}  objective {cfg.objective_lane}  cumulative class {st['cumulative_class']}")
    if b:
        flag = "verifies" if b["verifies"] else f"CORRUPTED: {b['problems'][0]}"
        print(f"baseline  {str(b['commit'])[:7]}  {b['items']} items on {b['device']}  {flag}")
        for k, v in b["lanes"].items():
            print(f"  lane {k}: median {v['median_s'] * 1e3:.2f} ms, noise +/-{v['noise_half_width'] * 100:.2f}%")
    else:
        print("baseline  missing: run `dit-ar baseline`")
    c = st["champion"]
    if c:
        cum = f"{c['cumulative_speedup']:.3f}x" if c["cumulative_speedup"] else "n/a"
        print(f"champion  {str(c['commit'])[:7]}  lane {c['lane']}  cumulative speedup {cum} over the baseline")
    else:
        print("champion  the baseline (nothing kept yet)")
    cnt = st["counts"]
    print(f"experiments  KEEP {cnt['KEEP']}  DISCARD {cnt['DISCARD']}  CRASH {cnt['CRASH']}")
    for r in st["recent"]:
        metric = f"{float(r['metric']):.3f}x" if r["metric"] not in ("", None) else "n/a"
        why = f"  ({r['reason']})" if r["status"] != "KEEP" and r["reason"] else ""
        print(f"  #{r['run']} {str(r['commit'])[:7]} {r['status']:<7} {r['class']:<12} {metric:>7} "
              f"q={r['quality_pass']}/{r['quality_total']}  {r['description']}{why}")
    led = st["ledger"]
    if led["verifies"]:
        print(f"ledger    {led['rows']} rows, hash chain verifies")
    else:
        print(f"ledger    CHAIN BROKEN: {'; '.join(led['problems'][:3])}")
    return 0 if led["verifies"] and (not b or b["verifies"]) else 1
