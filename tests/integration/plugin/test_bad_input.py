"""Bad input: each gives a one-line error naming the file/key, with no traceback."""
import shutil

import pytest
import yaml


def _one_line_error(text: str, *needles: str) -> None:
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if any(n in line for n in needles)]
    assert lines, f"no line mentions {needles}:\n{text}"


def _check_both(proj, *needles: str, args=("-m", "quality")) -> None:
    """Through pytest (usage error, exit 4) and through dit-ar (exit 2)."""
    res = proj.pytest(*args)
    assert res.ret in (4, pytest.ExitCode.USAGE_ERROR), res.stdout.str()
    _one_line_error(res.stdout.str() + res.stderr.str(), *needles)
    cli = proj.ditar("doctor")
    assert cli.returncode != 0
    _one_line_error(cli.stdout + cli.stderr, *needles)


def test_missing_config(project):
    res = project.pytest("--ditar-config=config/nope.json", "-m", "quality")
    assert res.ret == 4
    _one_line_error(res.stdout.str() + res.stderr.str(), "nope.json", "not found")
    (project.root / "config/autoresearch.json").unlink()
    cli = project.ditar("baseline")
    assert cli.returncode == 2 and "config file not found" in cli.stderr and "Traceback" not in cli.stderr


def test_malformed_config(project):
    project.write("config/autoresearch.json", '{"suite": "tiny",, }')
    _check_both(project, "autoresearch.json", "malformed")


def test_unknown_key(project):
    project.set_config(objectiv_lane="latency_b1")
    _check_both(project, "unknown key 'objectiv_lane'")


def test_wrong_type(project):
    project.set_config(item_timeout_s="ten")
    _check_both(project, "item_timeout_s", "must be a number")


def test_suite_missing(project):
    shutil.rmtree(project.root / "suites/tiny")
    _check_both(project, "suite.yaml", "suite file not found")


def test_corpus_item_without_seed(project):
    p = project.root / "suites/tiny/suite.yaml"
    suite = yaml.safe_load(p.read_text())
    del suite["corpus"][2]["seed"]
    p.write_text(yaml.safe_dump(suite))
    _check_both(project, "tiny-002", "has no 'seed'")


def test_baseline_missing(project):
    res = project.pytest("-m", "quality")
    assert res.ret == 4
    out = res.stdout.str()
    assert "Traceback" not in out
    assert out.strip().splitlines()[-1].startswith("DITAR REFUSED:") and "baseline missing" in out


def test_baseline_corrupted(research):
    snap = research.root / ".autoresearch/t/baseline/items/tiny-001.latent.npy"
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0xFF
    snap.write_bytes(bytes(data))
    research.git("checkout", "-q", "main")  # report mode: a one-line refusal
    res = research.pytest("-m", "quality", "--ditar-tag=t")
    out = res.stdout.str()
    assert res.ret == 4 and "Traceback" not in out
    assert "baseline corrupted: items/tiny-001.latent.npy hash mismatch" in out


def test_weights_dir_missing(project, tmp_path):
    p = project.root / "suites/tiny/suite.yaml"
    suite = yaml.safe_load(p.read_text())
    suite["model"] = {"source": "local", "weights_dir": str(tmp_path / "no-such-weights")}
    p.write_text(yaml.safe_dump(suite))
    project.git("commit", "-qam", "point at local weights")
    res = project.ditar("baseline")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no-such-weights" in res.stderr and "weights directory" in res.stderr
    res = project.pytest("--ditar-baseline")
    assert "Traceback" not in res.stdout.str() and "weights directory" in res.stdout.str()
