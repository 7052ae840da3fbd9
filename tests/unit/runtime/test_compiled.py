"""runtime.compiled: what a kept candidate compiled joins the tag's compile cache, adding only. The
attacks first: a candidate (kept, so its code is the champion's) must not replace what the
champion's side compiled, nor send the judge's write outside the cache through a link."""
import os
import stat

from pytest_ditar.runtime import compiled


def _tree(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_new_files_are_added_and_nothing_the_cache_holds_is_replaced(tmp_path):
    upper, cache = tmp_path / "upper", tmp_path / "cache"
    _tree(cache, {"fxgraph/ab/entry": "champion's", "triton/k1/kernel.so": "champion's"})
    _tree(upper, {"fxgraph/ab/entry": "candidate's (poisoned)", "fxgraph/cd/entry": "new",
                  "triton/k2/kernel.so": "new kernel"})
    assert compiled.promote(upper, cache) == compiled.Promoted(2, len("new") + len("new kernel"))
    assert (cache / "fxgraph/ab/entry").read_text() == "champion's"  # taken names stay the champion's
    assert (cache / "fxgraph/cd/entry").read_text() == "new"
    assert (cache / "triton/k2/kernel.so").read_text() == "new kernel"
    assert not [p for p in cache.rglob(".*ditar-*")]  # no temporary name left behind
    assert compiled.promote(upper, cache) == compiled.Promoted()  # a second time adds nothing


def test_what_does_not_fit_the_caches_bound_is_left_out_and_said(tmp_path):
    """A kept candidate that writes junk beside its kernels, or a loop of many KEEPs, cannot fill
    the disk: a file past the room left is not added (a smaller one after it may be), and the
    run's line says how much was left out and how to start the cache over."""
    upper, cache = tmp_path / "upper", tmp_path / "cache"
    _tree(cache, {"old/entry": "x" * 40})
    _tree(upper, {"a/big": "b" * 70, "b/small": "s" * 20, "old/entry": "y" * 500})
    room = 100 - compiled.size_of(cache)  # a bound of 100 bytes: 60 left
    done = compiled.promote(upper, cache, room)
    assert done == compiled.Promoted(files=1, bytes=20, left_files=1, left_bytes=70)  # the taken name is no loss
    assert not (cache / "a/big").exists() and (cache / "b/small").read_text() == "s" * 20
    assert compiled.size_of(cache) == 60 and (cache / "old/entry").read_text() == "x" * 40
    line = done.note(cache)
    assert line.startswith(f"ditar: compile cache: 1 files (0.0 MB) the kept candidate compiled added to {cache}; ")
    assert "1 files (0.0 MB) left out: the cache is bounded at 2.0 GiB (delete the folder" in line, line
    assert compiled.Promoted().note(cache) is None  # nothing to say
    assert compiled.promote(upper, cache, 0) == compiled.Promoted(left_files=1, left_bytes=70)  # no room at all


def test_links_fifos_and_whiteouts_are_skipped(tmp_path):
    upper, cache, outside = tmp_path / "upper", tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    _tree(upper, {"ok/file": "y"})
    (upper / "link").symlink_to(outside / "secret")  # a link to a file outside
    (upper / "linkdir").symlink_to(outside, target_is_directory=True)  # and to a folder outside
    os.mkfifo(upper / "fifo")
    try:  # the overlay's whiteout of a deleted name: a 0/0 character device (needs CAP_MKNOD)
        os.mknod(upper / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    except PermissionError:
        pass
    assert compiled.promote(upper, cache) == compiled.Promoted(1, 1)
    assert sorted(p.name for p in cache.iterdir()) == ["ok"]


def test_a_link_planted_in_the_cache_cannot_send_the_write_elsewhere(tmp_path):
    """The champion's side writes the cache: it could make a folder of it a link to, say, the
    project's .git/hooks, for the judge to write the kept candidate's file through."""
    upper, cache, hooks = tmp_path / "upper", tmp_path / "cache", tmp_path / "hooks"
    hooks.mkdir()
    cache.mkdir()
    (cache / "entries").symlink_to(hooks, target_is_directory=True)
    _tree(upper, {"entries/post-commit": "#!/bin/sh\nrm -rf ~", "other/file": "fine"})
    assert compiled.promote(upper, cache) == compiled.Promoted(1, 4)
    assert not list(hooks.iterdir()) and (cache / "other/file").read_text() == "fine"


def test_a_missing_upper_adds_nothing_and_remove_clears_the_overlays_locked_work_folder(tmp_path):
    assert compiled.promote(tmp_path / "absent", tmp_path / "cache") == compiled.Promoted()
    kept = tmp_path / "kept"
    (kept / "work/work").mkdir(parents=True)
    (kept / "upper").mkdir()
    (kept / "work/work").chmod(0)  # as the overlay leaves it
    compiled.remove(kept)
    assert not kept.exists()
