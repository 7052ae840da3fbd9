"""Issue 38: the champion the judge times is the champion that was kept. Three attack classes,
each once a false KEEP of an honest, unchanged-speed candidate (the fourth, a champion that tells
its role from its surroundings, is tests/adversarial/test_role_blind.py):

- a link committed under `mutable/` to a file outside the repository, whose target changes
  between runs: the champion's code changed, its commit did not. Refused before any code runs,
  whatever the link points to (a file, a folder), and a submodule too;
- a reference writing into the compile cache every role reads: no reference's write ever reaches
  it (each role's cache is an overlay whose writes the judge keeps only for a kept candidate);
- a champion that fails to build in its role, so the lane fell back to the samples stored from its
  own KEEP run (which its code made slow on purpose): the run is refused naming the champion,
  nothing is charged to the candidate, and no lane is ever judged against stored samples instead.
"""
from __future__ import annotations

import subprocess

import pytest

from .attacks import BUILD, sleeps_after
from .conftest import experiment, experiment_judged
from conftest import host_visible_dir, make_project

pytestmark = pytest.mark.adversarial


def _research(pytester, source):
    proj = make_project(pytester, mutable_source=source)
    for args in (("init", "--tag", "t"), ("baseline",)):
        res = proj.ditar(*args)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return proj


def _refused(proj, judged, rows_before, *words):
    assert judged.status == "REFUSED" and judged.res.returncode == 4, judged.show()
    for word in words:
        assert word in judged.last, (word, judged.last)
    assert proj.head() == judged.sha, "a refused run leaves the commit in place"
    assert proj.ledger() == rows_before, "a refused run records nothing"


@pytest.mark.parametrize("kind", ["file", "folder", "submodule"])
def test_a_link_or_submodule_under_a_mutable_path_is_refused(pytester, model_cache, tmp_path, kind):
    """The champion's code could change while its commit does not: only regular files are code."""
    from candidates import STOCK

    proj = _research(pytester, None)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "helpers.py").write_text("SPEED = 1\n")
    rows = proj.ledger()
    if kind == "file":
        (proj.root / "mutable/helpers.py").symlink_to(outside / "helpers.py")
        proj.git("add", "mutable/helpers.py")
        where = "mutable/helpers.py is a symbolic link"
    elif kind == "folder":
        (proj.root / "mutable/lib").symlink_to(outside)
        proj.git("add", "mutable/lib")
        where = "mutable/lib is a symbolic link"
    else:
        nested = proj.root / "mutable/vendored"  # an embedded repository: git adds it as a gitlink
        nested.mkdir()
        (nested / "fast.py").write_text("SPEED = 2\n")
        who = ["-c", "user.email=t@l", "-c", "user.name=t"]
        for args in (["init", "-q"], ["add", "fast.py"], [*who, "commit", "-qm", "v"]):
            subprocess.run(["git", *args], cwd=nested, check=True, capture_output=True)
        proj.git("add", "mutable/vendored")
        where = "mutable/vendored is a submodule"
    judged = experiment(proj, STOCK + "\n# uses the helpers\n", "Link the helpers in")
    _refused(proj, judged, rows, where, "regular files only")


def test_no_reference_writes_reach_the_compile_cache(pytester, model_cache):
    """Every role writes a file into the compile cache it is given; after an A/A run (not kept)
    the tag's cache holds none of them: a champion's writes never reach what the next run reads."""
    from candidates import STOCK

    plant = BUILD.replace("    return StockDiT(spec)\n",
                          "    import os, uuid\n"
                          "    cache = os.environ['TORCHINDUCTOR_CACHE_DIR']\n"
                          "    open(os.path.join(cache, 'planted-' + uuid.uuid4().hex), 'w').write('poison')\n"
                          "    return StockDiT(spec)\n")
    planting = STOCK.replace(BUILD, plant)
    proj = _research(pytester, planting)

    def planted() -> set[str]:
        return {p.name for p in (proj.root / ".autoresearch/t").rglob("planted-*")}

    before = planted()  # the baseline's own run: its code is the first champion, its writes kept with it
    judged = experiment(proj, planting + "\n# the same code\n", "Same code")
    assert judged.status != "KEEP", judged.show()
    assert planted() == before, f"a reference's write reached the state's compile cache: {planted() - before}"


def test_a_champion_that_fails_in_its_role_refuses_the_run(pytester, model_cache, tmp_path):
    """Step 1: a real win (REDUNDANT's pass dropped, 2x) that also sleeps a quarter of its time
    (1.6x in all, decided on a loaded 2-core box; at half, 1.33x, it read undecided there): KEPT, its
    samples stored slow. Then its build fails (a time bomb, stood in for by a marker file); an
    honest candidate at the unslowed speed would beat those stored samples. Refused instead,
    naming the champion; the candidate's commit stays, nothing is recorded."""
    from candidates import REDUNDANT, STOCK

    marker = host_visible_dir("bomb") / "bomb"  # a sandbox sees the host here, not in its own /tmp
    bombed = BUILD.replace("    return StockDiT(spec)\n",
                           f"    if __import__('os').path.exists({str(marker)!r}):\n"
                           "        raise RuntimeError('the time bomb went off')\n"
                           "    return StockDiT(spec)\n")
    first = sleeps_after("        _t.sleep(0.25 * (_t.perf_counter() - _t0))\n", STOCK).replace(BUILD, bombed)
    proj = _research(pytester, REDUNDANT)
    step1 = experiment_judged(proj, first, "Drop the redundant pass")
    assert step1.status == "KEEP", step1.show()
    marker.write_text("now\n")
    rows = proj.ledger()
    judged = experiment(proj, STOCK, "The same pass without the sleep")
    _refused(proj, judged, rows, f"champion {step1.sha[:7]} could not be built in its role: its code raised",
             "time bomb went off")
    assert "nothing judged" in judged.last
    out = judged.res.stdout + judged.res.stderr
    assert "the champion's own code failed in its role, not the candidate's" in out
