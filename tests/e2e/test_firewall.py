"""The quality firewall without semantic evaluators, through `dit-ar experiment` and `dit-ar verify`:
class gate refusal, fresh-seed holdout, an edited snapshot or ledger row. The invalid-output reasons
and the zero-regression rule, as plain functions: tests/unit/core/test_firewall_rules.py."""
import json
import shutil
from pathlib import Path

from candidates import STOCK
from conftest import verdict_line


def _patch(old: str, new: str) -> str:
    assert old in STOCK, old
    return STOCK.replace(old, new)


# Fewer denoising steps: the textbook "approximate" change.
FEWER_STEPS = _patch("num_inference_steps=request.steps,", "num_inference_steps=request.steps - 1,")

# Recognises corpus seeds and replays the stored baseline outputs for them; for any other seed
# it computes something else (half the guidance). The corpus cannot tell; fresh seeds can.
# The agent reads the baseline's outputs on its own (the judge's sandbox hides .autoresearch/ from
# a candidate) and commits them beside its code: a replay of the corpus that the fresh seeds miss.
REPLAY = _patch("    def generate(self, request: Request) -> Generated:\n",
                '''    def generate(self, request: Request) -> Generated:
        import json
        from pathlib import Path
        from PIL import Image
        here = Path(__file__).resolve().parent / "replay"
        stored = {int(k): v for k, v in json.loads((here / "index.json").read_text()).items()}
        if all(s in stored for s in request.seeds):
            lat = np.stack([np.load(here / stored[s][0]) for s in request.seeds])
            img = np.stack([np.asarray(Image.open(here / stored[s][1]).convert("RGB")) for s in request.seeds])
            return Generated(latents=torch.from_numpy(lat), images=img)
        half = self.spec.guidance * 0.5
''').replace("guidance_scale=self.spec.guidance,", "guidance_scale=half,")


def _commit_replay_data(proj) -> None:
    """Copy the stored baseline outputs into mutable/replay/, indexed by seed, and stage them."""
    (man,) = (proj.root / ".autoresearch").glob("*/baseline/manifest.json")
    m = json.loads(man.read_text())
    out = proj.root / "mutable/replay"
    out.mkdir()
    index = {}
    for item_id, seed in m["seeds"].items():
        files = [m["items"][item_id]["latent"], m["items"][item_id]["image"]]
        for f in files:
            shutil.copy(man.parent / f, out / Path(f).name)
        index[seed] = [Path(f).name for f in files]
    (out / "index.json").write_text(json.dumps(index))
    proj.git("add", "mutable/replay")


def test_approximate_without_evaluators_is_refused_with_the_config_hint(research):
    proj = research
    base = proj.head()
    _, res, line = proj.experiment(FEWER_STEPS, "approximate", "One step fewer")
    assert res.returncode == 1
    assert line.startswith("DITAR VERDICT: DISCARD") and "guard class_gate" in line, line
    assert "semantic.clip_model, semantic.clip_weights and semantic.lpips_weights" in line
    assert "test_quality" not in res.stdout  # the candidate never ran
    assert proj.head() == base


def test_replaying_candidate_is_caught_by_the_fresh_seed_holdout(research):
    proj = research
    base = proj.head()
    _commit_replay_data(proj)
    _, res, line = proj.experiment(REPLAY, "exact", "Cache outputs")
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=6/6" in line, line  # the corpus is fooled
    assert 'reason="holdout seed ' in line and "latent_rel_l2" in line, line
    assert "ditar: holdout 2 fresh seed(s)" in res.stdout and "2 failed" in res.stdout
    assert proj.head() == base
    logs = list((proj.root / ".autoresearch/t/runs").glob("*/holdout.json"))
    assert len(logs) == 1
    held = json.loads(logs[0].read_text())
    corpus_seeds = {it["seed"] for it in _corpus(proj)}
    assert len(held["items"]) == 2 and not {it["seed"] for it in held["items"]} & corpus_seeds


def _corpus(proj):
    import yaml

    return yaml.safe_load((proj.root / "suites/tiny/suite.yaml").read_text())["corpus"]


def test_holdout_passes_an_honest_candidate_and_runs_only_when_gated(research):
    """The unmodified pipeline as a candidate: the holdout runs and passes; a report-only
    run (-m quality) never runs it."""
    proj = research
    proj.commit_candidate(STOCK + "\n# same code\n", "exact", "A comment")
    res = proj.pytest("-m", "quality")
    assert "ditar: holdout" not in res.stdout.str()
    res = proj.ditar("experiment", "--classification", "exact", "--description", "A comment")
    assert "ditar: holdout 2 fresh seed(s)" in res.stdout and ": ok (" in res.stdout, res.stdout[-2000:]
    assert "holdout seed" not in verdict_line(res.stdout)


def test_verify_catches_an_edited_snapshot_file_and_an_edited_ledger_row(research):
    proj = research
    res = proj.ditar("verify", "--sample", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert all(line.startswith("ok ") for line in lines[:-1]) and lines[-1] == "verify: all checks passed", res.stdout
    assert sum(line.startswith("ok   regenerate tiny-") for line in lines) == 2
    assert any(line.startswith("ok   baseline anchor") for line in lines)

    png = sorted((proj.root / ".autoresearch/t/baseline/items").glob("*.png"))[0]
    data = bytearray(png.read_bytes())
    data[-20] ^= 0xFF
    png.write_bytes(bytes(data))
    ledger = proj.root / ".autoresearch/t/ledger.jsonl"
    rows = ledger.read_text().splitlines()
    row = json.loads(rows[0])
    row["quality_total"] = 5
    ledger.write_text("\n".join([json.dumps(row), *rows[1:]]) + "\n")

    res = proj.ditar("verify", "--sample", "0")
    assert res.returncode == 1
    out = res.stdout
    assert f"FAIL baseline files: items/{png.name} hash mismatch (edited?)" in out, out
    assert "FAIL ledger chain: row 1: hash mismatch (edited?)" in out, out
    assert out.strip().splitlines()[-1] == "verify: FAILED"


def test_verify_catches_an_edited_manifest_through_the_ledger_anchor(research):
    proj = research
    man = proj.root / ".autoresearch/t/baseline/manifest.json"
    m = json.loads(man.read_text())
    m["device"] = "elsewhere"
    man.write_text(json.dumps(m, indent=1, sort_keys=True))
    res = proj.ditar("verify", "--sample", "0")
    assert res.returncode == 1 and "FAIL baseline anchor: manifest sha256" in res.stdout, res.stdout

