"""runtime.compiled: what a kept candidate compiled joins the tag's compile cache, adding only. The
attacks first: a candidate (kept, so its code is the champion's) must not replace what the
champion's side compiled, nor send the judge's write outside the cache through a link, nor leave a
file of its own there (a marker its later runs as the champion read to slow themselves: issue 49)."""
import os
import stat

from pytest_ditar.runtime import compiled


def _tree(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _key(prefix: str, seed: str) -> str:
    """A name of inductor's form: a letter, then 51 base32 characters."""
    return prefix + compiled.content_hash(seed.encode())


def so(seed: str) -> str:
    """A shared object's path in inductor's layout (its 2nd and 3rd characters name its folder)."""
    k = _key("c", seed)
    return f"{k[1:3]}/{k}.so"


def py(text: str) -> str:
    """Inductor's module for `text`: named by the hash of its stripped source."""
    k = "c" + compiled.content_hash(text.strip().encode())
    return f"{k[1:3]}/{k}.py"


def graph(seed: str, content: str) -> str:
    """An FX-graph cache entry: its key's folder, then the hash of its content."""
    k = _key("f", seed)
    return f"fxgraph/{k[1:3]}/{k}/{compiled.content_hash(content.encode())}"


KERNEL = "triton/ABCDEFGHIJKLMNOPQRSTUVWXYZ234567/triton_poi_fused_add_0"


def test_new_files_are_added_and_nothing_the_cache_holds_is_replaced(tmp_path):
    upper, cache = tmp_path / "upper", tmp_path / "cache"
    _tree(cache, {so("k1"): "champion's", f"{KERNEL}.cubin": "champion's"})
    _tree(upper, {so("k1"): "candidate's (poisoned)", graph("g", "new"): "new", py("x = 1\n"): "x = 1\n",
                  f"{KERNEL}.cubin": "poisoned", f"{KERNEL}.json": "new kernel"})
    assert compiled.promote(upper, cache) == compiled.Promoted(3, len("new") + len("x = 1\n") + len("new kernel"))
    assert (cache / so("k1")).read_text() == "champion's"  # taken names stay the champion's
    assert (cache / f"{KERNEL}.cubin").read_text() == "champion's"
    assert (cache / graph("g", "new")).read_text() == "new" and (cache / py("x = 1\n")).is_file()
    assert (cache / f"{KERNEL}.json").read_text() == "new kernel"
    assert not [p for p in cache.rglob(".*ditar-*")]  # no temporary name left behind
    assert compiled.promote(upper, cache) == compiled.Promoted()  # a second time adds nothing


def test_a_file_that_is_no_compiler_output_is_never_added(tmp_path):
    """A KEEP run's candidate writes a marker beside what it compiled; the kept code, as the
    champion of every later run, would find it and slow itself. Only the compiler's own files go
    in: its layout, and its content's hash where it names a file by that."""
    upper, cache = tmp_path / "upper", tmp_path / "cache"
    good = so("kernel")
    _tree(upper, {good: "compiled",
                  "marker": "kept once", "triton/marker.json": "x", ".hidden": "x",  # no layout of the compiler's
                  f"{good[:3]}marker.so": "x", f"{KERNEL}.marker": "x",  # a folder of its, a name or suffix not
                  py("x = 1\n"): "x = 2\n",  # a module whose name is not the hash of its source
                  graph("g", "real entry"): "marker",  # an entry whose content is not the one it is named by
                  "fxgraph/ab/notakey/" + compiled.content_hash(b"m"): "m",
                  f"locks/{_key('c', 'kernel')}.lock": ""})  # the compiler's lock: not needed, not counted
    done = compiled.promote(upper, cache)
    assert done == compiled.Promoted(files=1, bytes=len("compiled"), foreign_files=8), done
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) == [good]
    assert done.note(cache).endswith("; 8 files that are no compiler output not added"), done.note(cache)


def test_what_does_not_fit_the_caches_bound_is_left_out_and_said(tmp_path):
    """A kept candidate that writes junk beside its kernels, or a loop of many KEEPs, cannot fill
    the disk: a file past the room left is not added (a smaller one after it may be), and the
    run's line says how much was left out and how to start the cache over."""
    upper, cache = tmp_path / "upper", tmp_path / "cache"
    big, small, old = so("a"), so("b"), so("old")
    _tree(cache, {old: "x" * 40})
    _tree(upper, {big: "b" * 70, small: "s" * 20, old: "y" * 500})
    room = 100 - compiled.size_of(cache)  # a bound of 100 bytes: 60 left
    done = compiled.promote(upper, cache, room)
    assert done == compiled.Promoted(files=1, bytes=20, left_files=1, left_bytes=70)  # the taken name is no loss
    assert not (cache / big).exists() and (cache / small).read_text() == "s" * 20
    assert compiled.size_of(cache) == 60 and (cache / old).read_text() == "x" * 40
    line = done.note(cache)
    assert line.startswith(f"ditar: compile cache: 1 files (0.0 MB) the kept candidate compiled added to {cache}; ")
    assert "1 files (0.0 MB) left out: the cache is bounded at 2.0 GiB (delete the folder" in line, line
    assert compiled.Promoted().note(cache) is None  # nothing to say
    assert compiled.promote(upper, cache, 0) == compiled.Promoted(left_files=1, left_bytes=70)  # no room at all


def test_links_fifos_and_whiteouts_are_skipped(tmp_path):
    upper, cache, outside = tmp_path / "upper", tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    ok = so("ok")
    _tree(upper, {ok: "y"})
    folder = upper / ok.split("/")[0]
    (folder / f"{_key('c', 'link')}.so").symlink_to(outside / "secret")  # a link to a file outside
    (upper / "linkdir").symlink_to(outside, target_is_directory=True)  # and to a folder outside
    os.mkfifo(folder / f"{_key('c', 'fifo')}.so")
    try:  # the overlay's whiteout of a deleted name: a 0/0 character device (needs CAP_MKNOD)
        os.mknod(folder / f"{_key('c', 'whiteout')}.so", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    except PermissionError:
        pass
    assert compiled.promote(upper, cache) == compiled.Promoted(1, 1)
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) == [ok.split("/")[0], ok]


def test_a_link_planted_in_the_cache_cannot_send_the_write_elsewhere(tmp_path):
    """The champion's side writes the cache: it could make a folder of it a link to, say, the
    project's .git/hooks, for the judge to write the kept candidate's file through."""
    upper, cache, hooks = tmp_path / "upper", tmp_path / "cache", tmp_path / "hooks"
    hooks.mkdir()
    cache.mkdir()
    planted, other = so("post-commit"), so("other")
    assert planted.split("/")[0] != other.split("/")[0]
    (cache / planted.split("/")[0]).symlink_to(hooks, target_is_directory=True)
    _tree(upper, {planted: "#!/bin/sh\nrm -rf ~", other: "fine"})
    assert compiled.promote(upper, cache) == compiled.Promoted(1, 4)
    assert not list(hooks.iterdir()) and (cache / other).read_text() == "fine"


def test_a_missing_upper_adds_nothing_and_remove_clears_the_overlays_locked_work_folder(tmp_path):
    assert compiled.promote(tmp_path / "absent", tmp_path / "cache") == compiled.Promoted()
    kept = tmp_path / "kept"
    (kept / "work/work").mkdir(parents=True)
    (kept / "upper").mkdir()
    (kept / "work/work").chmod(0)  # as the overlay leaves it
    compiled.remove(kept)
    assert not kept.exists()
