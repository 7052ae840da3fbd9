"""`dit-ar status`: where the research session stands, in a few lines an agent can read."""
from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from typing import Any

from pytest_ditar.cli.command import Command, config_path, light_session
from pytest_ditar.config.project import PerfConfig, load_config
from pytest_ditar.config.semantic import OWNER, availability
from pytest_ditar.config.suite import Suite
from pytest_ditar.core.cumulative import cite
from pytest_ditar.core.decision import champion_row, cumulative_class, kept_rows
from pytest_ditar.core.reach import Reach
from pytest_ditar.core.rerun import counts, row_judged
from pytest_ditar.core.vocabulary import SCHEMA_VERSION, STATUSES
from pytest_ditar.loop.integrity.tags import off_research_branch
from pytest_ditar.loop.integrity.worktrees import collect_all, status_all
from pytest_ditar.loop.judge.nextstep import NOT_JUDGED_RULE
from pytest_ditar.loop.perf.bound import experiments_run, read_bound
from pytest_ditar.loop.perf.reach import baseline_reach
from pytest_ditar.loop.run.verify import state_checks
from pytest_ditar.loop.share import fleetview
from pytest_ditar.store import tried
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LedgerRow, read_lanes
from pytest_ditar.store.snapshot import MANIFEST, lane_samples, load_snapshot, verify_snapshot
from pytest_ditar.vcs import branches, queries, trees


class Status(Command):
    name = "status"
    help = "baseline, champion, recent experiments, ledger chain"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-n", type=int, default=10, help="recent experiments to show")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--all", action="store_true",
                            help="every tag of every worktree (branch, path, GPU, champion, counts)")
        parser.add_argument("--remote", default=None,
                            help="with --all: also every fleet host on this remote and the fleet champion "
                                 "(fetches it; docs/fleet.md)")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        if args.all:
            cfg = load_config(config_path(args))
            if args.remote and args.json:  # one document: this clone's tags and the remote's fleets
                fleets = fleetview.collect(cfg, args.remote)
                print(json.dumps({"tags": collect_all(cfg), "fleets": fleets}, indent=1, default=str))
                return 1 if any("refused" in f or not all(h["verifies"] for h in f["hosts"]) for f in fleets) else 0
            rc = status_all(cfg, as_json=args.json)
            return max(rc, fleetview.show(cfg, args.remote)) if args.remote else rc
        return status(light_session(args), n=args.n, as_json=args.json)


def collect_status(cfg, suite, tag: str, n: int = 10) -> dict[str, Any]:
    paths = TagPaths.of(cfg.root, cfg.state_dir, tag)
    state = paths.dir
    ledger = Ledger(state)
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "tag": tag, "suite": suite.name,
                           "objective_lane": cfg.objective_lane, "state_dir": str(state)}
    out["initialised"] = _initialised(cfg, paths)
    # The same checks a gated run makes before the candidate runs: a missing ledger or baseline,
    # an edited manifest (its anchor) or champion is broken, never "0 rows, verifies".
    out["problems"] = [c.line() for c in state_checks(cfg.root, paths) if not c.ok] if out["initialised"] else []
    out["baseline"] = _baseline(paths.baseline, suite, cfg.perf)
    report = ledger.verify()
    # A broken chain is still shown (leniently parsed): status is how one finds out what broke.
    rows = ledger.rows() if ledger.jsonl_path.exists() and not report.problems else ledger.lenient_rows()
    exps = [r for r in rows if r.status in STATUSES]
    kept = kept_rows(exps)
    out["ledger"] = {"rows": len(rows), "exists": ledger.jsonl_path.is_file(), "verifies": report.ok,
                     "problems": list(report.problems[:5]), "repairable": list(getattr(report, "repairable", ()))}
    out["cumulative_class"] = cumulative_class([r.cls for r in kept])
    # The figure to cite (program.md section 5): the KEEPs' speedups chained, with a CI
    # (core.cumulative). The stored medians were timed apart, under each run's own load: beside it only.
    champ = champion_row(exps)
    out["champion"] = ({"commit": champ.commit, "lane": champ.lane, "speedup_vs_previous": champ.metric,
                        "cumulative": _chained(kept),
                        "stored_vs_baseline": _stored_ratio(paths, champ.commit, cfg.objective_lane)}
                       if champ else None)
    out["classes"] = {c: {"available": why is None, "why": why} for c, why in availability(cfg)}
    bound = read_bound(state)
    out["bound"] = {**bound.__dict__, "now": bound.describe(experiments_run(state)),
                    "reached": bound.reached(experiments_run(state))}
    out["counts"] = counts(exps)  # a run that judged nothing counts as "not judged", not as its DISCARD
    out["tried"] = tried.rows(paths)[-n:]  # `dit-ar try`'s notes: ideas timed, judged by no gate
    out["recent"] = [{"run": r.run, "commit": r.commit, "class": r.cls, "status": r.status, "metric": r.metric,
                      "ci_low": r.ci_low, "ci_high": r.ci_high, "quality_pass": r.quality_pass,
                      "quality_total": r.quality_total, "description": r.description, "reason": r.reason,
                      "judged": row_judged(r)} for r in exps[-n:]]
    return out


def _initialised(cfg, paths) -> bool:
    """Started by `dit-ar init` (or a baseline), or backed up in git, or its branch exists: then a
    missing piece of its state is damage, not a fresh start."""
    return any(p.exists() for p in (paths.session_file, paths.ledger_jsonl, paths.baseline)) \
        or queries.ref_commit(cfg.root, trees.state_ref(paths.tag)) is not None \
        or branches.branch_exists(cfg.root, cfg.branch_prefix + paths.tag)


def _baseline(base_dir, suite: Suite | None = None, perf: PerfConfig | None = None) -> dict[str, Any] | None:
    if not (base_dir / MANIFEST).is_file():
        return None
    snap = load_snapshot(base_dir, verify=False)
    problems = verify_snapshot(snap)
    m = snap.manifest
    lanes = read_lanes(snap.read_json("lanes.json"))
    reach = baseline_reach(lanes, suite, perf) if suite is not None and perf is not None else {}
    return {"commit": m.get("git_sha"), "items": len(m.get("items", {})), "device": m.get("device"),
            "created": m.get("created"), "verifies": not problems, "problems": problems[:3],
            "lanes": {k: {"median_s": statistics.median(v.samples), "noise_half_width": v.noise["ci_half_width"],
                          # issue 41: what a gated run of this lane can resolve, before one is spent
                          "resolvable": vars(reach[k]) if k in reach else None}
                      if v.samples and v.noise else {"figure": v.figure}  # a lane of another kind
                      for k, v in lanes.items()}}


def _stored_ratio(paths, commit: str, lane: str) -> dict[str, Any] | None:
    """Baseline median / champion median on `lane`, from the samples each stored when it was measured
    (different runs: the host's load between them counts too). None when either is missing."""
    try:
        base = lane_samples(load_snapshot(paths.baseline, verify=False).read_json("lanes.json"))[lane]
        stored = load_snapshot(paths.champion(commit), "champion", verify=False).read_json("lanes.json")
        champ = lane_samples(stored)[lane]
        b, c = statistics.median(base), statistics.median(champ)
    except Exception:  # noqa: BLE001 - an older or damaged snapshot: nothing to compare, said as n/a
        return None
    return {"lane": lane, "baseline_median_s": b, "champion_median_s": c, "ratio": b / c if c else None}


def _chained(kept: Sequence[LedgerRow]) -> dict[str, Any] | None:
    """The champion over the baseline: the kept rows' speedups chained (core.cumulative.cite, the
    figure `compare baseline champion` and the report give too)."""
    c = cite(kept)
    if c is None:
        return None
    return {"speedup": c.speedup, "ci95": [c.ci_low, c.ci_high] if c.ci_low is not None else None,
            "keeps": c.keeps, "text": c.text(), "net": c.net, "gross": c.gross, "basis": c.basis()}


def status(light: tuple, n: int = 10, as_json: bool = False) -> int:
    cfg, suite, tag = light
    st = collect_status(cfg, suite, tag, n)
    healthy = st["initialised"] and not st["problems"] and st["ledger"]["verifies"] \
        and (not st["baseline"] or st["baseline"]["verifies"])
    if as_json:  # its next step a field, as the text's `ditar: next:` line (or the line that stands for it)
        st["next"] = _next_step(st) if st["initialised"] else _not_started(cfg, tag)
        print(json.dumps(st, indent=1, default=str))
        return 0 if healthy else 1
    print(f"tag {tag}  suite {suite.name}  objective {cfg.objective_lane}  cumulative class {st['cumulative_class']}")
    if not st["initialised"]:
        print(_not_started(cfg, tag))
        return 1
    _StatusPrinter(st).sections()
    for line in st["problems"]:
        print(f"state     {line}")
    print("ditar: next: " + _next_step(st))
    return 0 if healthy else 1


def _not_started(cfg, tag: str) -> str:
    return (off_research_branch(cfg, tag)
            or f"tag {tag} not started: run `dit-ar init --tag {tag}`, then `dit-ar baseline`")


class _StatusPrinter:
    """status's text, a section a method, from collect_status's document."""

    def __init__(self, st: dict[str, Any]):
        self.st = st

    def sections(self) -> None:
        self.baseline()
        self.champion()
        self.counts()
        self.classes()
        self.recent()
        self.tried()
        self.ledger()

    def baseline(self) -> None:
        b = self.st["baseline"]
        if not b:
            print("baseline  missing")
            return
        flag = "verifies" if b["verifies"] else f"CORRUPTED: {b['problems'][0]}"
        print(f"baseline  {str(b['commit'])[:7]}  {b['items']} items on {b['device']}  {flag}")
        for k, v in b["lanes"].items():
            print(f"  lane {k}: median {v['median_s'] * 1e3:.2f} ms, noise +/-{v['noise_half_width'] * 100:.2f}%"
                  + (f"; {Reach(**v['resolvable']).text()}" if v.get("resolvable") else ""))

    def champion(self) -> None:
        c = self.st["champion"]
        if not c:
            print("champion  the baseline (nothing kept yet)")
            return
        cu = c["cumulative"]
        chain = cu["text"] if cu else "n/a"
        d = c["stored_vs_baseline"]
        direct = (f"{d['ratio']:.3f}x ({d['baseline_median_s'] * 1e3:.2f} -> {d['champion_median_s'] * 1e3:.2f} ms)"
                  if d and d["ratio"] else "n/a")
        print(f"champion  {str(c['commit'])[:7]}  lane {c['lane']}  speedup over the baseline {chain} (cite this)")
        # the other figure, said as what it is: two medians of different runs, each under its own load
        print(f"          stored medians ratio {direct}: baseline and champion each timed in its own run, under "
              "that run's load; not a speed-up to cite")
        if cu and cu.get("basis"):
            print(f"          the cited figure is {cu['basis']}")

    def counts(self) -> None:
        cnt, bound = self.st["counts"], self.st["bound"]
        print(f"experiments  KEEP {cnt['KEEP']}  DISCARD {cnt['DISCARD']}  CRASH {cnt['CRASH']}  "
              f"not judged {cnt['not judged']}" + (f" ({NOT_JUDGED_RULE})" if cnt["not judged"] else ""))
        if bound["max_experiments"] is not None or bound["until"]:
            print(f"bound     {bound['now']}" + ("; REACHED: stop" if bound["reached"] else ""))

    def classes(self) -> None:
        """The classes the run can judge, and the others grouped by why not."""
        classes = self.st["classes"]
        print("classes   can judge: " + (", ".join(k for k, v in classes.items() if v["available"]) or "none"))
        whys: dict[str, list[str]] = {}
        for k, v in classes.items():
            if not v["available"]:
                whys.setdefault(v["why"], []).append(k)
        for why, names in whys.items():
            print(f"          {', '.join(names)}: unavailable, {why}; {OWNER}")

    def recent(self) -> None:
        for r in self.st["recent"]:
            metric = f"{float(r['metric']):.3f}x" if r["metric"] not in ("", None) else "n/a"
            why = f"  ({r['reason']})" if r["status"] != "KEEP" and r["reason"] else ""
            if not r["judged"]:
                why = f"  (not judged: {r['reason']})"
            print(f"  #{r['run']} {str(r['commit'])[:7]} {r['status']:<7} {r['class']:<12} {metric:>7} "
                  f"q={r['quality_pass']}/{r['quality_total']}  {r['description']}{why}")

    def tried(self) -> None:
        tried = self.st["tried"]
        if not tried:
            return
        print(f"tried     {len(tried)} idea(s) timed by `dit-ar try` (no verdict), newest last:")
        for t in tried:
            speed = f"{t['speedup']:.3f}x" if isinstance(t.get("speedup"), (int, float)) else "n/a"
            print(f"  {t.get('time', '?')} {t.get('head', '?')} {t.get('outcome', '?'):<14} {speed:>7}  "
                  f"{t.get('description') or '(no description)'}")

    def ledger(self) -> None:
        led = self.st["ledger"]
        if not led["exists"]:
            print("ledger    missing")
        elif led["verifies"]:
            print(f"ledger    {led['rows']} rows, hash chain verifies")
        else:
            print(f"ledger    CHAIN BROKEN: {'; '.join(led['problems'][:3])}")


def _next_step(st: dict[str, Any]) -> str:
    """What the session calls for now (program.md section 2), from status's own values."""
    if st["problems"] or not st["ledger"]["verifies"]:
        return "fix what the state lines name (`dit-ar verify` checks, `dit-ar recover` restores from the backup)"
    if not st["baseline"]:
        return "`dit-ar baseline` (before any change to mutable/)"
    if st["bound"]["reached"]:
        return "stop: the session's bound is reached"
    if st["baseline"]["lanes"] and not st["recent"]:
        return ("`dit-ar profile` to see where the time goes, then one hypothesis: edit mutable/, `dit-ar try`, "
                "commit, `dit-ar experiment`")
    return ("the next hypothesis (not one judged above): `dit-ar search \"...\"`, edit mutable/, `dit-ar try`, "
            "commit with its `Ditar-Class:` trailer, `dit-ar experiment`")
