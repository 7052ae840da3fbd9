"""The state directory is verified before candidate code runs, backed up to refs/ditar/<tag> after
every recorded run, and restored from there when a run (or anything else) damages it."""
import hashlib
import json
import shutil

import pytest

from candidates import ALTERS, PROJECT_ROOT, STOCK, _patch
from conftest import verdict_line

# The defences' own attack-first tests: they run with the battery (CI's second step).
pytestmark = pytest.mark.adversarial

GEN = "    def generate(self, request: Request) -> Generated:\n"
STATE = ".autoresearch/t"




def _at_root(source: str) -> str:
    """Workers run in a scratch directory: a candidate finds the project from its own file."""
    # its own file lies in the judge's folder (issue 38): the project is the cwd of an ancestor (the judge)
    return source.replace("class StockDiT:", f"import os as _os\n_ROOT = {PROJECT_ROOT}\n\n\nclass StockDiT:", 1)


def _last(res) -> str:
    return res.stdout.strip().splitlines()[-1]


def _marker_source(marker) -> str:
    return STOCK.replace("class StockDiT:", f"open({str(marker)!r}, 'w').close()\n\n\nclass StockDiT:", 1)


def test_baseline_is_backed_up_to_a_hidden_ref_without_touching_the_tree(research):
    proj = research
    files = proj.git("ls-tree", "-r", "--name-only", "refs/ditar/t").splitlines()
    assert {"ledger.jsonl", "results.tsv", "session.json", "baseline/manifest.json",
            "baseline/lanes.json"} <= set(files)
    assert any(f.startswith("baseline/items/") for f in files)
    assert proj.git("show", "refs/ditar/t:ledger.jsonl") == (proj.root / STATE / "ledger.jsonl").read_text().strip()
    assert proj.git("status", "--porcelain") == ""  # no working-tree or index change
    assert proj.git("rev-parse", "--abbrev-ref", "HEAD") == "autoresearch/t"
    assert "refs/ditar/t" not in proj.git("log", "--format=%D", "autoresearch/t")  # not on the branch's history


def test_consistently_rewritten_baseline_is_refused_through_the_ledger_anchor(research, tmp_path):
    """The attack: replace a stored output and recompute its hash in the manifest; the files then
    match the manifest, and only the anchor in the ledger knows the manifest changed."""
    proj = research
    base = proj.root / STATE / "baseline"
    man = base / "manifest.json"
    m = json.loads(man.read_text())
    png = base / m["items"]["tiny-002"]["image"]
    png.write_bytes((base / m["items"]["tiny-003"]["image"]).read_bytes())
    m["files"][m["items"]["tiny-002"]["image"]] = hashlib.sha256(png.read_bytes()).hexdigest()
    man.write_text(json.dumps(m, indent=1, sort_keys=True))
    marker = tmp_path / "ran"
    sha = proj.commit_candidate(_marker_source(marker), "exact", "candidate")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "candidate")
    line = _last(res)
    assert res.returncode == 4, res.stdout[-2000:]
    assert line.startswith("DITAR REFUSED: baseline anchor broken: manifest sha256 ") \
        and "(manifest edited?)" in line, line
    assert "dit-ar recover --force" in line
    assert not marker.exists(), "the candidate ran on a forged baseline"
    assert proj.head() == sha and [r["status"] for r in proj.ledger()] == ["BASELINE"]
    st = proj.ditar("status")
    assert st.returncode == 1 and "baseline anchor" in st.stdout, st.stdout


@pytest.mark.parametrize("missing", ["ledger.jsonl", "baseline"])
def test_missing_ledger_or_baseline_is_broken_everywhere_until_recovered(research, missing):
    proj = research
    target = proj.root / STATE / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    st = proj.ditar("status")
    assert st.returncode == 1 and "0 rows, hash chain verifies" not in st.stdout, st.stdout
    assert f"{missing} missing" in st.stdout and "dit-ar recover" in st.stdout, st.stdout
    ver = proj.ditar("verify", "--sample", "0")
    assert ver.returncode == 1 and f"{missing} missing" in ver.stdout, ver.stdout
    sha = proj.commit_candidate(STOCK + "\n# next\n", "exact", "next")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "next")
    assert res.returncode == 4 and _last(res).startswith("DITAR REFUSED: ") and f"{missing} missing" in _last(res)
    assert proj.head() == sha
    rec = proj.ditar("recover")
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "restored" in rec.stdout and missing in rec.stdout and "from refs/ditar/t" in rec.stdout
    st = proj.ditar("status")
    assert st.returncode == 0 and "1 rows, hash chain verifies" in st.stdout, st.stdout


def test_recover_refuses_a_healthy_state_unless_forced(research):
    proj = research
    res = proj.ditar("recover")
    assert res.returncode == 2 and "verifies: nothing to recover" in res.stderr and "--force" in res.stderr
    (proj.root / STATE / "results.tsv").write_text("scribbled\n")
    assert proj.ditar("status").returncode == 1
    res = proj.ditar("recover")
    assert res.returncode == 0 and "results.tsv" in res.stdout, res.stdout + res.stderr
    assert proj.ditar("status").returncode == 0
    res = proj.ditar("recover", "--force")
    assert res.returncode == 0 and "nothing differed" in res.stdout, res.stdout + res.stderr


def test_candidate_deleting_the_state_directory_is_a_crash_and_the_state_is_restored(research_unsandboxed):
    """The attack: a candidate that deletes .autoresearch/<tag> during generate lost the baseline,
    ledger and logs; the run ended in INTERNALERROR and `dit-ar status` said all was well."""
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base = proj.head()
    src = _at_root(STOCK.replace(GEN, GEN + "        import shutil; "
                                 f"shutil.rmtree(_os.path.join(_ROOT, {STATE!r}), ignore_errors=True)\n", 1))
    sha, res, line = proj.experiment(src, "exact", "Tidy up")
    assert "INTERNALERROR" not in res.stdout + res.stderr, res.stdout[-3000:]
    assert res.returncode == 10  # CRASH: its own exit status (pytest_ditar.loop.run.options.Exit)
    assert line.startswith("DITAR VERDICT: CRASH") and \
        f'reason="state directory damaged during the run ({STATE} deleted): restored from refs/ditar/t"' in line, line
    assert proj.head() == base  # reverted
    rows = proj.ledger()
    assert [r["status"] for r in rows] == ["BASELINE", "CRASH"] and rows[-1]["commit"] == sha
    st = proj.ditar("status")
    assert st.returncode == 0 and "2 rows, hash chain verifies" in st.stdout \
        and f"{sha[:7]} CRASH" in st.stdout, st.stdout
    assert proj.git("show", "refs/ditar/t:ledger.jsonl") == (proj.root / STATE / "ledger.jsonl").read_text().strip()
    (summary,) = (proj.root / STATE / "runs").glob("*/summary.json")
    data = json.loads(summary.read_text())
    assert data["decision"] == "CRASH" and "request_secret" in data
    assert proj.ditar("verify", "--sample", "0").returncode == 0


def test_a_file_error_while_recording_is_a_crash_with_a_reason(research_unsandboxed):
    """A candidate that turns the run's summary.json into a directory: the write fails with an
    OSError, which is a CRASH with one line, never a traceback."""
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base = proj.head()
    block = ("        import glob\n"
             f"        for d in glob.glob(_os.path.join(_ROOT, {STATE + '/runs/*'!r})):\n"
             "            _os.makedirs(_os.path.join(d, 'summary.json'), exist_ok=True)\n")
    src = _at_root(_patch(GEN, GEN + block)).replace("guidance_scale=self.spec.guidance,",
                                                     "guidance_scale=self.spec.guidance * 0.75,")
    assert src != ALTERS
    sha, res, line = proj.experiment(src, "exact", "Scribble")
    assert "Traceback" not in res.stdout and "INTERNALERROR" not in res.stdout, res.stdout[-3000:]
    assert res.returncode == 10  # CRASH: its own exit status (pytest_ditar.loop.run.options.Exit)
    assert line.startswith("DITAR VERDICT: CRASH") \
        and 'reason="could not record the run: Is a directory: ' in line, line
    assert proj.head() == base and proj.ledger()[-1]["status"] == "CRASH" and proj.ledger()[-1]["commit"] == sha
    assert verdict_line(res.stdout) == line


# ---- runs that end before they record, and changes made outside any run ---------------------

BUILD = "def build(spec: PipelineSpec) -> StockDiT:\n"


def _forges_keep_and_kills_its_judge(source: str, flag) -> str:
    """A candidate whose first build appends a KEEP row for its own commit with the package's own
    Ledger (so the chain verifies) and SIGKILLs its judge (the `--ditar-gate` pytest up its parent
    chain) before the judge can record; later builds run `source` as it is."""
    block = (
        "    import os as _o, signal as _s, subprocess as _sp, time as _t\n"
        f"    if not _o.path.exists({str(flag)!r}):\n"
        f"        open({str(flag)!r}, 'w').close()\n"
        "        from pytest_ditar.store.ledger import Ledger\n"
        f"        _root = {PROJECT_ROOT}\n"
        "        _git = lambda *a: _sp.run(['git', *a], cwd=_root, capture_output=True, text=True).stdout.strip()\n"
        f"        Ledger(_o.path.join(_root, {STATE!r})).append({{'commit': _git('rev-parse', 'HEAD'),\n"
        "            'parent': _git('rev-parse', 'HEAD^'), 'class': 'exact', 'description': 'forged', "
        "'lane': 'latency_b1',\n"
        "            'metric': 1.8, 'ci_low': 1.7, 'ci_high': 1.9, 'quality_pass': 6, 'quality_total': 6, "
        "'status': 'KEEP',\n"
        "            'cumulative_class': 'exact'})\n"
        "        _pid = _o.getppid()\n"
        "        while _pid > 1 and b'--ditar-gate' not in open(f'/proc/{_pid}/cmdline', 'rb').read():\n"
        "            _pid = int(open(f'/proc/{_pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "        if _pid > 1:\n"
        "            _o.kill(_pid, _s.SIGKILL)\n"
        "            _t.sleep(5)\n")
    assert BUILD in source
    return source.replace(BUILD, BUILD + block, 1)


ROLLED_BACK = "ditar: the run of {} ended before it recorded: its state changes were rolled back from refs/ditar/t"


@pytest.mark.parametrize("first", ["experiment", "status"])
def test_a_run_killed_before_it_records_is_rolled_back_and_its_forged_keep_never_counts(research_unsandboxed, tmp_path,
                                                                                         first):
    """The attack: a candidate appends a KEEP row for its own commit with the package's Ledger (the
    chain verifies) and kills its judge before the judge records: the next run took the forged
    commit for the champion ("HEAD is the champion"), and `dit-ar status` showed it as champion.
    Now the pre-run backup marks the run as in flight, and whoever comes next (the next gated run,
    or `dit-ar status`) rolls its state changes back before reading the ledger."""
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base, before = proj.head(), proj.ledger()
    sha = proj.commit_candidate(_forges_keep_and_kills_its_judge(ALTERS, tmp_path / "killed"), "exact",
                                "Lower guidance")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Lower guidance")
    assert (tmp_path / "killed").exists() and "DITAR VERDICT" not in res.stdout, res.stdout[-2000:]
    assert [r["status"] for r in proj.ledger()] == ["BASELINE", "KEEP"]  # the forged row, chain intact
    assert f"run in flight for {sha}" in proj.git("log", "-1", "--format=%B", "refs/ditar/t")
    line = ROLLED_BACK.format(sha[:7])
    if first == "status":
        st = proj.ditar("status", "--json")
        assert st.returncode == 0, st.stdout + st.stderr
        assert json.loads(st.stdout)["champion"] is None  # stdout stays JSON: the line goes to stderr
        assert st.stderr.strip().splitlines() == [line], st.stderr
        assert proj.ledger() == before
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Lower guidance")
    verdict = _last(res)
    assert (line in res.stdout.splitlines()) == (first == "experiment"), res.stdout[-3000:]
    assert verdict.startswith("DITAR VERDICT: DISCARD") and f"commit={sha[:7]}" in verdict, res.stdout[-3000:]
    rows = proj.ledger()
    assert rows[:1] == before and [(r["commit"], r["status"]) for r in rows[1:]] == [(sha, "DISCARD")], rows
    assert proj.head() == base
    assert len(list((proj.root / STATE / "runs").glob(f"*-{sha[:7]}*"))) == 2  # the killed run's logs stay
    st = proj.ditar("status")
    assert st.returncode == 0 and "2 rows, hash chain verifies" in st.stdout \
        and "champion  the baseline" in st.stdout, st.stdout + st.stderr


def test_a_recorded_run_is_backed_up_before_its_revert_and_a_ledger_edit_after_it_is_refused(research):
    """A run's record is backed up right after its ledger row, before verdict.txt and the revert:
    a kill -9 after the row still gets its revert finished by the next run (--no-revert leaves
    exactly that state). Then the attack: a KEEP row appended between runs with the package's
    Ledger (the chain verifies, so only the backup can tell) is refused, with the fix."""
    from pytest_ditar.store.ledger import Ledger

    proj = research
    base = proj.head()
    sha = proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Lower guidance", "--no-revert")
    assert _last(res).startswith("DITAR VERDICT: DISCARD") and proj.head() == sha, res.stdout[-2000:]
    log = proj.git("log", "--format=%H %s", "refs/ditar/t").splitlines()
    subjects = [line.split(" ", 1)[1] for line in log]
    assert subjects[:3] == [f"ditar t: recorded {sha[:7]} DISCARD"] * 2 + [f"ditar t: run in flight for {sha}"], \
        subjects
    (run,) = (proj.root / STATE / "runs").glob(f"*-{sha[:7]}")
    first = proj.git("ls-tree", "-r", "--name-only", log[1].split()[0]).splitlines()
    last = proj.git("ls-tree", "-r", "--name-only", "refs/ditar/t").splitlines()
    # before the revert
    assert f"runs/{run.name}/summary.json" in first and f"runs/{run.name}/candidate.patch" not in first
    assert {f"runs/{run.name}/verdict.txt", f"runs/{run.name}/candidate.patch"} <= set(last)
    res = proj.ditar("experiment", "--classification", "exact", "--description", "again")  # as after a kill -9
    assert f"ditar: recovered: finished the revert of {sha[:7]} recorded as DISCARD" in res.stdout, res.stdout[-2000:]
    assert proj.head() == base
    recorded = proj.ledger()

    nxt = proj.commit_candidate(STOCK + "\n# next\n", "exact", "next")
    Ledger(proj.root / STATE).append({"commit": nxt, "parent": base, "class": "exact", "lane": "latency_b1",
                                      "metric": 1.8, "status": "KEEP", "cumulative_class": "exact"})
    recorded_backup = proj.git("rev-parse", "--short=7", "refs/ditar/t")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "next")
    assert res.returncode == 4, res.stdout[-2000:]
    assert _last(res) == ("DITAR REFUSED: state changed outside a run: ledger.jsonl changed, results.tsv changed since "
                          f"refs/ditar/t ({recorded_backup}: recorded {sha[:7]} DISCARD); "
                          "`dit-ar recover --force` restores it")
    assert proj.head() == nxt
    st = proj.ditar("status")
    assert st.returncode == 1 and "FAIL state changed outside a run: ledger.jsonl changed" in st.stdout, st.stdout
    rec = proj.ditar("recover", "--force")
    assert rec.returncode == 0 and "ledger.jsonl" in rec.stdout, rec.stdout + rec.stderr
    assert proj.ledger() == recorded
    st = proj.ditar("status")
    assert st.returncode == 0 and "champion  the baseline" in st.stdout, st.stdout
