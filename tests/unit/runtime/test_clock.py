"""runtime.clock: the judge's clock and when its process started (read from /proc here, not in core)."""
from pytest_ditar.runtime import clock


def test_process_start_is_before_now_on_linux():
    """A process started just now reads a start time between its launch and its answer."""
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        assert clock.process_start_epoch() is None
        return
    before = time.time()
    out = subprocess.run([sys.executable, "-c",
                          "from pytest_ditar.runtime import clock; print(clock.process_start_epoch())"],
                         capture_output=True, text=True, check=True).stdout
    start = float(out)
    assert before - 1 <= start <= time.time() + 1  # a clock tick of slack on either side
