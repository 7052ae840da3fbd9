"""A gated run is judged by the repository's own config file, at the hash the baseline recorded."""
import hashlib
import json

import pytest

from candidates import STOCK, _patch

# The defences' own attack-first tests: they run with the battery (CI's second step).
pytestmark = pytest.mark.adversarial

# Half the denoising steps: about twice as fast, and far from the baseline's outputs.
HALF_STEPS = _patch("num_inference_steps=request.steps,", "num_inference_steps=max(1, request.steps // 2),")
LOOSE = {"exact": {"latent_rel_l2_max": 1e9, "psnr_min": 0.0, "ssim_min": -1.0}}


def _last(res) -> str:
    return res.stdout.strip().splitlines()[-1]


def _loose_config(proj, **extra) -> dict:
    cfg = proj.config()
    cfg["thresholds"] = {**cfg["thresholds"], **LOOSE}
    cfg.update(extra)
    return cfg


def test_loose_config_outside_the_repository_is_refused(research, tmp_path):
    """The attack: `dit-ar --config /tmp/loose.json experiment` with loosened exact floors and a
    `root` pointing back at the project judged a half-steps candidate labelled exact, and KEPT it."""
    proj = research
    loose = tmp_path / "loose.json"
    loose.write_text(json.dumps(_loose_config(proj, root=str(proj.root))))
    sha = proj.commit_candidate(HALF_STEPS, "exact", "Half the steps")
    res = proj.ditar("--config", str(loose), "experiment", "--classification", "exact", "--description", "half")
    line = _last(res)
    assert res.returncode == 4, res.stdout[-2000:]
    assert line.startswith(f"DITAR REFUSED: config {loose} is outside the repository {proj.root}"), line
    assert "config/autoresearch.json" in line
    assert proj.head() == sha  # nothing reverted
    assert [r["status"] for r in proj.ledger()] == ["BASELINE"]  # nothing recorded


def test_root_override_in_another_config_file_is_refused(research):
    proj = research
    proj.write("alt/config/autoresearch.json", json.dumps(_loose_config(proj, root="../..")))
    proj.write("mutable/pipeline.py", HALF_STEPS)
    proj.git("add", "-A")
    proj.git("commit", "-qm", "Half the steps\n\nDitar-Class: exact")
    sha = proj.head()
    res = proj.ditar("--config", "alt/config/autoresearch.json", "experiment", "--classification", "exact",
                     "--description", "half")
    line = _last(res)
    assert res.returncode == 4, res.stdout[-2000:]
    assert line.startswith(f"DITAR REFUSED: config {proj.root}/alt/config/autoresearch.json sets root to "
                           f"{proj.root}, not its own project {proj.root}/alt"), line
    assert proj.head() == sha and [r["status"] for r in proj.ledger()] == ["BASELINE"]


def test_config_changed_since_the_baseline_behind_gits_back_is_refused(research):
    """skip-worktree hides an edit from `git status`: the baseline's config hash still catches it."""
    proj = research
    recorded = json.loads((proj.root / ".autoresearch/t/baseline/manifest.json").read_text())["config_sha256"]
    cfg_file = proj.root / "config/autoresearch.json"
    assert recorded == hashlib.sha256(cfg_file.read_bytes()).hexdigest()
    proj.git("update-index", "--skip-worktree", "config/autoresearch.json")
    cfg_file.write_text(json.dumps(_loose_config(proj), indent=1))
    assert proj.git("status", "--porcelain") == ""
    sha = proj.commit_candidate(HALF_STEPS, "exact", "Half the steps")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "half")
    line = _last(res)
    assert res.returncode == 4, res.stdout[-2000:]
    assert line.startswith("DITAR REFUSED: config/autoresearch.json (sha256 ") and \
        f"differs from the baseline's {recorded[:12]}: " \
        "restore config/autoresearch.json from the baseline commit" in line \
        and "or re-baseline with a new tag" in line, line
    assert proj.head() == sha and [r["status"] for r in proj.ledger()] == ["BASELINE"]


def test_report_only_run_may_use_any_config_and_says_so(research, tmp_path):
    proj = research
    loose = tmp_path / "loose.json"
    loose.write_text(json.dumps(_loose_config(proj, root=str(proj.root))))
    sha = proj.commit_candidate(STOCK + "\n# same code\n", "exact", "A comment")
    res = proj.pytest(f"--ditar-config={loose}", "-m", "quality", "-k", "tiny-000")
    out = res.stdout.str()
    assert res.ret == 0, out[-2000:]
    assert f"ditar: report only: config {loose} is not the repository's; nothing recorded" in out
    assert "DITAR VERDICT" not in out and proj.head() == sha
    assert [r["status"] for r in proj.ledger()] == ["BASELINE"]


def test_baseline_without_config_hash_is_accepted_with_a_note(research):
    """An older baseline records no config_sha256: the run goes on, and says the config is not pinned."""
    from pytest_ditar.store.ledger import Ledger

    proj = research
    man = proj.root / ".autoresearch/t/baseline/manifest.json"
    m = json.loads(man.read_text())
    del m["config_sha256"]
    man.write_text(json.dumps(m, indent=1, sort_keys=True))
    digest = hashlib.sha256(man.read_bytes()).hexdigest()
    # as an older `dit-ar baseline` anchored it
    Ledger(proj.root / ".autoresearch/t").append({"commit": m["git_sha"], "status": "BASELINE",
                                                   "description": f"baseline manifest sha256={digest}"})
    sha = proj.commit_candidate(STOCK + "\n", None, "No trailer")
    res = proj.pytest("--ditar-gate")
    out = res.stdout.str()
    assert res.ret == 4 and "has no class" in out.strip().splitlines()[-1], out[-2000:]
    assert "ditar: note: the baseline records no config_sha256 (an older baseline): the config is not pinned" in out
    assert "config/autoresearch.json" not in out.strip().splitlines()[-1]  # refused for the class, not the config
    assert proj.head() == sha


def test_candidate_editing_the_config_is_refused_before_pytest_starts(research):
    """A candidate's own edit of the config is outside the mutable paths: REFUSED before pytest reads a
    file of the project (issue 49; a DISCARD judged by a pytest that had read it before), nothing
    recorded, the commit left for the agent to take the edit out of."""
    proj = research
    rows = proj.ledger()
    proj.write("config/autoresearch.json", json.dumps(_loose_config(proj), indent=1))
    sha = proj.commit_candidate(HALF_STEPS, "exact", "Half the steps, looser floors")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "half")
    line = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 4, line
    assert line.startswith("DITAR REFUSED: judge_tree: config/autoresearch.json modified in HEAD"), line
    assert proj.head() == sha and proj.ledger() == rows
