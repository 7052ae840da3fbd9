"""What a worker can make the judge hold or keep (issue 39): a worker that dies inside build() was
noticed only at the build timeout (1,800 s by default: the judge kept its copy of the worker's
socket end open while the zygote forked it, so the worker's death closed nothing); a worker that
wrote one 1 GiB line to its log made the judge read all of it (2.1 GB peak) and copy it into the
run (1 GiB more state). A dead worker now ends the run at once, a CRASH naming how it died; a log
is read from its last 64 KiB and kept to its first 256 KiB and last 768 KiB, the cut said."""
from __future__ import annotations

import time

import pytest

from .attacks import BUILD, STOCK
from .conftest import experiment

pytestmark = pytest.mark.adversarial

DIES = {
    "exit": "    import os; os._exit(3)\n",
    "sigkill": "    import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n",
}
# 300 MiB in one line (written in 1 MiB pieces, so the worker itself stays small), then it dies
FLOODS = ("    import os\n"
          "    chunk = b'x' * (1 << 20)\n"
          "    for _ in range(300):\n"
          "        os.write(1, chunk)\n"
          "    os.write(1, b'LAST-WORDS')\n"
          "    os._exit(4)\n")


def _dies_in_build(body: str) -> str:
    return STOCK.replace(BUILD, "def build(spec: PipelineSpec) -> StockDiT:\n" + body + "    return StockDiT(spec)\n")


@pytest.mark.parametrize("how", sorted(DIES))
def test_a_worker_that_dies_in_build_ends_the_run_at_once(research, how):
    t0 = time.monotonic()
    j = experiment(research, _dies_in_build(DIES[how]), "Die in build")
    took = time.monotonic() - t0
    assert j.status == "CRASH", j.show()
    said = "exited with code 3" if how == "exit" else "killed by signal 9"
    assert said in j.last, j.show()
    assert took < 240, f"{took:.0f}s: the death was noticed at a timeout, not when it happened"


def test_a_flooded_log_is_read_and_kept_within_a_bound(research):
    j = experiment(research, _dies_in_build(FLOODS), "Flood the log")
    assert j.status == "CRASH" and "exited with code 4" in j.last, j.show()
    assert len(j.last) < 4000, len(j.last)  # the last line's tail, not 300 MiB of it
    assert "LAST-WORDS" in j.last, j.show()
    runs = sorted((research.root / ".autoresearch/t/runs").glob(f"*-{j.sha[:7]}*"))
    logs = [p for p in runs[-1].rglob("*.log")]
    assert logs, list(runs[-1].rglob("*"))
    sizes = {p.name: p.stat().st_size for p in logs}
    assert max(sizes.values()) < (1 << 20) + 4096, sizes
    flooded = max(logs, key=lambda p: p.stat().st_size).read_bytes()
    assert b"bytes of this log cut here" in flooded and flooded.endswith(b"LAST-WORDS"), flooded[-200:]
