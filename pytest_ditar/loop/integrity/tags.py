"""A run's session tag: one rule, light to import (`dit-ar` and the plugin's start ask for it
before anything heavy is loaded)."""
from __future__ import annotations

import os
import re

from pytest_ditar.config.project import Config
from pytest_ditar.core.vocabulary import ENV_TAG
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.vcs import branches, queries, trees


def resolve_tag(cfg: Config, explicit: str | None = None) -> str:
    """The session tag: explicit > DITAR_TAG > research branch suffix > sanitized branch name."""
    tag = explicit or os.environ.get(ENV_TAG)
    if not tag:
        branch = queries.state(cfg.root).branch or "default"
        tag = branch[len(cfg.branch_prefix):] if branch.startswith(cfg.branch_prefix) else branch
    return re.sub(r"[^A-Za-z0-9._-]", "_", tag)


def off_research_branch(cfg: Config, tag: str) -> str | None:
    """Where HEAD is off every research branch and `tag` (then named after that branch) was never
    started, the fix in one line: the research branch to check out, else the `init` to run; None
    otherwise (a research branch, or a tag with state of its own)."""
    st = queries.state(cfg.root)
    if st.head is None:  # no repository, or no commit yet: not a question of branches
        return None
    branch = st.branch or ""
    if branch.startswith(cfg.branch_prefix) or TagPaths.of(cfg.root, cfg.state_dir, tag).ledger_jsonl.exists() \
            or queries.ref_commit(cfg.root, trees.state_ref(tag)) is not None:
        return None
    found = branches.branches(cfg.root, cfg.branch_prefix)
    where = f"HEAD is on '{branch or 'a detached HEAD'}', not a research branch"
    if len(found) == 1:
        return f"{where}: git checkout {found[0]}"
    if found:
        return f"{where}: git checkout {cfg.branch_prefix}<tag> (one of: {', '.join(found)})"
    return f"{where} and none exists: start one with `dit-ar init --tag <name>`"
