"""`dit-ar fleet launch`: one research loop a GPU as jobs of an existing scheduler, through
submitit (Slurm; its local executor where there is none, and in the tests). No scheduler of our own.

Each job runs the command given (the agent's loop program.md describes, or one `dit-ar
experiment`) in its tag's worktree with DITAR_TAG set, on one GPU it holds alone: under Slurm
`--gres`-style `gpus_per_node=1` with `--exclusive`; locally one executor per job whose only
visible GPU is that job's. Inside the job the GPU is cuda:0 (CUDA_VISIBLE_DEVICES), so the tags
a launcher runs are initialised without `--gpu`.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import ENV_TAG


@dataclass(frozen=True)
class JobResult:
    """What a job's command came to: its exit status and its last line (a verdict line for `experiment`)."""
    tag: str
    returncode: int
    last_line: str
    gpu: str  # the card the scheduler gave the job (CUDA_VISIBLE_DEVICES), "" for none


def run_job(tag: str, cwd: str, command: Sequence[str]) -> JobResult:
    """The job's body (submitit pickles it by reference): the command in the tag's worktree."""
    env = {**os.environ, ENV_TAG: tag}
    res = subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    # into the job's own log (submitit's folder), never the worktree: a file there would dirty the tree
    print(res.stdout, end="")
    print(res.stderr, end="", file=sys.stderr)
    lines = res.stdout.strip().splitlines()
    return JobResult(tag, res.returncode, lines[-1] if lines else "", os.environ.get("CUDA_VISIBLE_DEVICES", ""))


def launch(jobs: Sequence[tuple[str, Path]], command: str, folder: Path, cluster: str, gpus: Sequence[int],
           timeout_min: int, partition: str | None = None) -> list[Any]:
    """Submit one job per (tag, worktree); returns submitit's jobs. `gpus`: the local executor's
    cards, one per job (cluster "local"); Slurm picks its own."""
    try:
        import submitit
    except ImportError:
        raise DitarError("fleet launch needs submitit: pip install 'pytest-ditar[fleet]'") from None
    if cluster == "local" and gpus and len(gpus) < len(jobs):
        raise DitarError(f"{len(jobs)} jobs but {len(gpus)} GPUs (--gpus): one job a GPU, exclusive")
    out = []
    for i, (tag, worktree) in enumerate(jobs):
        params: dict[str, Any] = {"timeout_min": timeout_min, "tasks_per_node": 1}
        if cluster == "slurm":
            ex: Any = submitit.AutoExecutor(folder=str(folder / tag), cluster="slurm")
            params.update(name=f"ditar-{tag}", gpus_per_node=1, slurm_exclusive=True,
                          **({"slurm_partition": partition} if partition else {}))
        else:  # submitit's local executor: each job's only visible card is its own
            ex = submitit.LocalExecutor(folder=str(folder / tag))
            if gpus:
                params.update(gpus_per_node=1, visible_gpus=[gpus[i]])
        ex.update_parameters(**params)
        argv = shlex.split(command.replace("{tag}", tag))
        out.append(ex.submit(run_job, tag, str(worktree), argv))
    return out
