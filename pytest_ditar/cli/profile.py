"""`dit-ar profile`: where one call of the candidate spends its time, by pipeline phase, before a
hypothesis is written (loop.perf.profile). Times no lane, records nothing, leaves git alone."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from pytest_ditar.cli.command import Command, open_session, print_document
from pytest_ditar.core.attribution import BYPASSED, UNMARKED_WHY
from pytest_ditar.core.documents import PROFILE_NEXT, profile_document
from pytest_ditar.core.errors import CandidateError
from pytest_ditar.core.kernels import REST, REST_LABEL
from pytest_ditar.core.launches import EXTRA_ROWS, IDLE, ROWS, DeviceDeltas, DeviceDict
from pytest_ditar.hardware.roofline import fmt_flops
from pytest_ditar.loop.perf.profile import logs_of, profile


class Profile(Command):
    name = "profile"
    help = "one call under torch.profiler: phase table, top operators, FLOP/s, Chrome trace; records nothing"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--lane", default=None,
                            help="the lane whose batch and steps it runs (default: the objective lane)")
        parser.add_argument("--commit", default=None,
                            help="profile this commit's candidate (a worktree of it), not the working tree")
        parser.add_argument("--steps", type=int, default=None, help="denoising steps (default: the lane's)")
        parser.add_argument("--out", default=None, help="folder for trace.json and summary.json "
                                                         "(default: .autoresearch/<tag>/profiles/<stamp>-<sha7>)")
        parser.add_argument("--warmup", type=int, default=1,
                            help="unprofiled warm-up calls first (default: %(default)s)")
        parser.add_argument("--against", default=None, metavar="REF",
                            help="also profile REF (a commit, `champion` or `baseline`) on the same request, and "
                                 "show the difference per phase and per kernel family")
        parser.add_argument("--device", default=None)
        parser.add_argument("--json", action="store_true",
                            help="print the summary as one JSON document on stdout (pytest_ditar/schemas/"
                                 "profile.schema.json), the table going to stderr")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        if getattr(args, "json", False):
            return print_document(lambda: cls.document(args))
        return cls.document(args)[1]

    @classmethod
    def document(cls, args: argparse.Namespace) -> tuple[dict[str, object], int]:
        """Profile, print the table (on stderr under --json: print_document's), and return the
        document (core.documents.profile_document) and the exit status."""
        import sys

        sess = open_session(args, args.device)
        try:
            res = profile(sess, lane=args.lane, commit=args.commit, steps=args.steps, out=args.out,
                          warmup=args.warmup, against=args.against)
        except CandidateError as exc:
            print(f"dit-ar: profile: the candidate failed: {exc}", file=sys.stderr)
            logs = logs_of(sess)
            for line in logs:
                print(line, file=sys.stderr)
            return profile_document(None, None, 1, error=str(exc), logs=logs[-40:]), 1
        finally:
            sess.close()
        for line in describe(res.summary, res.out_dir):
            print(line)
        return profile_document(res.summary, str(res.out_dir), 0), 0


def kernel_lines(s: dict[str, Any], cuda: bool, n: int = 10) -> list[str]:
    """The kernel table (core.kernels): families, then the largest kernels (operators on a CPU)."""
    k = s["kernels"]
    wall = k["wall_ms"] or 1.0
    what = "kernels the device ran" if cuda else "operators' self CPU time"
    fams = ", ".join(f"{REST_LABEL[cuda] if f == REST else f} {ms:.2f} ms ({100 * ms / wall:.1f}%)"
                     for f, ms in sorted(k["families"].items(), key=lambda kv: -kv[1]) if ms > 0)
    out = [f"by kernel family ({what}; they add up to the wall): {fams}",
           f"top {min(n, len(k['rows']))} {'kernels' if cuda else 'operators'} ({what}):",
           f"  {'name':<56} {'family':<10} {'calls':>6} {'ms':>9} {'share':>6}"]
    out += [f"  {r['name'][:56]:<56} {r['family']:<10} {r['calls']:>6} {r['ms']:>9.3f} {100 * r['share']:>5.1f}%"
            for r in k["rows"][:n]]
    return out


def against_lines(a: dict[str, Any], n: int = 6) -> list[str]:
    """`--against`: this call against the reference's, per phase and per kernel family."""
    p = a["phases"]
    out = [f"against {a['ref']} ({a['commit'][:7]}), the same request: {p['ref_wall_ms']:.2f} -> {p['wall_ms']:.2f} ms "
           f"({p['delta_ms']:+.2f} ms); {a['headline']}"]
    rest = "device idle" if a["summary"].get("device_ms") is not None else "outside operators"
    for name, d in (("phase", p), ("kernel family", a["families"])):
        out.append(f"  by {name} (deltas add up to {d['summed_ms']:+.2f} ms):")
        for r in d["rows"][:n]:
            rel = f"{100 * r['rel']:+.1f}%" if r["rel"] is not None else "new"
            key = rest if r["key"] == REST else r["key"]
            out.append(f"    {key:<24} {r['ref_ms']:>9.2f} -> {r['ms']:>9.2f} ms  {r['delta_ms']:>+9.2f} ms  "
                       f"{rel:>7}")
    return out + device_delta_lines(a.get("device_phases"), n)


def device_delta_lines(d: DeviceDeltas | None, n: int = 8) -> list[str]:
    """`--against` on a GPU: device ms per phase by launch, and their sum against each measured
    total's difference (core.launches.device_deltas)."""
    if not d:
        return []
    out = [f"  by phase, device time by launch (the device's idle time a row too; deltas add up to "
           f"{d['summed_ms']:+.2f} ms):"]
    for r in [r for r in d["rows"] if r["ref_ms"] or r["ms"]][:n]:
        rel = f"{100 * r['rel']:+.1f}%" if r["rel"] is not None else "new"
        key = "device idle" if r["key"] == IDLE else r["key"]
        out.append(f"    {key:<24} {r['ref_ms']:>9.2f} -> {r['ms']:>9.2f} ms  {r['delta_ms']:>+9.2f} ms  {rel:>7}")
    for c in d.get("checks", []):
        gap = f"{100 * c['gap']:.1f}%" if c["gap"] is not None else "n/a (no difference)"
        what = "the phases' deltas without idle" if c["name"] == "device busy" else "the deltas"
        out.append(f"  sum check: {what} {c['summed_ms']:+.2f} ms against the difference of the "
                   f"{c['name']} {c['ref_ms']:.2f} -> {c['ms']:.2f} ms ({c['delta_ms']:+.2f} ms): gap {gap}")
    return out


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def _where(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def describe(s: dict[str, Any], out_dir: Path) -> list[str]:
    """The summary as the agent reads it: the phase table, the top operators, FLOP/s, the files."""
    c = s["candidate"]
    what = (f"commit {c['commit'][:7]}" if c["source"] == "commit"
            else f"working tree (HEAD {(c['commit'] or 'none')[:7]}{', uncommitted changes' if c['dirty'] else ''})")
    cuda = s.get("device_ms") is not None
    lines = [(f"ditar: profile: {what}, lane {s['lane']} (batch {s['batch']}, {s['steps']} steps), "
              f"device {s['device']}, {s['threads']} thread(s), a fresh request after {s['warmup']} warm-up call(s)")]
    lines += _phase_table(s, cuda)
    wall = s["call_wall_ms"]
    gaps = next(r for r in s["phases"] if r["key"] == "gaps")
    lines.append(f"coverage: the phases hold {100 * s['coverage']:.1f}% of the call's wall; host gaps "
                 f"{gaps['host_ms']:.2f} ms ({100 * gaps['share']:.1f}%)")
    if cuda:
        lines += _device_busy(s["device_ms"], s.get("device_linked_ms") or 0.0, wall,
                              bool(s.get("device_attribution")))
    lines += [f"note: {n}" for n in s.get("notes", [])]
    un = s.get("unprofiled_wall_ms")
    lines.append(f"call wall {wall:.2f} ms under the profiler" + (
        f"; {un:.2f} ms unprofiled just before (another fresh request of the same shape; the difference is the "
        "profiler's and the marks' overhead plus host noise)"
        if un else ""))
    lines += kernel_lines(s, cuda)
    lines += _top_operators(s["top_ops"], cuda)
    if s.get("flops"):
        lines.append(f"FLOPs (the profiler's formulas: matmul, conv, add, mul; not attention kernels): "
                     f"{fmt_flops(s['flops'])} in the call, {fmt_flops(s['achieved_flops_per_s'])}/s achieved "
                     "over its wall")
    else:
        lines.append("FLOPs: the profiler counted none for this call")
    lines.append(f"trace    {_where(out_dir / s['trace'])}  (chrome://tracing or ui.perfetto.dev; ranges ditar::*)")
    if s.get("against"):
        lines += against_lines(s["against"])
        lines.append(f"trace    {_where(out_dir / s['against']['summary']['trace'])}  (the reference's call)")
    lines.append(f"summary  {_where(out_dir / 'summary.json')}")
    lines.append("ditar: profile: no lane timed, nothing recorded, git untouched")
    lines.append(f"ditar: next: {PROFILE_NEXT}")
    return lines


def _add_launch_rows(rows: list[dict[str, object]], dev: DeviceDict) -> None:
    """core.launches's own rows (the inferred transformer kernels, the unattributed ones), where
    they hold any device time: after their parent's last child, or last."""
    for key, label, parent in EXTRA_ROWS:
        if dev["phases"].get(key):
            level, p = 0, parent
            while p is not None:
                level, p = level + 1, next(q for k, _, q in ROWS if k == p)
            at = max((i for i, r in enumerate(rows) if parent and r.get("parent") == parent), default=len(rows) - 1)
            rows.insert(at + 1, {"key": key, "label": label, "parent": parent, "level": level, "host_ms": None,
                                 "share": None, "per_step_ms": None})


def _phase_table(s: dict[str, Any], cuda: bool) -> list[str]:
    """The phases, indented by depth, then the call's wall; device columns on CUDA: each kernel's
    device time in the phase its launch lay in (core.launches), else the operators' figures."""
    dev = s.get("device_attribution") if cuda else None
    rows = list(s["phases"])
    if dev:
        _add_launch_rows(rows, dev)
    head = f"{'phase':<50} {'ms':>9} {'% call':>7} {'ms/step':>8}"
    head += f" {'device ms':>11} {'% wall':>7}" if cuda else ""
    lines = [head, "-" * len(head)]
    wall = s["call_wall_ms"]
    for r in rows:
        label = "  " * r["level"] + r["label"]
        if r["key"] == "denoise":
            label += f" ({s['steps_seen']})"
        d_ms = float(dev["phases"].get(r["key"], 0.0)) if dev else float(r.get("device_ms") or 0.0)
        star = "*" if dev and dev["inferred"].get(r["key"]) else " "
        d_col = f" {d_ms:>10.2f}{star} {100 * d_ms / wall if wall else 0:>6.1f}%" if cuda else ""
        if r.get("unmarked"):  # no mark fired: a 0.00 here would be read as a measurement
            why = UNMARKED_WHY.get(r["unmarked"], r["unmarked"])
            lines.append(f"{label:<50} {why}" if not (dev and d_ms) else
                         f"{label:<50} {'-':>9} {'-':>7} {'':>8}{d_col}  (unmarked: by launch only)")
            continue
        if r["key"] == BYPASSED and not r["host_ms"] and not (dev and d_ms):
            continue
        if r["host_ms"] is None:  # a row of the device column only
            lines.append(f"{label:<50} {'-':>9} {'-':>7} {'':>8}{d_col}")
            continue
        lines.append(f"{label:<50} {r['host_ms']:>9.2f} {100 * r['share']:>6.1f}% {_ms(r['per_step_ms']):>8}{d_col}")
    total = f"{'call (wall)':<50} {wall:>9.2f} {100.0:>6.1f}% {'':>8}"
    if cuda:  # by launch: the rows' own sum (kernels launched in the call); else every kernel run in it
        busy = float(dev["busy_ms"]) if dev else s["device_ms"]
        total += f" {busy:>10.2f}  {100 * busy / wall if wall else 0:>6.1f}%"
    lines += [total, "* placed between the marked ranges around it, not marked itself" +
              ("; a device figure with *: kernels placed by where their launch lies (core.launches)" if dev else "")]
    return lines + named_lines(dev, cuda, s.get("launch_notes") or [], s.get("launch_error"))


def named_lines(dev: DeviceDict | None, cuda: bool, notes: list[str], error: str | None, n: int = 5) -> list[str]:
    """How much of the device's time the phases name (core.launches), and the largest kernels
    they do not; on a CPU, that there are no kernels to attribute."""
    if not cuda:
        return ["device time by launch: none on a CPU (no kernels; the times above are the host's)"]
    if not dev:
        why = error or "the worker's data holds no launches"
        return [f"device time by launch: not available ({why}); the device column is the operators' own"]
    share = dev["named_share"]
    head = f"{100 * share:.1f}%" if share is not None else "no kernel ran"
    lines = [f"device time in named phases: {head} ({dev['kernels']} kernels, {dev['in_graphs']} in CUDA graphs, "
             f"{dev['triton']} Triton; unattributed {dev['unattributed_ms']:.2f} ms; `*`: placed by where its launch "
             f"lies, {sum(dev['inferred'].values()):.2f} ms)"]
    lines += [f"note: {x}" for x in [*dev["notes"], *notes]]
    if dev["top_unnamed"]:
        lines.append("largest kernels in no named phase (gaps, bypassed, unattributed):")
        lines += [f"  {k['name'][:60]:<60} {k['kernels']:>6} {k['ms']:>9.3f} ms" for k in dev["top_unnamed"][:n]]
    return lines


def _device_busy(device_ms: float, linked_ms: float, wall: float, by_launch: bool = False) -> list[str]:
    """How busy the device was over the call, and the share of it no host operator launched."""
    lines = [f"device busy {100 * device_ms / wall if wall else 0:.1f}% of the call's wall: every kernel "
             "the device ran, graph-replayed and compiled ones included (low: launch- or host-bound)"]
    unlinked = device_ms - linked_ms
    if unlinked > 0.005 * device_ms:  # kernels no host operator claims: a graph's replay, mostly
        where = ("the device column places them by their launch" if by_launch else
                 "in the device column only where their launch lies inside a phase")
        lines.append(f"of it {unlinked:.2f} ms in kernels no host operator launched (CUDA graph replays): {where}")
    return lines


def _top_operators(ops: list[dict[str, Any]], cuda: bool) -> list[str]:
    key = "self device" if cuda else "self CPU"
    lines = [f"top {len(ops)} operators by {key} time:",
             f"  {'operator':<44} {'calls':>6} {key + ' ms':>14} {'CPU total ms':>13} {'FLOP':>11}"]
    for op in ops:
        self_ms = (op["self_device_us"] if cuda else op["self_cpu_us"]) / 1e3
        flop = fmt_flops(op["flops"]) if op["flops"] else "-"
        lines.append(f"  {op['name'][:44]:<44} {op['calls']:>6} {self_ms:>14.3f} {op['cpu_total_us'] / 1e3:>13.3f} "
                     f"{flop:>11}")
    return lines
