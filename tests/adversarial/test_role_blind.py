"""Issue 38: every role is built alike and blind to its role. A probe pipeline records everything
its code can observe (paths, environment, argv, cwd, /proc/self, mounts, cgroup, fds, the
project's files it can reach, the requests before its timed rounds) in each role of one gated
run, the candidate, the champion and its twin, and the records must be identical up to what
differs between any two processes (pids, inodes, names drawn by chance). A champion that could
tell its role from any of these could slow itself there and get the next candidate KEPT.

Then the attack of that class through `dit-ar experiment`: a real 2x that sandbags wherever its
surroundings say "champion" (its working directory, its package's path, the project's git or
state, the working tree's code beside its own). Role-blind, it cannot: it is never KEPT against a
champion it slowed, whichever of its tells would fire (one candidate carries them all)."""
from __future__ import annotations

import json
import re

import pytest

from .attacks import BUILD, GEN_SIG, sleeps_after
from .conftest import experiment, experiment_judged
from conftest import make_project, shared_perf

pytestmark = pytest.mark.adversarial

PROBE_TAG = "DITAR-ROLE-PROBE "
_RECORDER = r'''
# ---- role probe (tests/adversarial/test_role_blind.py) --------------------------------------------
import json as _pj
import os as _po
import socket as _ps
import sys as _psys

_PROBE_CALLS = []


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except Exception as exc:
        return f"<{type(exc).__name__}>"


def _listing(path, depth=2):
    try:
        names = sorted(_po.listdir(path))
    except Exception as exc:
        return f"<{type(exc).__name__}>"
    if depth <= 0:
        return names
    return {n: _listing(_po.path.join(path, n), depth - 1) if _po.path.isdir(_po.path.join(path, n))
            and not _po.path.islink(_po.path.join(path, n)) else None for n in names}


def _fds():
    out = {}
    for fd in sorted(_po.listdir("/proc/self/fd"), key=int):
        try:
            out[fd] = _po.readlink(f"/proc/self/fd/{fd}")
        except Exception as exc:
            out[fd] = f"<{type(exc).__name__}>"
    return out


def _status():
    keep = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    return [ln for ln in _read("/proc/self/status").splitlines() if ln.split(":")[0] in keep]


def _probe_record(event, **extra):
    project = @@PROJECT@@
    rec = {"event": event, "cwd": _po.getcwd(), "file": __file__, "module": __name__, "argv": _psys.argv,
           "path": _psys.path, "env": dict(sorted(_po.environ.items())), "uid": [_po.getuid(), _po.getgid()],
           "host": _ps.gethostname(), "mountinfo": _read("/proc/self/mountinfo"), "cgroup": _read("/proc/self/cgroup"),
           "status": _status(), "fds": _fds(), "cmdline": _read("/proc/self/cmdline"),
           "box": _listing("/run/ditar", 3), "shm": _listing("/dev/shm"), "tmp_ditar": [
               n for n in (_listing("/tmp", 0) if isinstance(_listing("/tmp", 0), list) else []) if "ditar" in n],
           "project": _listing(project, 1), "git": _listing(project + "/.git", 0),
           "state": _listing(project + "/.autoresearch", 1), "working_tree": _listing(project + "/mutable", 0),
           "own_code_writable": _po.access(__file__, _po.W_OK), **extra}
    print("@@TAG@@" + _pj.dumps(rec, default=str), flush=True)
'''


def probe_source(project) -> str:
    """STOCK, recording what it sees at build() and at each of its first requests."""
    from candidates import STOCK

    recorder = _RECORDER.replace("@@PROJECT@@", repr(str(project))).replace("@@TAG@@", PROBE_TAG)
    src = STOCK.replace(BUILD, recorder + "\n\n" + BUILD.replace(
        "    return StockDiT(spec)\n",
        "    _probe_record('build', spec={k: str(v) for k, v in vars(spec).items()})\n    return StockDiT(spec)\n"))
    return src.replace(GEN_SIG, GEN_SIG + (
        "        _PROBE_CALLS.append([len(request.labels), request.steps])\n"
        "        if len(_PROBE_CALLS) in (1, 8, 16):\n"
        "            _probe_record('call', calls=list(_PROBE_CALLS))\n"))


# What differs between any two processes, whatever their role: drawn by chance or by the kernel.
_ENTROPY = [
    (re.compile(r"/[0-9a-f]{12}(?=[/ ,]|$)", re.M), "/<token>"),  # runtime.boxdir's folder names
    (re.compile(r"/w[a-z0-9_]{8}(?=[/ ,]|$)", re.M), "/w<tmp>"),  # a kept folder's mkdtemp name
    (re.compile(r"(socket|pipe|anon_inode:\[?[a-z]*\]?):\[\d+\]"), r"\1:[inode]"),
    (re.compile(r"^\d+ \d+ ", re.M), "<id> <parent> "),  # mountinfo's mount ids
    (re.compile(r"\b(\d+):(\d+)\b"), "<dev>"),  # device numbers (an overlay or tmpfs gets a fresh one)
]


def _scrub(value):
    if isinstance(value, str):
        for pattern, repl in _ENTROPY:
            value = pattern.sub(repl, value)
        return value
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def normalized(rec: dict) -> str:
    return json.dumps(_scrub({k: v for k, v in rec.items() if k != "calls"}), sort_keys=True)


def _difference(a, b):
    """Of two differing values, what differs: the lines of a text only one side has."""
    if isinstance(a, str) and isinstance(b, str):
        la, lb = a.splitlines(), b.splitlines()
        return [ln for ln in la if ln not in lb], [ln for ln in lb if ln not in la]
    return a, b


def records(run) -> dict[str, list[dict]]:
    """Each worker log's probe records, by the log's (role) name."""
    out: dict[str, list[dict]] = {}
    for log in (run / "workers").rglob("*.log"):
        got = [json.loads(line[len(PROBE_TAG):]) for line in log.read_text(errors="replace").splitlines()
               if line.startswith(PROBE_TAG)]
        if got:
            out[log.stem] = got
    return out


def test_a_probe_sees_the_same_world_in_every_role(pytester, model_cache):
    """The probe is the baseline's code (so the first run's champion) and, a comment apart, the
    candidate; its twin builds it once more. Every record it makes matches across the three."""
    proj = make_project(pytester, mutable_source=probe_source(pytester.path),
                        config={"perf": shared_perf(twin=True)})
    for args in (("init", "--tag", "t"), ("baseline",)):
        res = proj.ditar(*args)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    judged = experiment(proj, probe_source(pytester.path) + "\n# the same code, a new commit\n", "Same code")
    assert judged.status in ("DISCARD", "KEEP"), judged.show()
    (run,) = (proj.root / ".autoresearch/t/runs").iterdir()
    seen = records(run)
    roles = {name: recs for name, recs in seen.items() if not name.startswith("holdout")}
    assert {n.split("-")[0] for n in roles} >= {"candidate", "commit", "twin"}, sorted(seen)
    for name, recs in roles.items():  # each role's world as its code saw it, at build and at its first requests
        events = [r["event"] for r in recs]
        assert events[:2] == ["build", "call"], (name, events)
    first = {name: [normalized(r) for r in recs[:2]] for name, recs in roles.items()}
    reference = first.pop("candidate")
    for name, got in first.items():
        for mine, theirs in zip(reference, got):
            if mine != theirs:
                a, b = json.loads(mine), json.loads(theirs)
                diff = {k: _difference(a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}
                pytest.fail(f"the candidate and {name} saw different worlds: {json.dumps(diff)[:3000]}")
    # the requests before the timed rounds, in order: the same history on every side
    calls = {name: next((r["calls"] for r in recs if r["event"] == "call" and len(r["calls"]) == 8), None)
             for name, recs in roles.items()}
    assert len({json.dumps(c) for c in calls.values()}) == 1, calls
    rec = roles["candidate"][0]
    assert rec["cwd"] == "/run/ditar/work" and rec["file"] == "/run/ditar/code/mutable/pipeline.py", rec
    assert rec["working_tree"] == [] and rec["git"] == [] and rec["state"] == {}, rec  # hidden, every role
    assert not rec["own_code_writable"], rec
    blob = json.dumps(list(seen.values())).replace("ditar_candidate_", "")  # the judge's name of any role's package
    named = re.search(r"candidate|champion|\btwin|(commit|twin|holdout)-[0-9a-f]{7}", blob)
    assert named is None, f"a record names the role: {blob[max(0, named.start() - 300):named.end() + 100]}"


# The class of the hidden attacks: a real 2x (REDUNDANT's pass dropped) that sandbags wherever its
# surroundings say it is the champion. Each tell reads what an honest judge used to show one role and
# not the other; the attack carries them all and sandbags where any one fires, so one judged pair of
# runs (a fresh baseline at a 10 s lane, a KEEP, an A/A) covers the class.
ROLE_TELLS = {
    # the working directory (a champion's was named after its commit) or the package's own path (a
    # champion's lay in a worktree under the state directory)
    "cwd_or_path": "'commit-' in _o.getcwd() or '.autoresearch' in __file__ or 'worktrees' in __file__",
    # the working tree beside it: the candidate is HEAD, so a champion's own code differs from it
    "working_tree": "bool(_tree) and open(_tree[0]).read() != open(__file__).read()",
}


def role_telling(candidates: list[str]) -> str:
    """REDUNDANT's pass dropped, sleeping 1.5x the call's own time where any of ROLE_TELLS fires."""
    from candidates import STOCK

    fires = " or ".join(f"({cond})" for cond in ROLE_TELLS.values())
    body = ("        import os as _o\n"
            f"        _tree = [p for p in {candidates!r} if _o.path.isfile(p)]\n"
            f"        if {fires}:\n"
            "            _t.sleep(1.5 * (_t.perf_counter() - _t0))\n")
    return sleeps_after(body, STOCK)


def test_a_champion_that_tells_its_role_gets_no_later_candidate_kept(pytester, model_cache):
    """Step 1: the 2x with its tells, KEPT (blind, it sandbags in neither role).
    Step 2: the same code again, a comment apart: an A/A against that champion, never KEPT."""
    from candidates import REDUNDANT

    # the product's lane, twin on: without it one reference slowed for a lane's rounds on a loaded
    # box reads as a win, and step 2's A/A was once KEPT so (not through any tell)
    # (10 s, 48 rounds: three processes a round, and step 1's 2x must be judged beside a CPU hog)
    proj = make_project(pytester, mutable_source=REDUNDANT,
                        config={"perf": shared_perf(twin=True, max_rounds=48, lane_budget_s=10.0)})
    attack = role_telling([str(pytester.path / "mutable/pipeline.py")])
    for args in (("init", "--tag", "t"), ("baseline",)):
        res = proj.ditar(*args)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    # blind, no tell fires in either role: a real 2x, KEPT (once more if not judged). Were it left
    # unkept, step 2 would meet the baseline and be a real 2x too, not an A/A (seen beside a hog)
    first = experiment_judged(proj, attack, "Drop the redundant pass")
    assert first.status == "KEEP", f"a tell ({' or '.join(ROLE_TELLS)}) told the candidate its role" + first.show()
    second = experiment(proj, attack + "\n# the same code: only the role could differ\n", "Same code, a new commit")
    assert second.status != "KEEP", "a champion that tells its role got the next candidate KEPT" + second.show()
