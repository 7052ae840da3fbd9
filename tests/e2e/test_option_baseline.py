"""`pytest --ditar-baseline` / `dit-ar baseline`: the stored snapshot and its refusals."""
import json


def test_baseline_stores_verified_snapshot(project):
    res = project.pytest("--ditar-baseline")
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["baseline *: 6 items, suite tiny*"])
    base = project.root / ".autoresearch/main/baseline"
    m = json.loads((base / "manifest.json").read_text())
    assert m["git_sha"] == project.head()
    assert set(m["items"]) == {f"tiny-{i:03d}" for i in range(6)}
    assert m["seeds"]["tiny-003"] == 1003
    for key in ("suite_hash", "config_hash", "fixed_paths", "libraries", "fingerprint", "determinism"):
        assert m[key], key
    assert "config/autoresearch.json" in m["fixed_paths"]
    lanes = json.loads((base / "lanes.json").read_text())
    assert set(lanes) == {"latency_b1", "throughput_b8"}
    assert len(lanes["latency_b1"]["measurement"]["samples"]) == 12  # one lanes.json shape (store.records)
    assert lanes["latency_b1"]["noise"]["ci_half_width"] > 0
    assert not list(base.parent.glob(".baseline.tmp-*")), "temp dir left behind"


def test_baseline_refuses_to_overwrite_unless_forced(project):
    assert project.pytest("--ditar-baseline").ret == 0
    manifest = project.root / ".autoresearch/main/baseline/manifest.json"
    first = json.loads(manifest.read_text())["created"]
    res = project.pytest("--ditar-baseline")
    assert res.ret != 0
    assert "a baseline already exists" in res.stdout.str()
    res = project.ditar("baseline")
    assert res.returncode == 2 and "already exists" in res.stderr
    res = project.pytest("--ditar-baseline", "--ditar-force")
    assert res.ret == 0
    assert json.loads(manifest.read_text())["created"] >= first


def test_baseline_refuses_uncommitted_mutable(project):
    project.write("mutable/pipeline.py", (project.root / "mutable/pipeline.py").read_text() + "\n# edit\n")
    res = project.ditar("baseline")
    assert res.returncode == 2
    assert "uncommitted changes in mutable paths (mutable/pipeline.py)" in res.stderr
    assert not (project.root / ".autoresearch/main/baseline").exists()


def test_baseline_refuses_mutable_changed_since_branch_start(project):
    assert project.ditar("init", "--tag", "t").returncode == 0
    project.write("mutable/pipeline.py", (project.root / "mutable/pipeline.py").read_text() + "\n# tuned\n")
    project.git("commit", "-qam", "tweak before baseline")
    res = project.ditar("baseline")
    assert res.returncode == 2 and "differ from the branch's start commit" in res.stderr
