"""`dit-ar status --all --remote R`: every host of every fleet the remote holds, and each fleet's
champion with its lineage (issue 44).

Each host's line: its champion, the cumulative speedup (the chained, citable figure, measured on
that host: its host named), its last run and class, and its card against the reference card. A
figure from another card is labelled a screening result; only promotions move the fleet champion.
A host whose ledger does not verify is shown refused, with the cause.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_ditar.config.project import Config
from pytest_ditar.core import fleet as rules
from pytest_ditar.core.cumulative import cite
from pytest_ditar.core.decision import kept_rows
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import FLEET_REF, STATUSES
from pytest_ditar.loop.share import fleet
from pytest_ditar.vcs import queries


def _host(h: fleet.HostState, ref_card: Mapping[str, Any]) -> dict[str, Any]:
    exps = [r for r in h.rows if r.status in STATUSES]
    champ = h.champion
    c = cite(kept_rows(exps))
    diff = rules.card_diff(ref_card, h.card) if ref_card else ()
    last = exps[-1] if exps else None
    return {"host": h.host, "tag": h.tag, "verifies": not h.problems, "problems": list(h.problems[:3]),
            "champion": champ.commit if champ else None,
            "cumulative": {"speedup": c.speedup, "text": c.text(), "measured_on": h.host} if c else None,
            "last_run": {"run": last.run, "status": last.status, "class": last.cls}
            if last else None,
            "card": "reference" if not diff else "other", "card_diff": list(diff)}


def collect(cfg: Config, remote: str) -> list[dict[str, Any]]:
    key = fleet.fetch(cfg, remote)
    out = []
    prefix = f"{FLEET_REF}{key}/"
    for ref in queries.refs_under(cfg.root, prefix):
        name = ref[len(prefix):]
        doc: dict[str, Any] = {"fleet": name, "remote": remote}
        try:
            rows, _ = fleet.read_fleet(cfg.root, ref, remote)
        except DitarError as exc:
            out.append({**doc, "refused": str(exc)})
            continue
        ref_row = rules.reference_row(rows) or {}
        card = ref_row.get("card")
        ref_card = card if isinstance(card, Mapping) else {}
        best = rules.fleet_champion(rows)
        doc.update(reference_host=ref_row.get("host"),
                   hosts=[_host(h, ref_card) for h in fleet.hosts(cfg, key, name)],
                   champion={"commit": best.get("commit"), "from_host": best.get("source_host"),
                             "source_commit": best.get("source_commit"), "judged_on": best.get("host"),
                             "speedup": best.get("speedup")} if best else None,
                   lineage=[{"commit": r.get("commit"), "from_host": r.get("source_host"),
                             "speedup": r.get("speedup"), "time": r.get("time")} for r in rules.lineage(rows)],
                   rows=len(rows))
        out.append(doc)
    return out


def show(cfg: Config, remote: str, as_json: bool = False) -> int:
    docs = collect(cfg, remote)
    if as_json:
        print(json.dumps(docs, indent=1, default=str))
        return 0 if all("refused" not in d for d in docs) else 1
    if not docs:
        print(f"no fleet on {remote} (`dit-ar fleet init --remote {remote}` on the reference host)")
        return 0
    bad = 0
    for d in docs:
        if "refused" in d:
            print(f"fleet {d['fleet']} on {remote}: {d['refused']}")
            bad += 1
            continue
        print(f"fleet {d['fleet']} on {remote}  reference host {d['reference_host']}  ({d['rows']} fleet rows)")
        for h in d["hosts"]:
            if not h["verifies"]:
                print(f"  host {h['host']:<10} REFUSED: its ledger's hash chain does not verify: {h['problems'][0]}")
                bad += 1
                continue
            champ = str(h["champion"])[:7] if h["champion"] else "baseline"
            cu = h["cumulative"]
            fig = f"{cu['text']} on host {cu['measured_on']}" if cu else "n/a"
            if h["card"] != "reference" and cu:
                fig += f" (screening: another card, {'; '.join(h['card_diff'])})"
            last = h["last_run"]
            run = f"#{last['run']} {last['status']} {last['class']}" if last else "none"
            print(f"  host {h['host']:<10} branch autoresearch/{h['tag']}  champion {champ}  cumulative {fig}  "
                  f"last run {run}")
        c = d["champion"]
        if c:
            print(f"  fleet champion {str(c['commit'])[:7]} (host {c['from_host']}'s {str(c['source_commit'])[:7]}, "
                  f"re-judged on {c['judged_on']}: {_x(c['speedup'])} over the fleet champion before it)")
        else:
            print("  fleet champion: the original baseline (nothing promoted yet)")
        for i, r in enumerate(d["lineage"], 1):
            print(f"    lineage {i}: {str(r['commit'])[:7]} from host {r['from_host']} ({_x(r['speedup'])}) "
                  f"{r['time']}")
    return 1 if bad else 0


def _x(speedup: object) -> str:
    """A ratio as every verdict line writes it (three decimals), n/a where there is none."""
    return f"{float(speedup):.3f}x" if isinstance(speedup, (int, float)) else "n/a"
