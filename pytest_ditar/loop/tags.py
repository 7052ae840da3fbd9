"""A run's session tag: one rule, light to import (`dit-ar` and the plugin's start ask for it
before anything heavy is loaded)."""
from __future__ import annotations

import os
import re

from pytest_ditar.config.project import Config
from pytest_ditar.core.vocabulary import ENV_TAG
from pytest_ditar.vcs import repo as gitops


def resolve_tag(cfg: Config, explicit: str | None = None) -> str:
    """The session tag: explicit > DITAR_TAG > research branch suffix > sanitized branch name."""
    tag = explicit or os.environ.get(ENV_TAG)
    if not tag:
        branch = gitops.state(cfg.root).branch or "default"
        tag = branch[len(cfg.branch_prefix):] if branch.startswith(cfg.branch_prefix) else branch
    return re.sub(r"[^A-Za-z0-9._-]", "_", tag)
