"""What a process of the user's could plant between two gated runs, outside the repository's
commits (issue 24): a `.pth` in the environment's site-packages, bytecode of the judge's own
modules, pytest's rewrite cache of a fixed conftest, a changed weight of the model. The sandbox
keeps candidates from writing any of these (tests/adversarial/test_sandbox.py); a stray job of the
user's is not sandboxed, so the judge refuses to run on what it did, or never loads it.

The judge here runs from an environment of its own (a venv whose one `.pth` puts a copy of the
package and this environment's site-packages on its path) with a model cache of its own, so what
a test plants never reaches another test running beside it.
"""
from __future__ import annotations

import importlib.util
import marshal
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

import pytest_ditar

from .attacks import COMMENT_ONLY
from .conftest import Judged, parse, summary_reasons
from conftest import Project, make_project

pytestmark = pytest.mark.adversarial

GENERATE = "    def generate(self, request: Request) -> Generated:\n"
SLOWER = COMMENT_ONLY.replace(GENERATE, GENERATE + "        import time; time.sleep(0.02)\n", 1)
assert SLOWER != COMMENT_ONLY


@dataclass
class Judge:
    """A private environment that runs pytest-ditar: its python, its site-packages, its package."""

    python: Path
    site: Path
    package: Path
    cache: Path

    def env(self) -> dict:
        return {**os.environ, "DITAR_CACHE": str(self.cache)}


class OwnProject(Project):
    judge: Judge

    def ditar(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.judge.python), "-m", "pytest_ditar.cli", "--config", "config/autoresearch.json",
                               *args], cwd=self.root, capture_output=True, text=True, timeout=timeout,
                              env={**self.judge.env(), **(env or {})})


def _make_judge(top: Path) -> Judge:
    env = top / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(subprocess.check_output([str(python), "-c",
                                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    copy = top / "judge"
    shutil.copytree(Path(pytest_ditar.__file__).parent, copy / "pytest_ditar",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "ditar-paths.pth").write_text(f"{copy}\n{sysconfig.get_paths()['purelib']}\n")
    # a model cache of its own to tamper with (the baseline builds the tiny model there)
    return Judge(python, site, copy / "pytest_ditar", top / "cache")


_BUILT: dict[Path, Judge] = {}


@pytest.fixture
def own(pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> OwnProject:
    """The private environment, its model cache and a project with its baseline stored, under one
    folder per xdist worker. Built and baselined once (the venv, the tiny model, the baseline: a
    minute and more on a loaded box), saved beside it; each later test gets the saved copy back at
    the same paths (what the baseline pinned), so what a test planted is gone for the next."""
    work = tmp_path_factory.getbasetemp() / "planted-by-hand"
    saved = work.with_name(work.name + "-saved")
    if work in _BUILT:
        shutil.rmtree(work)
        shutil.copytree(saved, work, symlinks=True)
        judge = _BUILT[work]
    else:
        work.mkdir()
        judge = _make_judge(work)
    proj = OwnProject(work / "project", pytester)
    proj.judge = judge
    if work not in _BUILT:
        (work / "project").mkdir()
        make_project(pytester, root=proj.root)
        for step in (("init", "--tag", "t"), ("baseline",)):
            res = proj.ditar(*step, env={"DITAR_ZYGOTE_IDLE_S": "0"})  # the copies name no zygote of this test's
            assert res.returncode == 0, res.stdout + res.stderr
        shutil.copytree(work, saved, symlinks=True)
        _BUILT[work] = judge
    return proj


def judged(proj: OwnProject, source: str | None, subject: str) -> Judged:
    """Commit `source` (None: judge HEAD as it is) and judge it with `dit-ar experiment` from the
    private environment."""
    sha = proj.commit_candidate(source, "exact", subject) if source is not None else proj.head()
    res = proj.ditar("experiment", "--classification", "exact", "--description", subject)
    last, status, reason = parse(res.stdout)
    return Judged(sha, res, last, status, reason, summary_reasons(proj, sha))


def _refused(proj: OwnProject, *names: str) -> None:
    before = proj.ledger()
    j = judged(proj, COMMENT_ONLY, "an honest A/A")
    sha = j.sha
    assert j.status == "REFUSED" and j.res.returncode == 4, j.show()
    for name in names:
        assert name in j.last, j.show()
    assert proj.head() == sha and proj.ledger() == before, "a refused run records and reverts nothing"


def _timestamp_pyc(source: Path, code_text: str) -> bytes:
    """Bytecode of `code_text` that Python's own loader would take for `source`'s."""
    st = source.stat()
    code = compile(code_text, str(source), "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(
        4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return header + marshal.dumps(code)


def test_a_pth_planted_in_site_packages_between_runs_is_refused_naming_it(own: OwnProject):
    pth = own.judge.site / "zz-planted.pth"
    pth.write_text("import os; os.environ.setdefault('DITAR_PLANTED', '1')\n")
    _refused(own, "python environment changed", "zz-planted.pth added")
    pth.unlink()
    j = judged(own, None, "an honest A/A")  # the refused commit, judged once the file is gone
    assert j.status == "DISCARD", j.show()


def test_a_weight_changed_between_runs_is_refused_never_blamed_on_the_candidate(own: OwnProject):
    weights = sorted((own.judge.cache / "models").rglob("transformer/*.safetensors"))
    assert weights, list((own.judge.cache / "models").rglob("*"))
    data = bytearray(weights[0].read_bytes())
    data[-8:] = bytes(8)  # the last values of the last tensor
    weights[0].write_bytes(bytes(data))
    _refused(own, "model cache changed", "transformer/")


def test_forged_bytecode_of_the_judges_own_modules_is_never_loaded(own: OwnProject):
    """Bytecode beside decision.py that turns every DISCARD into a KEEP: Python's own loader takes
    it (checked first), the judge's does not: a slower candidate is still discarded."""
    src = own.judge.package / "core" / "decision.py"
    forged = src.read_text() + (
        "\n_real_decide = decide\n\n"
        "def decide(**kw):\n"
        "    d = _real_decide(**kw)\n"
        "    return Decision('KEEP', 'forged', ('forged',)) if d.status == 'DISCARD' else d\n")
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(_timestamp_pyc(src, forged))
    plain = subprocess.run([str(own.judge.python), "-c", (
        "import sys, importlib.machinery as m, importlib.util as u\n"
        f"spec = u.spec_from_file_location('forged_probe', {str(src)!r}, "
        f"loader=m.SourceFileLoader('forged_probe', {str(src)!r}))\n"
        "mod = u.module_from_spec(spec); sys.modules['forged_probe'] = mod; spec.loader.exec_module(mod)\n"
        "print('forged' if hasattr(mod, '_real_decide') else 'source')")], capture_output=True, text=True,
        env=own.judge.env(), cwd=own.judge.cache.parent)  # the probe's own compiled modules go to the judge's cache
    # the attack is real: the interpreter's own loader runs the forged code for this file
    assert plain.stdout.strip() == "forged", plain.stdout + plain.stderr
    j = judged(own, SLOWER, "slower")
    assert j.status == "DISCARD" and "forged" not in j.last, j.show()


def test_forged_bytecode_of_the_package_init_is_refused_naming_it(own: OwnProject):
    src = own.judge.package / "__init__.py"
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(_timestamp_pyc(src, src.read_text() + "\nPLANTED = True\n"))
    _refused(own, "judge bytecode", "__init__")


def _rewrite_pyc(source: Path, code_text: str) -> list[bytes]:
    """A rewrite cache of `code_text` that this pytest takes for `source`'s: by its header, either
    the source's size and mtime (older pytest) or its hash (newer), whichever a scratch run of
    pytest without the plugin shows it loads."""
    st, data = source.stat(), source.read_bytes()
    code = marshal.dumps(compile(code_text, str(source), "exec", dont_inherit=True))
    mtime = importlib.util.MAGIC_NUMBER + bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (
        st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    hashed = importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little") + importlib.util.source_hash(data)[:8]
    return [mtime + code, hashed + code]


def test_a_forged_rewrite_cache_of_a_fixed_conftest_is_never_loaded(own: OwnProject, tmp_path: Path):
    """pytest loads `__pycache__/conftest.<tag>-pytest-<version>.pyc` when its header matches the
    conftest (its size and mtime, or its hash), which a planted one can copy. Planted there, a
    conftest that ends pytest at once would decide the run; the judge drops such caches before pytest
    loads a conftest."""
    name = f"conftest.{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
    probe = tmp_path / "probe"
    (probe / "__pycache__").mkdir(parents=True)
    (probe / "conftest.py").write_text("X = 1\n")
    (probe / "test_probe.py").write_text("def test_probe():\n    pass\n")
    taken = None
    for variant in _rewrite_pyc(probe / "conftest.py", "raise SystemExit(3)\n"):
        (probe / "__pycache__" / name).write_bytes(variant)
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:ditar", "-p", "no:cacheprovider"],
                             cwd=probe, capture_output=True, text=True)
        if res.returncode == 3:
            taken = variant[4:8]
            break
    assert taken is not None, "this pytest loads neither form of a planted rewrite cache: the attack needs updating"
    conftest = own.root / "conftest.py"
    forged = conftest.read_text() + "\nraise SystemExit(3)\n"
    planted = own.root / "__pycache__" / name
    planted.parent.mkdir(exist_ok=True)
    planted.write_bytes(next(v for v in _rewrite_pyc(conftest, forged) if v[4:8] == taken))
    j = judged(own, COMMENT_ONLY, "an honest A/A")
    assert j.status == "DISCARD" and j.res.returncode != 3, j.show()  # the forged conftest would exit 3
    assert not planted.exists() or planted.read_bytes()[16:] != next(iter(_rewrite_pyc(conftest, forged)))[16:]
