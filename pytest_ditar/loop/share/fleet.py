"""A research fleet shared through a git remote (issue 44): each host pushes its own research
branch and state backup, reads the others', and promotes a champion by judging it again here.

What travels: `autoresearch/<fleet>.<host>` and `refs/ditar/<fleet>.<host>` (loop.integrity.backup's
content-addressed backup), each written by its host alone, and `refs/ditar-fleet/<fleet>`, the
fleet's ledger (store.fleetlog), which every host appends with a compare-and-swap push and
retries on a lost race. Another host's refs are fetched under refs/ditar-hosts/<remote>/ and
refs/remotes/<remote>/, never over this host's own.

A remote is input an agent may control. Before anything of another host's runs here, its state
must verify (ledger hash chain), its champion must be on its research branch, share this host's
one original baseline, and hold only regular files under the mutable paths; a refusal names the
ref or commit and the cause (core.fleet.Refusal). The re-judge itself is the gate: the champion's
mutable files are committed on this host's branch and `dit-ar experiment` judges that commit
against this host's champion, paired and interleaved, with the quality contracts against this
host's baseline (cli.fleet runs it). Its verdict becomes a promotion only on the reference card.
"""
from __future__ import annotations

import json
import random
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ditar.config.project import Config
from pytest_ditar.core import fleet as rules
from pytest_ditar.core.decision import champion_row, cumulative_class, kept_rows
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.rerun import row_judged
from pytest_ditar.core.vocabulary import ANNOUNCE, FLEET_REF, HOSTS_REF, REFERENCE, STATUSES, TRAILER
from pytest_ditar.hardware.fingerprint import Fingerprint
from pytest_ditar.store import fleetlog
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import LEDGER_JSONL, RESULTS_TSV, TagPaths
from pytest_ditar.store.records import LedgerRow
from pytest_ditar.store.snapshot import MANIFEST
from pytest_ditar.vcs import branches, queries, trees

PROMOTER = ("pytest-ditar fleet", "ditar@localhost")
_MANIFEST = f"baseline/{MANIFEST}"
LEDGER_FILES = (LEDGER_JSONL, RESULTS_TSV)


@dataclass(frozen=True)
class HostState:
    """One host's state as its backup ref holds it, and whether it may be trusted."""
    tag: str
    host: str
    ref: str  # where this clone holds it
    rows: tuple[LedgerRow, ...]  # its ledger's rows (read leniently where broken)
    problems: tuple[str, ...]  # what breaks its ledger's chain
    baseline_sha: str | None
    card: Mapping[str, Any]  # its baseline's fingerprint, comparable key

    @property
    def champion(self) -> LedgerRow | None:
        return champion_row([r for r in self.rows if r.status in STATUSES])


def remote_key(remote: str) -> str:
    """A remote's name, or its URL made into one ref component."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", remote).strip("_")[-60:] or "remote"


def own_host(tag: str) -> tuple[str, str]:
    """(fleet, host) of this host's tag; DitarError where the tag is no fleet host's."""
    split = rules.split_tag(tag)
    if split is None:
        raise DitarError(rules.Refusal(rules.NOT_JOINED, f"tag {tag}", "a fleet host's tag is <fleet>.<host> "
                                       "(`dit-ar init --tag <fleet>.<host>`), so that its branch and refs carry "
                                       "the host").line())
    return split


def fetch(cfg: Config, remote: str) -> str:
    """Every host's branch and state backup, and the fleet's ledger, into this clone's namespaces
    for `remote` (forced: the remote is the truth for what others wrote); returns the key."""
    key = remote_key(remote)
    trees.fetch(cfg.root, remote, [f"+refs/ditar/*:{HOSTS_REF}{key}/*",
                                   f"+refs/heads/{cfg.branch_prefix}*:refs/remotes/{key}/{cfg.branch_prefix}*",
                                   f"+{FLEET_REF}*:{FLEET_REF}{key}/*"])
    return key


def _card(manifest: bytes | None) -> tuple[str | None, dict[str, Any]]:
    if not manifest:
        return None, {}
    try:
        m = json.loads(manifest)
        return m.get("git_sha"), Fingerprint.from_dict(m.get("fingerprint") or {}).comparable_key()
    except (ValueError, TypeError, AttributeError):
        return None, {}


def read_host(root: Path, ref: str, tag: str) -> HostState:
    """A host's ledger (verified as `dit-ar verify` verifies one: store.ledger) and baseline card."""
    files = {p: d for p, _m, d in trees.tree_files(root, ref, under=(*LEDGER_FILES, _MANIFEST))}
    with tempfile.TemporaryDirectory(prefix="ditar-host-") as tmp:
        for name in LEDGER_FILES:
            if name in files:
                (Path(tmp) / name).write_bytes(files[name])
        ledger = Ledger(tmp)
        report = ledger.verify()
        try:
            rows = ledger.rows()
        except Exception:  # noqa: BLE001 - a ledger too broken to parse: its problems say so
            rows = []
    sha, card = _card(files.get(_MANIFEST))
    host = (rules.split_tag(tag) or ("", tag))[1]
    return HostState(tag, host, ref, tuple(rows), tuple(report.problems), sha, card)


def hosts(cfg: Config, key: str, fleet: str) -> list[HostState]:
    """Every host of `fleet` whose state the remote (fetched under `key`) holds."""
    prefix = f"{HOSTS_REF}{key}/"
    out = []
    for ref in queries.refs_under(cfg.root, prefix):
        tag = ref[len(prefix):]
        split = rules.split_tag(tag)
        if split and split[0] == fleet:
            out.append(read_host(cfg.root, ref, tag))
    return out


def read_fleet(root: Path, ref: str, remote: str) -> tuple[list[dict[str, object]], str | None]:
    """The fleet ledger's rows at `ref` and its commit; ([], None) where there is none yet.
    DitarError naming the ref where its chain does not verify."""
    commit = queries.ref_commit(root, ref)
    if commit is None:
        return [], None
    rows, problems = fleetlog.read(trees.file_at(root, commit, fleetlog.FILE) or "")
    if problems:
        raise DitarError(rules.Refusal(rules.CHAIN_BROKEN, f"{remote} {ref}",
                                       "the fleet ledger's hash chain does not verify: " + "; ".join(problems[:3])
                                       ).line())
    return rows, commit


def publish(cfg: Config, remote: str, fleet: str, new: Sequence[Mapping[str, object]],
            own: Sequence[str] = (), attempts: int = 8) -> tuple[list[dict[str, object]], int]:
    """Append `new` rows to the remote's fleet ledger and push `own` refs (this host's, forced) in
    one atomic push whose fleet ref is leased on the commit read: where another host pushed in
    between, git refuses, and this reads the remote again, rebuilds the rows on top and retries.
    Returns the fleet's rows as pushed and how many pushes it took."""
    ref = FLEET_REF + fleet
    spec = [f"+{r}:{r}" for r in own]
    for attempt in range(1, attempts + 1):
        key = fetch(cfg, remote)
        theirs, old = read_fleet(cfg.root, f"{FLEET_REF}{key}/{fleet}", remote)
        rows = fleetlog.merge(theirs, new)
        if len(rows) == len(theirs):  # nothing new for the fleet: this host's refs only
            ok, said = trees.push(cfg.root, remote, spec, {}) if spec else (True, "")
            commit = old
        else:
            commit = trees.make_commit(cfg.root, {fleetlog.FILE: fleetlog.chained(rows).encode()},
                                       f"ditar fleet {fleet}: {rows[-1].get('kind')} by {rows[-1].get('host')}", old)
            ok, said = trees.push(cfg.root, remote, [*spec, f"{commit}:{ref}"], {ref: old})
        if ok:
            if commit:  # this clone's copy and its view of the remote's, both as pushed
                for mine in (ref, f"{FLEET_REF}{key}/{fleet}"):
                    trees.set_ref(cfg.root, mine, commit, f"ditar fleet {fleet}: pushed")
            return rows, attempt
        # a ref git refused (`!` in --porcelain: a stale lease, or the remote's ref lock held by the
        # other host's push) is the race; anything else (no such remote, no room) is not
        if not any(line.startswith("!") for line in said.splitlines()):
            raise DitarError(f"fleet push to {remote} failed: {said}")
        time.sleep(random.uniform(0.05, 0.5) * attempt)  # another host won the race: read its rows, go again
    raise DitarError(f"fleet push to {remote}: the fleet ref moved under every one of {attempts} attempts")


def other_writer(cfg: Config, key: str, tag: str) -> str | None:
    """Where the remote's copy of this host's branch or state ref is not an ancestor of this
    clone's: another loop wrote it (two hosts under one name, or a forger). None: only this host did."""
    for theirs, mine in ((f"{HOSTS_REF}{key}/{tag}", trees.state_ref(tag)),
                         (f"refs/remotes/{key}/{cfg.branch_prefix}{tag}", f"refs/heads/{cfg.branch_prefix}{tag}")):
        remote_at, local_at = queries.ref_commit(cfg.root, theirs), queries.ref_commit(cfg.root, mine)
        if remote_at and local_at and not queries.is_ancestor(cfg.root, remote_at, local_at):
            return (f"{mine} on the remote ({remote_at[:7]}) was not written by this loop (not an ancestor of "
                    f"{local_at[:7]}): two hosts share the name {own_host(tag)[1]}, or someone rewrote it; pick "
                    "another --tag, or --force to write this host's over it")
    return None


def own_state(cfg: Config, tag: str) -> HostState:
    """This host's state as its own state directory holds it (its ledger verified)."""
    paths = TagPaths.of(cfg.root, cfg.state_dir, tag)
    ledger = Ledger(paths.dir)
    report = ledger.verify()
    manifest = paths.baseline / MANIFEST
    sha, card = _card(manifest.read_bytes() if manifest.is_file() else None)
    return HostState(tag, own_host(tag)[1], "", tuple(ledger.rows()) if report.ok else (), tuple(report.problems),
                     sha, card)


def announce(state: HostState, fleet_rows: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """A `champion` row for this host's champion when the fleet has not heard of it yet."""
    champ = state.champion
    if champ is None:
        return []
    said = [r for r in fleet_rows if r.get("kind") == ANNOUNCE and r.get("host") == state.host]
    if said and said[-1].get("commit") == champ.commit:
        return []
    kept = kept_rows([r for r in state.rows if r.status in STATUSES])
    return [fleetlog.new_row(kind=ANNOUNCE, host=state.host, tag=state.tag, commit=champ.commit,
                             speedup=champ.metric, ci_low=champ.ci_low, ci_high=champ.ci_high,
                             **{"class": cumulative_class([r.cls for r in kept])},
                             card=dict(state.card))]


def reference(cfg: Config, tag: str) -> dict[str, object]:
    """The fleet's first row: this host is the reference, its baseline's card the reference card."""
    state = own_state(cfg, tag)
    if not state.baseline_sha or not state.card:
        raise DitarError(f"tag {tag} has no baseline to take the reference card from: `dit-ar baseline` first")
    return fleetlog.new_row(kind=REFERENCE, host=state.host, tag=tag, commit=state.baseline_sha,
                            card=dict(state.card), note="the reference host: only its re-judges promote")


@dataclass(frozen=True)
class Candidate:
    """Another host's champion, checked and committed on this host's branch for the gate."""
    commit: str  # the commit the gate judges here
    source: HostState
    source_commit: str
    claimed_class: str  # its trailer's class: the source's cumulative class, the gate judges it as
    card_diff: tuple[str, ...]


def check_source(cfg: Config, key: str, src: HostState, here: HostState,
                 fleet_rows: Sequence[Mapping[str, object]]) -> rules.Refusal | str:
    """The source host's champion commit, or why it is refused."""
    if src.problems:
        return rules.Refusal(rules.CHAIN_BROKEN, f"{src.ref} (host {src.host})",
                             "its ledger's hash chain does not verify: " + "; ".join(src.problems[:3]))
    champ = src.champion
    if champ is None:
        return rules.Refusal(rules.NO_CHAMPION, f"host {src.host}", "it has kept nothing yet")
    sha = champ.commit
    branch = f"refs/remotes/{key}/{cfg.branch_prefix}{src.tag}"
    if not re.fullmatch(r"[0-9a-f]{40,64}", sha) or not queries.has_commit(cfg.root, sha) \
            or not queries.is_ancestor(cfg.root, sha, branch):
        return rules.Refusal(rules.NOT_ON_BRANCH, f"champion {sha[:12]} of host {src.host}",
                             f"the commit is not on its research branch {cfg.branch_prefix}{src.tag}")
    if src.baseline_sha != here.baseline_sha:
        return rules.Refusal(rules.OTHER_BASELINE, f"host {src.host}",
                             f"its baseline ({str(src.baseline_sha)[:7]}) is not this host's original baseline "
                             f"({str(here.baseline_sha)[:7]})")
    for path, (mode, _) in trees.tree_modes(cfg.root, sha).items():
        if mode in ("120000", "160000") and any(path.startswith(p.rstrip("/") + "/") or path == p.rstrip("/")
                                                for p in cfg.mutable_paths):
            return rules.Refusal(rules.LINK_IN_TREE, f"champion {sha[:7]} of host {src.host}",
                                 f"{path} is a {'symlink' if mode == '120000' else 'submodule'}: only regular "
                                 "files are judged")
    best = rules.fleet_champion(fleet_rows)
    if best is not None and best.get("source_commit") == sha:
        return rules.Refusal(rules.ALREADY, f"champion {sha[:7]} of host {src.host}", "it is the fleet champion")
    return sha


def stage(cfg: Config, tag: str, remote: str, host: str) -> tuple[Candidate, list[dict[str, object]]]:
    """Fetch, check the source host's champion, and commit its mutable files on this host's
    research branch (HEAD), ready for the gate. DitarError naming what was refused."""
    fleet, _ = own_host(tag)
    here = own_state(cfg, tag)
    if here.problems:
        raise DitarError(f"this host's ledger does not verify ({'; '.join(here.problems[:2])}): `dit-ar verify`")
    st = queries.state(cfg.root)
    if st.branch != cfg.branch_prefix + tag or st.dirty_paths:
        raise DitarError(f"promote runs on a clean checkout of {cfg.branch_prefix}{tag} "
                         f"(HEAD is on {st.branch or 'a detached HEAD'}, {len(st.dirty_paths)} change(s))")
    key = fetch(cfg, remote)
    fleet_rows, _ = read_fleet(cfg.root, f"{FLEET_REF}{key}/{fleet}", remote)
    ref_row = rules.reference_row(fleet_rows)
    if ref_row is None:
        raise DitarError(f"fleet {fleet} on {remote} has no reference host: `dit-ar fleet init` on it first")
    src_ref = f"{HOSTS_REF}{key}/{rules.host_tag(fleet, host)}"
    if queries.ref_commit(cfg.root, src_ref) is None:
        raise DitarError(rules.Refusal(rules.NO_HOST, f"host {host}",
                                       f"{remote} holds no refs/ditar/{rules.host_tag(fleet, host)}").line())
    src = read_host(cfg.root, src_ref, rules.host_tag(fleet, host))
    found = check_source(cfg, key, src, here, fleet_rows)
    if isinstance(found, rules.Refusal):
        raise DitarError(found.line())
    kept = kept_rows([r for r in src.rows if r.status in STATUSES])
    claimed_class = cumulative_class([r.cls for r in kept])
    trees.take_paths(cfg.root, found, cfg.mutable_paths)
    if not branches.index_changed(cfg.root):
        raise DitarError(rules.Refusal(rules.ALREADY, f"champion {found[:7]} of host {host}",
                                       "its mutable files are this host's HEAD's already").line())
    msg = (f"Promote host {host}'s champion {found[:7]}\n\nRe-judged on host {here.host} "
           f"(dit-ar fleet promote).\n\n{TRAILER} {claimed_class}\nDitar-Promote: {host} {found}\n")
    commit = branches.commit_index(cfg.root, msg, user=PROMOTER)
    card_card = ref_row.get("card")
    diff = rules.card_diff(card_card if isinstance(card_card, Mapping) else {}, here.card)
    return Candidate(commit, src, found, claimed_class, diff), fleet_rows


def verdict_row(cfg: Config, tag: str, cand: Candidate) -> tuple[rules.Promotion, dict[str, object] | None]:
    """The gate's verdict on the staged commit (its ledger row) and the fleet row it writes; no
    row where the gate recorded nothing (a refusal)."""
    rows = [r for r in Ledger(TagPaths.of(cfg.root, cfg.state_dir, tag).dir).rows() if r.commit == cand.commit]
    verdict = rows[-1].status if rows else ""
    kind = rules.outcome_kind(verdict, cand.card_diff, judged=not rows or row_judged(rows[-1]))
    out = rules.Promotion(kind, verdict, cand.commit, cand.source.host, cand.source_commit, cand.card_diff)
    if not rows:
        return out, None
    r = rows[-1]
    here = own_state(cfg, tag)
    return out, fleetlog.new_row(kind=kind, host=here.host, tag=tag, commit=cand.commit, source_host=cand.source.host,
                                 source_commit=cand.source_commit, speedup=r.metric, ci_low=r.ci_low,
                                 ci_high=r.ci_high, **{"class": cand.claimed_class}, card=dict(here.card),
                                 card_diff=list(cand.card_diff), note=r.reason)
