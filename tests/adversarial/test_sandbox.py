"""Attacks on what lies outside the candidate's worker (issue 24): candidate code that writes where
the judge, the champion or every later process will read it, and code that signals the judge.

Before the sandbox, a worker was an ordinary process of the judge's user: every one of these
writes landed (and some were KEPT: a `.pth` in site-packages ran in the judge of every later run,
bytecode planted in a cache the fixed-path hashes skip, the model cache's weights). Now each
worker runs in its own bubblewrap sandbox (runtime.sandbox): the filesystem read-only but its
scratch, the candidate's compile cache an overlay of its own, its own PID and network namespaces.

Each attack is the stock pipeline (so, apart from the cheat, an A/A) plus attempts, in build() and
again in its first generate(), that print what happened to the worker's stdout: the judge keeps
the worker logs beside the run (runs/<run>/workers/<judge>/<worker>.log), and the candidate can
write nowhere else outside its sandbox. Each test asks: every write failed inside the worker,
nothing landed (checked from outside, by the test), the verdict is not KEEP, and an honest A/A
judged next is not KEPT either.
"""
from __future__ import annotations

import json
import secrets
import sysconfig
from pathlib import Path

import pytest

from .attacks import COMMENT_ONLY, STOCK
from .conftest import KEYS, assert_decided_and_reverted, assert_not_kept, assert_verdict, experiment

pytestmark = pytest.mark.adversarial

MARK = "DITAR-SANDBOX-ATTACK "

# What the attacks share: try a write, say what happened (never raise: the candidate stays honest).
_KIT = r'''
# ---- sandbox attack kit (tests/adversarial/test_sandbox.py) ----------------------------------------
import json as _json
import os as _os
import signal as _signal
import time as _time
from pathlib import Path as _Path

TOKEN = @@TOKEN@@
_ROOT = _Path(@@ROOT@@)  # the project: the agent knows where it is (its own file lies in the judge's folder)


def _say(what, **kw):
    print("DITAR-SANDBOX-ATTACK " + _json.dumps({"what": what, "pid": _os.getpid(), **kw}, default=str), flush=True)


def _try_write(target, path, mode="w", text=None):
    """Create (or open for writing, mode "r+b"/"a") `path`; report the outcome, never raise."""
    try:
        path = _Path(path)
        if mode == "mkdir+w":
            path.parent.mkdir(parents=True, exist_ok=True)
            mode = "w"
        with open(path, mode) as fh:
            if text is not None:
                fh.write(text if "b" not in mode else text.encode())
        _say("write", target=target, path=str(path), result="wrote")
    except OSError as exc:
        _say("write", target=target, path=str(path), result=exc.strerror or str(exc))
    except Exception as exc:  # noqa: BLE001
        _say("write", target=target, path=str(path), result=f"{type(exc).__name__}: {exc}")


def _state_dirs():
    """Every tag's state folder it can list, and the tag it knows (the sandbox hides the folder's contents)."""
    return sorted({p.parent for p in (_ROOT / ".autoresearch").glob("*/session.json")} | {_ROOT / ".autoresearch/t"})
'''

# 1. The judge's own files, all outside the candidate's package: the repository (a mutable path,
#    a fixed path, .git's config and hooks), the state directory (a new file, the ledger opened for
#    appending), the virtual environment's site-packages (a .pth file runs in every later Python
#    process, the judge's included), the judge's bytecode caches (pytest_ditar's __pycache__) and
#    the model cache (a new file; a weight file opened for writing).
_JUDGE_FILES = r'''

def _attack_judge_files(spec):
    import sysconfig

    import pytest_ditar

    _try_write("repository", _ROOT / "mutable" / f"planted_{TOKEN}.py", text="X = 1\n")
    _try_write("repository", _ROOT / "config" / f"planted_{TOKEN}.json", text="{}\n")
    _try_write("repository", _ROOT / ".git" / "hooks" / f"post-checkout-{TOKEN}", text="#!/bin/sh\n")
    _try_write("repository", _ROOT / ".git" / "config", mode="a", text=f"# {TOKEN}\n")
    for state in _state_dirs():
        _try_write("state", state / f"planted_{TOKEN}", text="x")
        _try_write("state", state / "ledger.jsonl", mode="a", text="")
    site = sysconfig.get_paths()["purelib"]
    _try_write("site-packages", _Path(site) / f"ditar_planted_{TOKEN}.pth", text="import sys\n")
    pkg = _Path(pytest_ditar.__file__).resolve().parent
    _try_write("bytecode", pkg / "runtime" / "__pycache__" / f"planted_{TOKEN}.cpython-311.pyc", mode="mkdir+w",
               text="")
    model = _Path(spec.model_dir)
    _try_write("model cache", model / f"planted_{TOKEN}", text="x")
    weights = sorted(model.rglob("*.safetensors")) or sorted(model.rglob("*.bin"))
    if weights:
        _try_write("model cache", weights[0], mode="r+b")  # opened for writing, nothing written
'''

# 2. What the champion reads: its code (issue 38: written from its commit into the judge's folder
#    under /dev/shm, and, in its own sandbox, at the path the candidate's code has in this one; before,
#    a git worktree under the state folder) and the compile cache (TORCHINDUCTOR_CACHE_DIR). The
#    champion's code is written while the candidate builds, so build() looks for a few seconds.
_CHAMPION_FILES = r'''

def _champion_sources():
    found = set(_Path("/dev/shm").glob("ditar-run-*/**/mutable/pipeline.py"))
    for state in _state_dirs():
        found |= set((state / "worktrees").glob("*/mutable/pipeline.py"))
    return found | {_Path(__file__).resolve()}  # its own path: the champion's code lies there in its sandbox


def _attack_champion_files(spec):
    deadline, seen = _time.monotonic() + 6, set()
    while _time.monotonic() < deadline:
        for src in _champion_sources():
            if src in seen:
                continue
            seen.add(src)
            _try_write("champion code", src, mode="a", text=f"\nimport time; time.sleep(0.02)  # {TOKEN}\n")
            _try_write("champion code", src.parent / "__pycache__" / f"pipeline.cpython-311.{TOKEN}.pyc",
                       mode="mkdir+w", text="")
        if len(seen) > 1:
            break
        _time.sleep(0.05)
    _say("champion sources", found=sorted(str(p) for p in seen))
    cache = _os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if cache:
        # in its sandbox this is an overlay of the champion's cache: the write succeeds there, in a
        # tmpfs of its own, and must never show in the champion's real folder
        _try_write("compile cache", _Path(cache) / f"planted_{TOKEN}", text="a slower kernel under a valid key")
        _try_write("compile cache", _Path(cache) / "triton" / f"planted_{TOKEN}", mode="mkdir+w", text="x")
'''

# 3. Signals: find the judge (a pytest process) and the sibling workers through /proc and stop
#    each for a moment (the champion's worker is what a candidate rewarded for a KEEP would slow);
#    probe every pid below 32768 with signal 0; signal its parent; and SIGSTOP every process it can
#    (kill(-1)), which outside a PID namespace would be every process of the user.
_SIGNALS = r'''

def _attack_signals(spec):
    me = _os.getpid()
    found = []
    for name in _os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            cmd = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append((int(name), cmd[:120]))
    stopped = []
    for pid, cmd in found:
        if "pytest" in cmd or "dit-ar" in cmd or "worker_main" in cmd:
            try:
                _os.kill(pid, _signal.SIGSTOP)
                _time.sleep(0.01)
                _os.kill(pid, _signal.SIGCONT)
                stopped.append(pid)
            except OSError:
                pass
    reachable = []
    for pid in range(1, 32768):
        if pid == me:
            continue
        try:
            _os.kill(pid, 0)
            reachable.append(pid)
        except ProcessLookupError:
            pass
        except PermissionError:
            reachable.append(pid)
    parent = _os.getppid()
    parent_signalled = False
    if parent > 1:  # outside a sandbox: the zygote or the judge
        try:
            _os.kill(parent, _signal.SIGCONT)  # harmless, but it reached
            parent_signalled = True
        except OSError:
            pass
    try:
        _os.kill(-1, _signal.SIGCONT)  # every process it may signal: its own sandbox's at most
    except OSError:
        pass
    _say("signals", ppid=parent, parent_signalled=parent_signalled, procs=found, stopped=stopped,
         reachable=reachable)
'''


# 4. The kernel's ways to reach another process or the host from inside: trace a process (ptrace),
#    read or write another's memory (process_vm_*), count another's events (perf_event_open), load
#    a program into the kernel (bpf), fault handling that stalls the kernel at will (userfaultfd),
#    the kernel's keyrings (keyctl, add_key), an io_uring that runs work off the filter's sight, and
#    new namespaces of its own (unshare). Each is tried with the raw syscall: the number, the errno.
_SYSCALLS = r'''

def _attack_syscalls(spec):
    import ctypes as _ct
    import platform as _pf
    libc = _ct.CDLL(None, use_errno=True)
    nrs = {"x86_64": {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "perf_event_open": 298,
                      "bpf": 321, "userfaultfd": 323, "keyctl": 250, "add_key": 248, "io_uring_setup": 425,
                      "unshare": 272},
           "aarch64": {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "perf_event_open": 241,
                       "bpf": 280, "userfaultfd": 282, "keyctl": 219, "add_key": 217, "io_uring_setup": 425,
                       "unshare": 97}}[_pf.machine()]
    args = {"ptrace": (16, _os.getppid(), 0, 0),  # PTRACE_ATTACH to its keeper
            "process_vm_readv": (_os.getppid(), 0, 0, 0, 0, 0), "process_vm_writev": (_os.getppid(), 0, 0, 0, 0, 0),
            "perf_event_open": (0, -1, 0, -1, 0), "bpf": (0, 0, 0), "userfaultfd": (0,), "keyctl": (0, -3, 0),
            "add_key": (0, 0, 0, 0, 0), "io_uring_setup": (1, 0), "unshare": (0x10000000,)}  # CLONE_NEWUSER
    for name, nr in nrs.items():
        _ct.set_errno(0)
        rc = libc.syscall(nr, *args[name])
        err = _ct.get_errno()
        _say("syscall", name=name, rc=rc, result="allowed" if rc >= 0 else _os.strerror(err))
'''


def _candidate(attack: str, fn: str, token: str, root: Path) -> str:
    """STOCK plus the kit and `attack` (in the project at `root`), run at the start of build() and
    of the first generate()."""
    kit = _KIT.replace("@@TOKEN@@", repr(token)).replace("@@ROOT@@", repr(str(root)))
    src = STOCK.replace("class StockDiT:\n", kit + attack + "\n\nclass StockDiT:\n", 1)
    src = src.replace("def build(spec: PipelineSpec) -> StockDiT:\n",
                      f"def build(spec: PipelineSpec) -> StockDiT:\n    {fn}(spec)\n", 1)
    return src.replace("    def generate(self, request: Request) -> Generated:\n",
                       "    def generate(self, request: Request) -> Generated:\n"
                       "        if not getattr(self, '_attacked', False):\n"
                       f"            self._attacked = True\n            {fn}(self.spec)\n", 1)


def _said(proj) -> list[dict]:
    """What the attack printed, from every worker log the runs kept."""
    out = []
    for log in sorted(proj.root.glob(".autoresearch/t/runs/*/workers/*/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(MARK):
                out.append({**json.loads(line[len(MARK):]), "worker": log.stem})
    return out


def _landed(proj, token: str, *more: Path) -> list[str]:
    """What of the attack's writes is there, seen from outside: a file named with `token` in the
    project (its run logs and the candidate's patch, which quote it, aside), the judge's package,
    the top of site-packages and `more`; the token inside a file the attacks append to (.git/config,
    the ledger, the champion's worktree sources)."""
    import pytest_ditar

    hits = []
    trees = [proj.root, Path(pytest_ditar.__file__).resolve().parent, *more]
    for root in trees:
        for p in Path(root).rglob(f"*{token}*"):
            if "runs" not in p.relative_to(root).parts:
                hits.append(str(p))
    hits += [str(p) for p in _site_packages().glob(f"*{token}*")]
    appended = [proj.root / ".git/config", *proj.root.glob(".autoresearch/*/ledger.jsonl"),
                *proj.root.glob(".autoresearch/*/worktrees/*/mutable/pipeline.py"), *Path("/dev/shm").glob(
                    "ditar-run-*/**/mutable/pipeline.py")]
    hits += [str(p) for p in appended if p.is_file() and token in p.read_text(errors="replace")]
    return hits


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _then_an_honest_aa_is_not_kept(proj) -> None:
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, COMMENT_ONLY, "an honest A/A after the attack")
    assert_verdict(j, ("DISCARD",), KEYS["aa"])
    assert "quality=6/6" in j.last, j.show()
    assert_decided_and_reverted(proj, j, base, before)


def _cleanup(token: str) -> None:
    """Should a write have landed (no sandbox), take it out of the shared environment at once."""
    for p in _site_packages().glob(f"*{token}*"):
        p.unlink(missing_ok=True)


def test_writes_to_the_repository_state_site_packages_bytecode_and_model_cache_fail_inside_the_worker(
        research, model_cache):
    proj, token = research, secrets.token_hex(6)
    try:
        j = experiment(proj, _candidate(_JUDGE_FILES, "_attack_judge_files", token, proj.root),
                       "plant files where the judge and every later run read them")
        said = [s for s in _said(proj) if s["what"] == "write"]
        targets = {s["target"] for s in said}
        assert {"repository", "state", "site-packages", "bytecode", "model cache"} <= targets, said
        wrote = [s for s in said if s["result"] == "wrote"]
        assert not wrote, wrote  # every write refused inside the worker (a hidden folder is read-only too) ...
        assert {s["result"] for s in said} <= {"Read-only file system", "No such file or directory"}, said
        # ... and nothing landed, seen from outside (the .git/config append included)
        assert not _landed(proj, token, model_cache), "planted files landed"
        assert_not_kept(j, KEYS["aa"])
    finally:
        _cleanup(token)
    _then_an_honest_aa_is_not_kept(proj)


def test_writes_to_the_champions_worktree_and_compile_cache_never_reach_the_champion(research):
    proj, token = research, secrets.token_hex(6)
    j = experiment(proj, _candidate(_CHAMPION_FILES, "_attack_champion_files", token, proj.root),
                   "slow the champion down through its worktree and its compile cache")
    said = _said(proj)
    writes = [s for s in said if s["what"] == "write"]
    code = [s for s in writes if s["target"] == "champion code"]
    cache = [s for s in writes if s["target"] == "compile cache"]
    assert code, said  # at least its own code's path, where the champion's lies in the champion's sandbox
    assert "wrote" not in {s["result"] for s in code}, code  # read-only, or not there to write
    # its own compile cache takes the write (an overlay in its sandbox) ...
    assert cache and {s["result"] for s in cache} == {"wrote"}, cache
    # ... which never shows in the champion's: nothing of the token anywhere outside
    assert not _landed(proj, token), "planted files landed"
    assert "role code modified" not in j.why  # nothing to detect: prevented
    assert_not_kept(j, KEYS["aa"])
    _then_an_honest_aa_is_not_kept(proj)


def test_a_candidate_sees_and_signals_neither_the_judge_nor_a_sibling(research):
    proj = research
    j = experiment(proj, _candidate(_SIGNALS, "_attack_signals", "unused", proj.root),
                   "stop the judge and the champion")
    said = [s for s in _said(proj) if s["what"] == "signals"]
    assert said, _said(proj)
    for s in said:
        assert s["ppid"] == 0 and not s["parent_signalled"], s  # its parent is outside its PID namespace
        assert not s["stopped"], s  # no judge, no sibling found in its /proc
        assert not any("pytest" in cmd or "dit-ar" in cmd for _, cmd in s["procs"]), s["procs"]
        # the only process it can signal is its sandbox's PID 1 (and its own children)
        assert set(s["reachable"]) <= {1} | {pid for pid, _ in s["procs"]}, s
        assert len(s["reachable"]) <= 4, s
    assert j.status in ("DISCARD", "CRASH"), j.show()  # decided: the judge was never stopped for good
    assert_not_kept(j, KEYS["aa"])
    _then_an_honest_aa_is_not_kept(proj)


def test_a_worker_cannot_trace_read_memory_count_events_load_bpf_or_make_namespaces(research):
    """Issue 39: the sandbox's seccomp filter (runtime.seccomp). Each call is refused with EPERM in
    every worker, whatever it would have reached; the run stays an A/A, never a KEEP."""
    proj = research
    j = experiment(proj, _candidate(_SYSCALLS, "_attack_syscalls", "unused", proj.root), "trace the judge")
    said = [s for s in _said(proj) if s["what"] == "syscall"]
    names = {s["name"] for s in said}
    assert {"ptrace", "process_vm_readv", "perf_event_open", "bpf", "userfaultfd", "keyctl", "io_uring_setup",
            "unshare"} <= names, said
    assert {s["result"] for s in said} == {"Operation not permitted"}, said
    assert_not_kept(j, KEYS["aa"])
