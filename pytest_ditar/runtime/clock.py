"""The judge's clock, bound when the judge first imports the runtime, before any candidate exists.

Candidate code runs in worker processes and cannot reach this process; binding the function
object here also keeps a later monkeypatch of `time.perf_counter` (by a plugin, or by a test)
from changing what the lanes measure with.
"""
from __future__ import annotations

import time

judge_clock = time.perf_counter
