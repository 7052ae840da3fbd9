"""A tag's zygote kept warm between gated runs (issue 25), and the ways an agent could try to use it.

The product keeps the zygote of a sandboxed tag alive after a recording run (the baseline, a
verdict) and the next run forks its workers from it, skipping the torch and diffusers imports.
The attacks come first: a zygote the agent starts by hand and names in the state directory, a
candidate that reaches for the kept zygote from its sandbox, a judge killed with workers alive.
Each must leave the verdicts honest and the zygote clean; a stale one (another environment) is
not used.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from candidates import COMMENT_ONLY, STOCK
from conftest import Project, make_project, verdict_line

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux only")

STATE = ".autoresearch/t"


@pytest.fixture
def kept(pytester, model_cache, monkeypatch) -> Project:
    """A research project whose baseline kept its zygote (killed at the end of the test)."""
    monkeypatch.setenv("DITAR_ZYGOTE_IDLE_S", "300")
    proj = make_project(pytester)
    assert proj.ditar("init", "--tag", "t").returncode == 0
    res = proj.ditar("baseline")
    assert res.returncode == 0, res.stdout + res.stderr
    yield proj
    for rec in (backed_up(proj), working(proj)):
        if rec and alive(rec["pid"]):
            os.kill(rec["pid"], signal.SIGKILL)


def backed_up(proj: Project) -> dict | None:
    out = proj.git("cat-file", "blob", "refs/ditar/t:zygote.json", check=False)
    return json.loads(out) if out else None


def working(proj: Project) -> dict | None:
    f = proj.root / STATE / "zygote.json"
    return json.loads(f.read_text()) if f.is_file() else None


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p.name))
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), ()):
            out.add(c)
            todo.append(c)
    return {p for p in out if alive(p)}


def time_line(res: subprocess.CompletedProcess) -> str:
    return next(line for line in res.stdout.splitlines() if line.startswith("ditar: time"))


def test_the_next_run_forks_from_the_zygote_the_baseline_kept_and_a_stale_one_is_not_used(kept, monkeypatch):
    rec = backed_up(kept)
    assert rec is not None and rec == working(kept) and alive(rec["pid"])
    assert "--serve" in Path(f"/proc/{rec['pid']}/cmdline").read_bytes().decode(errors="replace")
    _, res, verdict = kept.experiment(COMMENT_ONLY, "exact", "A/A through the kept zygote")
    assert verdict.startswith("DITAR VERDICT: DISCARD"), res.stdout[-2000:]
    line = time_line(res)
    assert "zygote warm" in line and "zygote imports" not in line, line
    assert alive(rec["pid"]) and backed_up(kept) == rec  # handed over again: the same process
    deadline = time.time() + 5  # the zygote killed what the judge's workers left when it hung up
    while descendants(rec["pid"]) and time.time() < deadline:
        time.sleep(0.05)
    assert not descendants(rec["pid"])
    # Another environment: the kept image is stale, the run imports afresh (and says why).
    monkeypatch.setenv("DITAR_TEST_OTHER_ENV", "1")
    _, res, verdict = kept.experiment(COMMENT_ONLY + "\n# again\n", "exact", "A/A in another environment")
    assert verdict.startswith("DITAR VERDICT: DISCARD"), res.stdout[-2000:]
    line = time_line(res)
    assert "zygote imports" in line and "not used: stale" in line, line
    new = backed_up(kept)
    assert new is not None and new["pid"] != rec["pid"]
    os.kill(rec["pid"], signal.SIGKILL)  # the fixture cleans up the new one


def test_a_zygote_the_agent_starts_by_hand_and_names_in_the_state_is_never_used(kept):
    """The attack: kill the kept zygote, start one by hand (same command line, same user; its
    image is whatever the agent wants) and write its pid, start and key into zygote.json. The
    judge reads the record from the state's backup only: the planted one names nothing it uses."""
    rec = backed_up(kept)
    os.kill(rec["pid"], signal.SIGKILL)
    from pytest_ditar.runtime import zygote

    a, b = __import__("socket").socketpair(1, 5)  # AF_UNIX, SOCK_SEQPACKET: the fake's "judge"
    name = rec["name"].rsplit("/", 1)[0] + "/planted"
    fake = subprocess.Popen(zygote.command(b.fileno(), name, 300), pass_fds=[b.fileno()], start_new_session=True,
                            env=zygote.daemon_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        start = zygote.start_ticks(fake.pid)
        planted = {**rec, "pid": fake.pid, "start": start, "name": name}
        (kept.root / STATE / "zygote.json").write_text(json.dumps(planted))
        assert zygote.adoption_problem(planted, rec["key"]) is None  # /proc alone cannot tell it apart
        b.close()
        a.close()  # its first judge hangs up: it now waits on its name, as a kept one does
        time.sleep(0.5)
        _, res, verdict = kept.experiment(COMMENT_ONLY, "exact", "A/A after a planted zygote")
        assert verdict.startswith("DITAR VERDICT: DISCARD"), res.stdout[-2000:]
        line = time_line(res)
        assert "zygote warm" not in line and "the recorded zygote not used: gone" in line, line
        assert not descendants(fake.pid)  # it forked nothing for the judge
        assert backed_up(kept)["pid"] not in (fake.pid, rec["pid"])
    finally:
        fake.kill()
        fake.wait()


REACH = '''
import json as _json, os as _os, socket as _socket
ZYGOTE = {zygote}


def _reach():
    seen = {{}}
    try:  # seccomp refuses the socket itself (PermissionError); a namespace, the connect
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        s.connect("\\0" + ZYGOTE["name"])
        seen["connect"] = "connected"
    except OSError as exc:
        seen["connect"] = type(exc).__name__
    try:
        _os.kill(ZYGOTE["pid"], 0)
        seen["signal"] = "delivered"
    except OSError as exc:
        seen["signal"] = type(exc).__name__
    try:
        seen["unix"] = "pytest-ditar/zygote" in open("/proc/net/unix").read()
    except OSError as exc:
        seen["unix"] = type(exc).__name__
    print("DITAR-TEST-REACH " + _json.dumps(seen), flush=True)
'''


def test_a_sandboxed_candidate_cannot_reach_the_kept_zygote(kept):
    """The attack: a candidate that knows the kept zygote's socket name and pid (the test tells
    it) tries to connect to it, signal it and find it. Its sandbox's network and PID namespaces
    hold neither; the zygote serves the next run as before."""
    rec = backed_up(kept)
    source = STOCK.replace("class StockDiT:", REACH.format(zygote=json.dumps(rec)) + "\n\nclass StockDiT:")
    source = source.replace("def build(spec: PipelineSpec) -> StockDiT:\n",
                            "def build(spec: PipelineSpec) -> StockDiT:\n    _reach()\n")
    _, res, verdict = kept.experiment(source, "exact", "Reach for the zygote")
    assert verdict.startswith("DITAR VERDICT: DISCARD"), res.stdout[-2000:]
    seen = [json.loads(line.split(" ", 1)[1]) for log in (kept.root / STATE).glob("runs/*/workers/*/*.log")
            for line in log.read_text(errors="replace").splitlines() if line.startswith("DITAR-TEST-REACH ")]
    assert seen, "the candidate's build did not run"
    for s in seen:
        assert s["connect"] in ("PermissionError", "ConnectionRefusedError", "FileNotFoundError"), s
        assert s["signal"] == "ProcessLookupError", s
        assert s["unix"] is False, s
    assert alive(rec["pid"])
    _, res, verdict = kept.experiment(COMMENT_ONLY, "exact", "A/A after the reach")
    assert "zygote warm" in time_line(res) and verdict.startswith("DITAR VERDICT: DISCARD"), res.stdout[-2000:]


def test_a_judge_killed_mid_run_leaves_the_kept_zygote_clean(kept):
    rec = backed_up(kept)
    kept.commit_candidate(COMMENT_ONLY, "exact", "killed")
    p = subprocess.Popen(["dit-ar", "--config", "config/autoresearch.json", "experiment", "--classification", "exact",
                          "--description", "killed"], cwd=kept.root, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(descendants(rec["pid"])) < 2 and time.time() < deadline and p.poll() is None:
        time.sleep(0.02)
    assert descendants(rec["pid"]), "no worker was forked from the kept zygote"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.time() + 10
    while descendants(rec["pid"]) and time.time() < deadline:
        time.sleep(0.05)
    assert not descendants(rec["pid"]), "a worker outlived its judge"
    assert alive(rec["pid"])
    res = kept.ditar("experiment", "--classification", "exact", "--description", "killed")
    verdict_line(res.stdout)
    assert "zygote warm" in time_line(res), res.stdout[-2000:]
