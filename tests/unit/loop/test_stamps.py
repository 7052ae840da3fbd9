"""loop.integrity.stamps: the model's files and the Python environment as the baseline stamped them, and the
judge's own bytecode (issue 24). Through `dit-ar`: tests/adversarial/test_planted_by_hand.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest_ditar
from pytest_ditar.loop.integrity import stamps


def _model(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    (d / "transformer").mkdir(parents=True)
    (d / "model_index.json").write_text("{}")
    (d / "transformer" / "w.safetensors").write_bytes(bytes(range(256)) * 8)
    return d


def test_a_model_file_changed_added_or_removed_is_named(tmp_path):
    d = _model(tmp_path)
    rec = stamps.model_stamp(d)
    assert set(rec) == {"model_index.json", "transformer/w.safetensors"}
    assert stamps.model_changes(rec, d) == []
    w = d / "transformer" / "w.safetensors"
    st = w.stat()
    data = bytearray(w.read_bytes())
    data[5] ^= 1
    w.write_bytes(bytes(data))
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back: the ctime still moved
    assert stamps.model_changes(rec, d) == ["transformer/w.safetensors changed"]
    (d / "extra.bin").write_bytes(b"x")
    (d / "model_index.json").unlink()
    assert stamps.model_changes(rec, d) == ["model_index.json removed", "extra.bin added",
                                            "transformer/w.safetensors changed"]


def test_a_copy_with_the_same_bytes_is_no_change(tmp_path):
    d = _model(tmp_path)
    rec = stamps.model_stamp(d)
    w = d / "transformer" / "w.safetensors"
    data = w.read_bytes()
    w.unlink()
    w.write_bytes(data)  # a new inode and ctime, the same content
    assert stamps.model_changes(rec, d) == []


def test_the_refusal_names_the_model_file_and_says_how_to_fix_it(tmp_path):
    d = _model(tmp_path)
    manifest = {"model_files": stamps.model_stamp(d), "environment": stamps.environment_stamp(tmp_path)}
    assert stamps.refusal(manifest, d, tmp_path) is None
    (d / "transformer" / "w.safetensors").write_bytes(b"other")
    why = stamps.refusal(manifest, d, tmp_path)
    assert why.startswith("model cache changed since the baseline: transformer/w.safetensors changed"), why
    assert "dit-ar baseline --force" in why
    assert stamps.refusal({}, d, tmp_path) is None  # an older baseline stamped nothing


def test_the_environment_stamp_holds_the_site_directories_pth_files():
    env = stamps.environment_stamp(Path(pytest_ditar.__file__).parent.parent)
    assert any(p.endswith(".pth") for p in env), env  # this venv has an editable install's .pth at least
    assert stamps.environment_changes(env, Path(pytest_ditar.__file__).parent.parent) == []
    fake = dict(env)
    first = sorted(fake)[0]
    fake[first] = "0" * 64
    del fake[sorted(fake)[-1]]
    changes = stamps.environment_changes(fake, Path(pytest_ditar.__file__).parent.parent)
    assert f"{first} changed" in changes and any(c.endswith(" added") for c in changes), changes


def test_the_judges_modules_never_come_from_the_bytecode_beside_them(tmp_path):
    """A copy of the package with bytecode planted beside a module: Python's own loader would run
    it; importing through the package runs the source."""
    import importlib.util
    import marshal
    import shutil

    pkg = tmp_path / "pytest_ditar"
    shutil.copytree(Path(pytest_ditar.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    src = pkg / "core" / "vocabulary.py"
    st = src.stat()
    code = compile(src.read_text() + "\nPLANTED = True\n", str(src), "exec", dont_inherit=True)
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                    + st.st_size.to_bytes(4, "little") + marshal.dumps(code))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import pytest_ditar.core.vocabulary as v; "
             "print(getattr(v, 'PLANTED', False), v.__file__)")
    env = {**os.environ, "DITAR_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, env=env)
    assert out.stdout.split()[0] == "False", out.stdout + out.stderr
    assert out.stdout.split()[1] == str(src)
    # ... and the package's own cache is what a second process reads (content-keyed, judge-written)
    out2 = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                          env={**env, "PYTHONDONTWRITEBYTECODE": ""})
    assert out2.stdout.split()[0] == "False", out2.stdout + out2.stderr
    assert any((tmp_path / "cache" / "bytecode").rglob("*")), "nothing cached"
    # without the package's loader, the interpreter would have taken the planted bytecode
    raw = ("import importlib.machinery as m, importlib.util as u, sys; p = sys.argv[1]; "
           "s = u.spec_from_file_location('x', p, loader=m.SourceFileLoader('x', p)); mod = u.module_from_spec(s); "
           "s.loader.exec_module(mod); print(getattr(mod, 'PLANTED', False))")
    assert subprocess.run([sys.executable, "-c", raw, str(src)], capture_output=True, text=True).stdout.strip() \
        == "True"


def test_planted_init_bytecode_is_named(tmp_path, monkeypatch):
    import importlib.util
    import marshal

    src = tmp_path / "__init__.py"
    src.write_text("X = 1\n")
    monkeypatch.setattr(stamps.pytest_ditar, "__file__", str(src))
    assert stamps.init_bytecode_problem() is None  # no bytecode at all
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir()
    pyc.write_bytes(bytes(16) + marshal.dumps(compile("X = 1\n", str(src), "exec", dont_inherit=True)))
    assert stamps.init_bytecode_problem() is None  # its source's own code
    pyc.write_bytes(bytes(16) + marshal.dumps(compile("X = 2\n", str(src), "exec", dont_inherit=True)))
    why = stamps.init_bytecode_problem()
    assert why and str(pyc) in why and f"rm {pyc}" in why


def test_rewrite_caches_are_dropped_but_venvs_are_not_walked(tmp_path):
    (tmp_path / "__pycache__").mkdir()
    mine = tmp_path / "__pycache__" / "conftest.cpython-311-pytest-9.0.2.pyc"
    mine.write_bytes(b"x")
    keep = tmp_path / "__pycache__" / "conftest.cpython-311.pyc"
    keep.write_bytes(b"x")
    venv = tmp_path / "env"
    (venv / "lib" / "__pycache__").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("")
    theirs = venv / "lib" / "__pycache__" / "t.cpython-311-pytest-9.0.2.pyc"
    theirs.write_bytes(b"x")
    assert stamps.drop_rewrite_caches(tmp_path) == [mine]
    assert keep.exists() and theirs.exists() and not mine.exists()


def test_the_import_closure_names_an_edited_module_and_planted_bytecode(tmp_path, monkeypatch):
    """loop.integrity.stamps.closure_stamp: every module file the judge loaded, by stat and content; a rewrite
    of the same bytes moves only the stat, and bytecode that is its source's own is no change."""
    import importlib.util
    import marshal

    from pytest_ditar.loop.integrity.stamps import closure_changes, closure_stamp

    mod = tmp_path / "site-packages" / "judged_dep.py"
    mod.parent.mkdir()
    mod.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(mod.parent))
    import judged_dep  # noqa: F401 - loaded, so stamped

    stamp = closure_stamp(tmp_path / "elsewhere")
    assert str(mod.resolve()) in stamp and closure_changes(stamp) == []
    mod.write_text("X = 1\n")  # the same bytes
    assert closure_changes(stamp) == []
    pyc = importlib.util.cache_from_source(str(mod.resolve()))
    Path(pyc).parent.mkdir(exist_ok=True)
    code = compile(mod.read_bytes(), str(mod.resolve()), "exec", dont_inherit=True)
    Path(pyc).write_bytes(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))  # its own: fine
    assert closure_changes(stamp) == []
    Path(pyc).write_bytes(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(compile("X = 2", "x", "exec")))
    assert [c for c in closure_changes(stamp) if "judged_dep" in c] == [f"{pyc} planted (not the bytecode of its "
                                                                        "source: delete it)"]
    Path(pyc).unlink()
    mod.write_text("X = 2\n")
    assert closure_changes(stamp) == [f"{mod.resolve()} changed"]
    sys.modules.pop("judged_dep", None)
