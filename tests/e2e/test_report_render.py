"""`dit-ar report` on a session with history: the page rendered by chromium, its plot and image grid
(long: a real loop of several experiments)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from candidates import ALTERS, COMMENT_ONLY, RAISES, REDUNDANT, STOCK
from conftest import ANY_LOAD, REPO, make_project
from unit.report.test_cli_report import HEIGHT, WIDTH

GREEN_LINE = np.array([0x2A, 0x9D, 0x8F])  # the running-best step line in progress.png


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _screenshot(html: Path, out: Path, profile: Path) -> np.ndarray:
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); cannot render the report")
    profile.mkdir()
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", f"--screenshot={out}", f"--window-size={WIDTH},{HEIGHT}", html.as_uri()]
    # pytester points HOME at the project; chromium's caches must not dirty the research tree.
    home = profile.parent / "home"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache")}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.is_file(), f"chromium wrote no screenshot (rc {res.returncode}): {res.stderr[-2000:]}"
    return np.asarray(Image.open(out).convert("RGB")).astype(np.int16)


def _experiment(proj, source: str, desc: str) -> str:
    proj.commit_candidate(source, "exact", desc)
    res = proj.ditar("experiment", "--classification", "exact", "--description", desc)
    return res.stdout.strip().splitlines()[-1]


@pytest.fixture
def session_with_history(pytester, model_cache):
    """A research branch whose baseline wastes a full pass, then four experiments for real."""
    # This test is about the page, not the statistics: a looser spread limit keeps a shared, busy
    # CI box from calling a real 2x speedup "too noisy to decide".
    perf = json.loads((REPO / "config/autoresearch.json").read_text())["perf"]
    proj = make_project(pytester, mutable_source=REDUNDANT,  # the baseline taken whatever the box's load
                        config={"perf": {**perf, "max_cv": 1.0, "drift_tolerance": 3.0, **ANY_LOAD}})
    assert proj.ditar("init", "--tag", "t").returncode == 0
    res = proj.ditar("baseline")
    assert res.returncode == 0, res.stderr
    verdicts = [proj.experiment_judged(STOCK, "exact", "Drop the redundant pass")[2]]  # a real 2x
    verdicts += [_experiment(proj, ALTERS, "Lower guidance (mislabelled)"),   # DISCARD: quality failure
                 _experiment(proj, RAISES, "A broken kernel"),                # CRASH
                 _experiment(proj, COMMENT_ONLY, "A comment")]                # DISCARD: not faster
    return proj, verdicts


def test_report_renders_plot_and_image_grid(session_with_history, tmp_path):
    proj, verdicts = session_with_history
    statuses = [v.split()[2] for v in verdicts]
    assert "KEEP" in statuses and statuses[-3:-1] == ["DISCARD", "CRASH"], verdicts
    assert "quality=0/6" in verdicts[-3]  # the quality failure, judged against the original baseline
    state = proj.root / ".autoresearch/t"

    # JUnit XML and the pytest-benchmark JSON of the kept (fully timed) run are in its run dir.
    keep_sha = next(r["commit"] for r in proj.ledger() if r["status"] == "KEEP")
    keep_run = next(d for d in (state / "runs").iterdir() if (d / "summary.json").is_file()
                    and json.loads((d / "summary.json").read_text())["commit"] == keep_sha
                    and json.loads((d / "summary.json").read_text())["decision"] == "KEEP")
    suite = ET.parse(keep_run / "junit.xml").getroot()
    assert int(suite.find("testsuite").get("tests") if suite.tag == "testsuites" else suite.get("tests")) >= 6
    bench = json.loads((keep_run / "benchmark.json").read_text())
    assert {b["extra_info"]["lane"] for b in bench["benchmarks"]} >= {"latency_b1"}
    assert all(b["stats"]["data"] for b in bench["benchmarks"])
    assert not list((state / ".pending").glob("*")), "pending artifacts must be filed or removed"
    fail_run = next(d for d in (state / "runs").iterdir() if (d / "failures").is_dir())
    assert not (fail_run / "benchmark.json").exists()  # perf is skipped after a quality failure: nothing timed
    assert (fail_run / "junit.xml").is_file()  # every gated run has one, not only kept ones

    res = proj.ditar("report")
    assert res.returncode == 0, res.stdout + res.stderr
    index = state / "report/index.html"
    page = index.read_text()
    assert (state / "report/progress.png").is_file()
    # Self-contained: nothing fetched from anywhere when the page opens.
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert "<link" not in page and 'src="data:image/png;base64,' in page
    assert "Quality failures (1)" in page and "Kept commits (1)" in page
    assert page.count('class="st-CRASH"') >= 1 and "candidate image not stored" not in page.split('id="keeps"')[0]
    # issue 42: nothing of the machine's paths in the page, the host named, a page others can read
    assert str(proj.root) not in page and "state <code>.autoresearch/t</code>" in page and " ms</b>" in page
    assert (index.stat().st_mode & 0o777) == 0o644

    shot = _screenshot(index, tmp_path / "shot.png", tmp_path / "profile")
    assert shot.shape == (HEIGHT, WIDTH, 3)
    assert shot.std() > 20, "the screenshot is blank"
    # The plot: under the header, wide, with the running-best line drawn in its colour.
    plot = shot[150:800, 20:1240]
    assert plot.std() > 15
    near_line = (np.abs(plot - GREEN_LINE).sum(axis=-1) < 40).sum()
    assert near_line > 300, f"running-best line not visible in the plot region ({near_line} px)"
    # The image grid (quality failure first): colourful image tiles, not text on white.
    grid = shot[700:HEIGHT, 20:1240]
    colourful = (grid.max(axis=-1) - grid.min(axis=-1) > 60).sum()
    assert colourful > 3 * 160 * 160 // 2, f"image grid not visible ({colourful} colourful px)"
    assert grid.std() > 20
