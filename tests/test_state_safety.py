"""The state directory is verified before candidate code runs, backed up to refs/ditar/<tag> after
every recorded run, and restored from there when a run (or anything else) damages it."""
import hashlib
import json
import shutil

import pytest
from candidates import ALTERS, STOCK, _patch

from conftest import verdict_line

GEN = "    def generate(self, request: Request) -> Generated:\n"
STATE = ".autoresearch/t"


def _at_root(source: str) -> str:
    """Workers run in a scratch directory: a candidate finds the project from its own file."""
    return source.replace("class StockDiT:", "import os as _os\n_ROOT = _os.path.dirname(_os.path.dirname("
                          "_os.path.abspath(__file__)))\n\n\nclass StockDiT:", 1)


def _last(res) -> str:
    return res.stdout.strip().splitlines()[-1]


def _marker_source(marker) -> str:
    return STOCK.replace("class StockDiT:", f"open({str(marker)!r}, 'w').close()\n\n\nclass StockDiT:", 1)


def test_baseline_is_backed_up_to_a_hidden_ref_without_touching_the_tree(research):
    proj = research
    files = proj.git("ls-tree", "-r", "--name-only", "refs/ditar/t").splitlines()
    assert {"ledger.jsonl", "results.tsv", "session.json", "baseline/manifest.json", "baseline/lanes.json"} <= set(files)
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
    assert line.startswith("DITAR REFUSED: baseline anchor broken: manifest sha256 ") and "(manifest edited?)" in line, line
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


def test_candidate_deleting_the_state_directory_is_a_crash_and_the_state_is_restored(research):
    """The attack: a candidate that deletes .autoresearch/<tag> during generate lost the baseline,
    ledger and logs; the run ended in INTERNALERROR and `dit-ar status` said all was well."""
    proj = research
    base = proj.head()
    src = _at_root(STOCK.replace(GEN, GEN + f"        import shutil; shutil.rmtree(_os.path.join(_ROOT, {STATE!r}), ignore_errors=True)\n", 1))
    sha, res, line = proj.experiment(src, "exact", "Tidy up")
    assert "INTERNALERROR" not in res.stdout + res.stderr, res.stdout[-3000:]
    assert res.returncode == 1
    assert line.startswith("DITAR VERDICT: CRASH") and \
        f'reason="state directory damaged during the run ({STATE} deleted): restored from refs/ditar/t"' in line, line
    assert proj.head() == base  # reverted
    rows = proj.ledger()
    assert [r["status"] for r in rows] == ["BASELINE", "CRASH"] and rows[-1]["commit"] == sha
    st = proj.ditar("status")
    assert st.returncode == 0 and "2 rows, hash chain verifies" in st.stdout and f"{sha[:7]} CRASH" in st.stdout, st.stdout
    assert proj.git("show", "refs/ditar/t:ledger.jsonl") == (proj.root / STATE / "ledger.jsonl").read_text().strip()
    (summary,) = (proj.root / STATE / "runs").glob("*/summary.json")
    data = json.loads(summary.read_text())
    assert data["decision"] == "CRASH" and "request_secret" in data
    assert proj.ditar("verify", "--sample", "0").returncode == 0


def test_a_file_error_while_recording_is_a_crash_with_a_reason(research):
    """A candidate that turns the run's summary.json into a directory: the write fails with an
    OSError, which is a CRASH with one line, never a traceback."""
    proj = research
    base = proj.head()
    block = ("        import glob\n"
             f"        for d in glob.glob(_os.path.join(_ROOT, {STATE + '/runs/*'!r})):\n"
             "            _os.makedirs(_os.path.join(d, 'summary.json'), exist_ok=True)\n")
    src = _at_root(_patch(GEN, GEN + block)).replace("guidance_scale=self.spec.guidance,", "guidance_scale=self.spec.guidance * 0.75,")
    assert src != ALTERS
    sha, res, line = proj.experiment(src, "exact", "Scribble")
    assert "Traceback" not in res.stdout and "INTERNALERROR" not in res.stdout, res.stdout[-3000:]
    assert res.returncode == 1
    assert line.startswith("DITAR VERDICT: CRASH") and 'reason="could not record the run: Is a directory: ' in line, line
    assert proj.head() == base and proj.ledger()[-1]["status"] == "CRASH" and proj.ledger()[-1]["commit"] == sha
    assert verdict_line(res.stdout) == line
