"""Compile-aware gates (issue 19, issue 24, issue 38): torch.compile's caches live in one folder per
tag and device, which every role (the candidate, the champion, its twin, the holdout's baseline)
sees at the same path through an overlay of its own sandbox: no role's write reaches it during a
run, and a kept candidate's writes join it afterwards (runtime.compiled), so the next champion
finds them warm; the folder lies outside the state the gate watches and backs up; each worker's
build time and the lanes' warm-up are reported apart; and a build may take longer than one
request's timeout.

A real Inductor compile is too slow for CI here (a two-op function took 54.5 s cold and 7.1 s warm
on the 2-core CI host while other tests ran), so the gated runs check the wiring with a candidate
whose build() does what a compiler does with the cache: reads the variables, finds the entries
earlier builds left, adds its own (of inductor's form: a module named by the hash of its source,
the only kind of file the judge adds to the cache: runtime.compiled), and replaces a scratch
folder. It says what it saw on its stdout, which the judge keeps beside the run (the sandbox lets
it write nowhere else outside).
"""
import json
import re
import shutil

import pytest

from candidates import REDUNDANT, STOCK
from conftest import REPO, research_project

CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE",
              "TORCHINDUCTOR_AUTOGRAD_CACHE")
MARK = "DITAR-TEST-CACHE "

RECORD = '''
def _use_the_compile_cache():
    import base64, hashlib, json, os, pathlib, shutil, time
    env = {{k: os.environ.get(k) for k in {keys!r}}}
    cache = pathlib.Path(env["TORCHINDUCTOR_CACHE_DIR"])
    before = sorted(p.name for p in cache.glob("??/c*.py"))
    name = f"{{os.getpid()}}-{{time.time_ns()}}"
    source = f"# compiled {{name}}\\n"
    key = "c" + base64.b32encode(hashlib.sha256(source.strip().encode()).digest())[:51].decode().lower()
    if {poison!r}:  # what the champion's side compiled, rewritten (in its own overlay's copy), and a
        for old in cache.glob("??/c*.py"):  # marker of its own for its later runs as the champion
            old.write_text("poisoned")
        (cache / "marker").write_text("kept once")
    (cache / key[1:3]).mkdir(parents=True, exist_ok=True)
    (cache / key[1:3] / f"{{key}}.py").write_text(source)
    name = f"{{key}}.py"
    # a folder an earlier build made goes, as a compiler's temporary folders do
    shutil.rmtree(cache / "scratch", ignore_errors=True)
    (cache / "scratch" / name).mkdir(parents=True)
    print({mark!r} + json.dumps({{"file": __file__, "env": env, "before": before, "wrote": name}}), flush=True)
'''


def _source(build_sleep_s: float = 0.0, note: str = "", base: str = STOCK, poison: bool = False) -> str:
    head, sep, body = base.partition("def build(")
    call = "    _use_the_compile_cache()\n" + (f"    import time; time.sleep({build_sleep_s})\n"
                                              if build_sleep_s else "")
    record = RECORD.format(keys=CACHE_VARS, mark=MARK, poison=poison)
    return head + record + "\n\n" + sep + body.replace(":\n", ":\n" + call, 1) + note


def _records(proj, sha: str) -> list[dict]:
    """What the builds of the run of `sha` printed, from the worker logs it kept (each with its
    log's name: the role, which the worker itself cannot know)."""
    out = []
    for log in sorted((proj.root / ".autoresearch/t/runs").glob(f"*-{sha[:7]}*/workers/*/*.log")):
        out += [{**json.loads(line[len(MARK):]), "log": log.stem} for line in log.read_text().splitlines()
                if line.startswith(MARK)]
    return out


def _entries(cache) -> dict:
    """The cache's entries of the simulated compiler (inductor's modules), name -> text."""
    return {p.name: p.read_text() for p in cache.glob("??/c*.py")}


def _summary(proj, sha: str) -> dict:
    for f in (proj.root / ".autoresearch/t/runs").glob("*/summary.json"):
        data = json.loads(f.read_text())
        if data["commit"] == sha:
            return data
    raise AssertionError(f"no summary.json for {sha}")


def _sides(proj, sha: str, champion_sha: str = "") -> tuple[dict, dict]:
    """(the champion's build record, the candidate's) of the run of `sha`, each the only one of its
    side; the champion's: the worker of `champion_sha` ("": any commit's)."""
    run = _records(proj, sha)
    champion = [r for r in run if r["log"].startswith(f"commit-{champion_sha[:7]}")]
    candidate = [r for r in run if r["log"] == "candidate"]
    assert len(champion) == 1 and len(candidate) == 1, run
    assert {r["file"] for r in run} == {"/run/ditar/code/mutable/pipeline.py"}  # every role's code at one path
    return champion[0], candidate[0]


def test_every_role_reads_the_compile_cache_and_none_writes_it_during_a_run(
        pytester, model_cache, tmp_path_factory):
    from pytest_ditar.hardware.cachekey import device_key

    proj = research_project(pytester, tmp_path_factory, mutable_source=_source())  # the champion uses it too
    cache = (proj.root / ".autoresearch/t/compile-cache" / device_key("cpu")).resolve()
    copied = set(_entries(cache))  # the baseline's, kept with it
    timeout = proj.config()["item_timeout_s"]
    assert proj.config().get("build_timeout_s", 1800) > timeout + 2  # the repository's 1800 s applies

    # Run 1: a build longer than a request's timeout (a cold compile) is not a timeout.
    sha1, res1, line1 = proj.experiment(_source(build_sleep_s=timeout + 2), "exact", "compile in build()")
    assert not line1.startswith("DITAR VERDICT: CRASH"), res1.stdout[-3000:]
    assert "timeout" not in line1 and "state directory damaged" not in res1.stdout, res1.stdout[-3000:]
    # Run 2: the same code again (a comment apart): neither side of run 1 left anything for it.
    sha2, res2, line2 = proj.experiment(_source(note="\n# again\n"), "exact", "the same, re-run")
    assert not line2.startswith("DITAR VERDICT: CRASH"), res2.stdout[-3000:]
    assert "state directory damaged" not in res2.stdout, res2.stdout[-3000:]
    assert not line1.startswith("DITAR VERDICT: KEEP") and not line2.startswith("DITAR VERDICT: KEEP")

    runs = []
    for sha in (sha1, sha2):
        for r in _records(proj, sha):  # one folder, at one path for every role
            assert r["env"] == {"TORCHINDUCTOR_CACHE_DIR": "/run/ditar/cache",
                                "TRITON_CACHE_DIR": "/run/ditar/cache/triton",
                                "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}, r
            assert set(r["before"]) == copied, r  # every role found the cache as kept: nobody's writes of this run
        runs.append(_sides(proj, sha))
    (champ1, cand1), (champ2, cand2) = runs
    written = {champ1["wrote"], cand1["wrote"], champ2["wrote"], cand2["wrote"]}
    assert not written & set(_entries(cache))  # not kept: no role's write joined the cache
    assert not written & {p.name for p in (cache / "scratch").iterdir()} if (cache / "scratch").is_dir() else True

    # A cache, not state: not in the backup ref, and the runs' verdicts were not about it.
    backed = proj.git("ls-tree", "-r", "--name-only", "refs/ditar/t").splitlines()
    assert backed and not [p for p in backed if "compile-cache" in p], backed

    # Build time per worker and the lanes' warm-up, apart from the timed rounds.
    t1 = _summary(proj, sha1)["timings"]
    champion_worker = f"worker_build.commit-{proj.ledger()[0]['commit'][:7]}"
    assert t1["worker_build.candidate"] >= timeout + 2 and 0 < t1[champion_worker] < t1["worker_build.candidate"], t1
    # the build's own account: a build that sleeps is wall without CPU, and the time line says so
    assert 0 <= t1["worker_build.candidate.build_cpu"] < t1["worker_build.candidate"] - timeout, t1
    assert t1["perf.warmup"] > 0 and t1["perf.warmup_champion"] > 0 and t1["perf.timed"] > t1["perf.warmup"]
    time_line = next(line for line in res1.stdout.splitlines() if line.startswith("ditar: time"))
    # the holdout's baseline builds in a worker of its own (never the champion's: issue 38)
    assert re.search(r"built in candidate [0-9.]+s \(cpu [0-9.]+s\) / commit-[0-9a-f]{7} [0-9.]+s"
                     r"( / holdout-[0-9a-f]{7} [0-9.]+s)?, warm-up [0-9.]+s \(champion and twin ", time_line), time_line


def test_a_kept_candidates_compilations_join_the_cache_and_a_discarded_ones_never_do(
        pytester, model_cache, tmp_path_factory):
    """Issue 29: the run after a compiled KEEP finds the new champion's compilations warm. The
    candidate's writes were kept outside its sandbox; on the KEEP the judge adds the names still
    free (never replacing what the champion's side wrote); on a DISCARD they are dropped."""
    from pytest_ditar.hardware.cachekey import device_key

    proj = research_project(pytester, tmp_path_factory, mutable_source=_source(base=REDUNDANT))
    cache = (proj.root / ".autoresearch/t/compile-cache" / device_key("cpu")).resolve()

    # Run 1: dropping the redundant pass is a real win; the candidate also rewrites the entries it found.
    sha1, res1, line1 = proj.experiment_judged(_source(poison=True), "exact", "Drop the redundant pass")
    assert line1.startswith("DITAR VERDICT: KEEP "), res1.stdout[-3000:]
    _champ1, cand1 = _sides(proj, sha1, proj.ledger()[0]["commit"])
    assert cand1["before"]  # it read the cache's entries through its overlay (the baseline's, kept) ...
    names = _entries(cache)
    assert cand1["wrote"] in names, names  # ... and, kept, its own entry joined the cache
    assert all(text.startswith("# compiled ") for text in names.values()), names  # what it rewrote did not
    assert not (cache / "marker").exists()  # nor its own file: not the compiler's (issue 49)
    assert re.search(r"^ditar: compile cache: [1-9]\d* files \([0-9.]+ MB\) the kept candidate compiled added to ",
                     res1.stdout, re.M), res1.stdout[-3000:]

    # Run 2: the pass added back is slower: DISCARD. The new champion's build finds run 1's entry.
    sha2, res2, line2 = proj.experiment(_source(base=REDUNDANT, note="\n# back\n"), "exact", "The pass again")
    assert line2.startswith("DITAR VERDICT: DISCARD "), res2.stdout[-3000:]
    champ2, cand2 = _sides(proj, sha2, sha1)
    assert cand1["wrote"] in champ2["before"], champ2
    assert cand2["wrote"] not in _entries(cache)  # the discarded candidate's: dropped
    assert "ditar: compile cache:" not in res2.stdout


def test_the_device_key_is_short_stable_and_apart_per_device_kind():
    from pytest_ditar.hardware.cachekey import device_key

    cpu = device_key("cpu")
    assert re.fullmatch(r"cpu-[0-9a-f]{10}", cpu) and device_key("cpu") == cpu
    cuda = device_key("cuda:0")
    assert cuda.startswith("cuda") and re.search(r"-[0-9a-f]{10}$", cuda) and cuda[-10:] != cpu[-10:]


def test_the_compile_cache_is_neither_watched_nor_backed_up(tmp_path):
    """The compiler makes and removes folders in the cache during a run: no digest, no folder
    watch (a vanished folder would read as a damaged state), no backup."""
    from pytest_ditar.store import statefiles
    from pytest_ditar.store.paths import TagPaths

    paths = TagPaths(tmp_path / "t")
    (paths.dir / "baseline").mkdir(parents=True)
    (paths.dir / "baseline/manifest.json").write_text("{}")
    (paths.dir / "ledger.jsonl").write_text("")
    entry = paths.compile_cache("cpu-0123456789") / "triton/abc/kernel.so"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"\0")
    assert paths.compile_cache("cpu-0123456789") == paths.dir / "compile-cache/cpu-0123456789"
    assert sorted(statefiles.watched(paths)) == ["baseline/manifest.json", "ledger.jsonl"]
    assert not [p for p in statefiles.backed_up(paths) if "compile-cache" in p]
    assert paths.dir / "baseline" in statefiles.folders(paths)
    assert not [d for d in statefiles.folders(paths) if "compile-cache" in d.parts]


@pytest.mark.parametrize("value,message", [(0, "must be a positive number of seconds"), ("ten", "must be a number")])
def test_build_timeout_is_checked_naming_the_file_and_key(tmp_path, value, message):
    from pytest_ditar.config.project import load_config
    from pytest_ditar.core.errors import ConfigError

    shutil.copytree(REPO / "suites/tiny", tmp_path / "suites/tiny")
    cfg = json.loads((REPO / "config/autoresearch.json").read_text())
    (tmp_path / "config").mkdir()
    path = tmp_path / "config/autoresearch.json"
    path.write_text(json.dumps(cfg))
    assert load_config(path).build_timeout_s == 1800.0
    path.write_text(json.dumps({**cfg, "build_timeout_s": value}))
    with pytest.raises(ConfigError, match=f"{re.escape(str(path))}: key 'build_timeout_s' {message}"):
        load_config(path)
