"""A disk that fills during a gated run (issue 39): wherever the judge's writes meet the full disk,
the run ends with one verdict or one REFUSED line (exit 4), the state the run began with stays
whole (the ledger's chain verifies, `dit-ar status` is healthy), and once space is back the next
run is judged as any other.

The disk is real: `dit-ar experiment` runs in a user and mount namespace (`unshare -Urm`) where the
project lies on a tmpfs of its own, filled to leave a given number of bytes free. The free space is
swept from nothing to the record's room (store.space) and beyond, filled from the moment the run's
folder appears, as another process filling the disk would: the judge refuses before the first byte
of a record it has no room for, and records whole where it has. Afterwards the project is copied
back out of the namespace, as a person who freed space would find it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ditar.store.space import RECORD_BYTES

from candidates import ALTERS, COMMENT_ONLY

FILL = ".git/ditar-test-fill"  # inside .git: no worktree file, nothing git or the judge reads


def _namespaces_mount_tmpfs() -> bool:
    if not shutil.which("unshare"):
        return False
    res = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                         capture_output=True)
    return res.returncode == 0


needs_userns = pytest.mark.skipif(not _namespaces_mount_tmpfs(),
                                  reason="no unprivileged user and mount namespaces here (unshare -Urm)")


def _du(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _on_a_small_disk(proj, free: int, *args: str, running: bool = False,
                     timeout: float = 300) -> subprocess.CompletedProcess:
    """`dit-ar args` with the project on a tmpfs left with `free` bytes: from the start, or (`running`)
    from the moment the run's folder appears, as another process filling the disk would; the project
    copied back out afterwards."""
    root = proj.root
    work = root.parent / f"{root.name}-disk"
    shutil.rmtree(work, ignore_errors=True)
    (work / "stash").mkdir(parents=True)
    (work / "back").mkdir()
    size_kib = (_du(root) + 64 * 2**20) // 1024
    exe = shutil.which("dit-ar")
    script = f"""
set -e
cp -a "$ROOT/." "$WORK/stash/"
mount -t tmpfs -o size={size_kib}k tmpfs "$ROOT"
cp -a "$WORK/stash/." "$ROOT/"
fill() {{  # to `free` bytes left, within 64 KiB, whatever the run writes meanwhile
  i=0
  while [ $i -lt 50 ]; do
    fill=$(( $(stat -f -c '%a*%S' "$ROOT") - {free} ))
    [ "$fill" -gt 65536 ] || break
    fallocate -l "$fill" "$ROOT/{FILL}.$i" 2>/dev/null || rm -f "$ROOT/{FILL}.$i"
    i=$((i + 1))
  done
}}
runs="$ROOT/.autoresearch/t/runs"
before=$(ls "$runs" 2>/dev/null | wc -l)
[ {int(running)} = 1 ] || fill
set +e
(cd "$ROOT" && "{exe}" --config config/autoresearch.json "$@" > "$WORK/out" 2> "$WORK/err"; echo $? > "$WORK/rc") &
job=$!
if [ {int(running)} = 1 ]; then
  while kill -0 $job 2>/dev/null && [ "$(ls "$runs" 2>/dev/null | wc -l)" -le "$before" ]; do sleep 0.05; done
  fill
fi
wait $job
rm -f "$ROOT/{FILL}".*
cp -a "$ROOT/." "$WORK/back/"
"""
    env = {**__import__("os").environ, "ROOT": str(root), "WORK": str(work)}
    subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", *args], env=env, timeout=timeout, check=True)
    for p in list(root.iterdir()):  # space is back: the project as the full disk left it
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    shutil.copytree(work / "back", root, symlinks=True, dirs_exist_ok=True)
    rc = int((work / "rc").read_text())
    res = subprocess.CompletedProcess(args, rc, (work / "out").read_text(), (work / "err").read_text())
    shutil.rmtree(work)
    return res


def _runs(proj) -> list[str]:
    runs = proj.root / ".autoresearch/t/runs"
    return sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []


def _healthy(proj) -> None:
    st = proj.ditar("status")
    assert st.returncode == 0 and "hash chain verifies" in st.stdout, st.stdout[-3000:] + st.stderr[-2000:]


def _one_verdict_or_one_refusal(res) -> str:
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("DITAR ")]
    assert len(lines) == 1 and res.stdout.strip().splitlines()[-1] == lines[0], res.stdout[-3000:] + res.stderr[-3000:]
    line = lines[0]
    if line.startswith("DITAR REFUSED: "):
        assert res.returncode == 4, (res.returncode, line, res.stderr[-4000:])
        assert line.startswith("DITAR REFUSED: disk full"), line
    else:
        assert line.startswith("DITAR VERDICT: "), line
    assert "Traceback" not in res.stdout + res.stderr, res.stdout[-3000:] + res.stderr[-3000:]
    return line


def _judged_once_space_is_back(proj, sha: str, base: str, note: str) -> None:
    if proj.head() == sha:  # refused: the same commit, judged now
        res = proj.ditar("experiment", "--classification", "exact", "--description", f"again {note}")
    else:
        _, res, _ = proj.experiment(ALTERS + f"\n# again {note}\n", "exact", f"again {note}")
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=0/6" in line, res.stdout[-3000:]
    assert proj.head() == base
    _healthy(proj)


@needs_userns
def test_a_run_that_starts_on_a_full_disk_is_refused_before_anything_runs(research):
    proj = research
    base = proj.head()
    ledger, runs = proj.ledger(), _runs(proj)
    sha = proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    res = _on_a_small_disk(proj, 1 << 20, "experiment", "--classification", "exact", "--description", "full")
    line = _one_verdict_or_one_refusal(res)
    assert line.startswith("DITAR REFUSED: disk full: 1.0 MiB free on the disk of ") and "32 MiB" in line, line
    assert proj.ledger() == ledger and proj.head() == sha and _runs(proj) == runs
    _healthy(proj)
    _judged_once_space_is_back(proj, sha, base, "start")


@needs_userns
def test_a_disk_that_fills_at_each_of_the_judges_writes_leaves_the_state_whole_and_the_next_run_judged(research):
    proj = research
    base = proj.head()
    # the run's growth on a roomy disk: a DISCARD (run folder, logs, summary, ledger row, backup, revert)
    before = _du(proj.root)
    proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    roomy = _on_a_small_disk(proj, 1 << 40, "experiment", "--classification", "exact", "--description", "roomy")
    assert roomy.stdout.strip().splitlines()[-1].startswith("DITAR VERDICT: DISCARD"), roomy.stdout[-3000:]
    growth = _du(proj.root) - before
    assert growth > 0 and proj.head() == base
    _healthy(proj)
    seen = []
    # free from the moment the run starts: nothing, part of a run's growth, short of the record's
    # room, and the record's room with the growth to spare
    for n, free in enumerate((0, growth // 2, RECORD_BYTES - (1 << 20), RECORD_BYTES + 4 * growth)):
        rows = len(proj.ledger())
        sha = proj.commit_candidate(ALTERS + f"\n# {n}\n", "exact", f"Lower guidance, {n}")
        res = _on_a_small_disk(proj, free, "experiment", "--classification", "exact", "--description", f"d{n}",
                               running=True)
        line = _one_verdict_or_one_refusal(res)
        seen.append(line)
        _healthy(proj)  # the state the run began with, or the run recorded whole
        ledger = proj.ledger()
        if line.startswith("DITAR REFUSED: "):
            assert len(ledger) == rows, ledger[-1]  # nothing recorded ...
        else:
            assert len(ledger) == rows + 1 and ledger[-1]["commit"] == sha, res.stdout[-4000:]  # ... or all of it
        _judged_once_space_is_back(proj, sha, base, str(n))
    assert [s.split(":")[0] for s in seen] == ["DITAR REFUSED"] * 3 + ["DITAR VERDICT"], seen
    _, res, line = proj.experiment(COMMENT_ONLY, "exact", "same code")
    assert line.startswith("DITAR VERDICT: DISCARD"), res.stdout[-3000:]
