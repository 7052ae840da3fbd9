"""The product's shared words: classes, statuses, verdicts, the default config path and the
environment variables. Every other module takes them from here; none writes them out again."""
from __future__ import annotations

from typing import Literal

# Experiment classes, tightest first: a branch's cumulative class is the loosest any kept commit claimed.
CLASSES: tuple[str, ...] = ("exact", "numerical", "approximate", "quantization")
# Handbook pages may also be background reading that is no experiment class.
HANDBOOK_CLASSES: tuple[str, ...] = (*CLASSES, "reference")
# Classes whose claim is checked against the champion's outputs (the same computation, or its arithmetic).
REPRODUCING_CLASSES: tuple[str, ...] = ("exact", "numerical")

Status = Literal["KEEP", "DISCARD", "CRASH"]
STATUSES: tuple[str, ...] = ("KEEP", "DISCARD", "CRASH")
# REJECTED: the timing itself is void (a timed output failed its audit, or the candidate caches).
LANE_VERDICTS: tuple[str, ...] = ("FASTER", "NOT_FASTER", "SLOWER", "UNSTABLE", "REGRESSED", "OK", "MISSING",
                                  "REJECTED")
ERROR_KINDS: tuple[str, ...] = ("exception", "non_finite", "oom", "timeout")
# A champion twice as slow relative to the anchor as when it was kept (core.anchor) is not the
# champion that was kept: no win against it is judged, however large. NOT_KEPT_BUILD: the cause a
# lane found so carries (core.rerun counts it as the champion's doing).
NOT_THE_KEPT_BUILD = 2.0
NOT_KEPT_BUILD = "not_kept_build"

# What a lane measures (its suite's `kind:`, loop.perf.lanekinds): "time" is the timed lane every suite has.
LANE_KINDS: tuple[str, ...] = ("time", "memory")

# Why a lane is what it is (LaneOutcome.cause), where a rule reads it; rules read these, never a reason's words.
DRIFT = "drift"  # the champion ran slower in this run than its kept samples
INTERFERENCE = "interference"  # work that outlived the candidate's timed calls slowed the reference
SHARED_DEVICE = "shared_device"  # another process used the GPU during the lane (hardware.exclusivity)
LANE_CAUSES: tuple[str, ...] = (DRIFT, NOT_KEPT_BUILD, INTERFERENCE, SHARED_DEVICE)

# the side of a lane's round whose call is the candidate's (runtime.lanes: beside "champion" and "twin")
SIDE_CANDIDATE = "candidate"

# What each objection of a decision is (Decision.causes, beside Decision.reasons): core.rerun and the
# next-step line read these. INTERNAL: the judge failed, not the candidate; OBJECTIVE_UNSTABLE: the
# objective lane could not be measured (the host, another process), not the idea.
INTERNAL = "internal"
CANDIDATE_ERROR = "candidate_error"  # the candidate raised, ran out of memory or time, or gave non-finite output
TAMPERED = "tampered"  # the run moved git, its config or hooks, or the state directory
GUARD = "guard"
QUALITY = "quality"
CLASS_CLAIM = "class_claim"
HOLDOUT = "holdout"
OBJECTIVE_MISSING = "objective_missing"
OBJECTIVE_REJECTED = "objective_rejected"
OBJECTIVE_UNSTABLE = "objective_unstable"
NOT_FASTER = "not_faster"
GUARD_LANE = "guard_lane"  # a guard lane regressed, was rejected, or was slowed by interference
VRAM = "vram"
FASTER = "faster"  # a KEEP's own reason
UNMEASURED = "unmeasured"  # a KEEP's note: a guard lane that measured nothing
OBJECTION_CAUSES: tuple[str, ...] = (INTERNAL, CANDIDATE_ERROR, TAMPERED, GUARD, QUALITY, CLASS_CLAIM, HOLDOUT,
                                     OBJECTIVE_MISSING, OBJECTIVE_REJECTED, OBJECTIVE_UNSTABLE, NOT_FASTER,
                                     GUARD_LANE, VRAM, FASTER, UNMEASURED)

TRAILER = "Ditar-Class:"  # the commit-message trailer that carries an experiment's class
DEFAULT_CONFIG = "config/autoresearch.json"  # relative to the project root

# Environment variables the product reads.
ENV_CONFIG = "DITAR_CONFIG"  # dit-ar's --config default
ENV_TAG = "DITAR_TAG"  # the session tag, over the branch name
ENV_CPU_THREADS = "DITAR_CPU_THREADS"  # torch intra-op threads of a worker (default 1 on CPU, cores/4 on a GPU)
ENV_CACHE = "DITAR_CACHE"  # where generated model directories are cached
ENV_WEIGHTS_DIR = "DITAR_WEIGHTS_DIR"  # a local pipeline directory, over the suite's model.weights_dir
ENV_PROGRESS = "DITAR_PROGRESS"  # 0: no progress bars; 1: bars even without a terminal
ENV_ZYGOTE = "DITAR_ZYGOTE"  # 0: spawn every worker's interpreter directly instead of forking it from the zygote
# seconds a sandboxed tag's zygote stays warm for its next gated run (runtime.zygote); 0: each run starts its own
ENV_ZYGOTE_IDLE = "DITAR_ZYGOTE_IDLE_S"
ZYGOTE_IDLE_S = 1800.0

# The version of what the judge writes for other programs to read (summary.json, ledger rows,
# `dit-ar status --json`): raised whenever a key changes meaning or goes away.
SCHEMA_VERSION = 1

# The largest JSON message either half of the worker protocol reads (a request, a header, a zygote
# reply); arrays travel beside it in shared memory (runtime.worker, runtime.worker_main, runtime.zygote).
WIRE_MAX_MESSAGE = 1 << 20

# The research fleet (issue 44): hosts share one remote; refs and rows the fleet writes.
FLEET_REF = "refs/ditar-fleet/"  # refs/ditar-fleet/<fleet>: the fleet's own hash-chained ledger, every host appends
HOSTS_REF = "refs/ditar-hosts/"  # refs/ditar-hosts/<remote>/<tag>: other hosts' state backups, as fetched
HOST_SEP = "."  # a host's tag is <fleet>.<host>, so its branch (autoresearch/<fleet>.<host>) carries the host
REFERENCE, ANNOUNCE, PROMOTION, SCREENING, DECLINED = "reference", "champion", "promotion", "screening", "declined"
UNJUDGED = "unjudged"  # the reference host's run could not judge the champion (UNSTABLE): neither kept nor declined
FLEET_KINDS: tuple[str, ...] = (REFERENCE, ANNOUNCE, PROMOTION, SCREENING, DECLINED, UNJUDGED)
