"""program.md, README.md and the handbook tell the agent one story (issue 27): each check below
reads the documents as an agent does, and each is shown to fail on its disagreement planted back.

The disagreements an agent met: the revert as `git reset --hard` beside program.md's `--keep`;
handbook pages citing "seed rule 8/9/11" that program.md numbers 1-6; commands without `--config`;
"re-run the noise calibration" read as `baseline --force` mid-session; the agent setting its own
bound; three answers to an UNSTABLE objective lane; a cumulative figure other than the chained one.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HANDBOOK = ROOT / "knowledge" / "handbook"


def _docs() -> dict[str, str]:
    docs = {"README.md": (ROOT / "README.md").read_text(), "program.md": (ROOT / "program.md").read_text()}
    docs.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted(HANDBOOK.rglob("*.md"))})
    return docs


def _rules(program: str) -> list[str]:
    """program.md section 6's numbered rules, in order."""
    section = program.split("## 6. The seed's rules", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\d+\. (.+(?:\n   .+)*)", section, re.M)]


# words that a sentence citing a rule must share with it: a citation by number alone drifts
RULE_WORDS = {1: ("quality", "score", "contract"), 2: ("baseline", "champion"), 3: ("exact", "hypothesis"),
              4: ("a5500", "target", "h100", "h200"), 5: ("fp8", "fa3", "research", "flashattention", "sdpa"),
              6: ("metric",)}


def disagreements(docs: dict[str, str]) -> list[str]:
    out = []
    rules = _rules(docs["program.md"])
    for name, text in docs.items():
        flat = re.sub(r"\s+", " ", text)
        if "git reset --hard" in flat:
            out.append(f"{name}: reverts with `git reset --hard`; the gate runs `git reset --keep HEAD^`")
        for m in re.finditer(r"seed rule \d+", flat, re.I):
            out.append(f"{name}: cites '{m.group(0)}': cite program.md's rules (1-{len(rules)}) or sections")
        for m in re.finditer(r"program\.md rule (\d+)", flat):
            n = int(m.group(1))
            sentence = flat[max(0, flat.rfind(". ", 0, m.start())):m.end()].lower()
            if not 1 <= n <= len(rules) or not any(w in sentence for w in RULE_WORDS.get(n, ())):
                out.append(f"{name}: 'program.md rule {n}' does not say what that rule says")
        for m in re.finditer(r"`(dit-ar [a-z]+[^`]*)`|^(dit-ar [a-z]+.*)$", text, re.M):
            cmd = m.group(1) or m.group(2)
            if re.search(r" (--[a-z]|\")", cmd) and "--config" not in cmd and name != "README.md":
                out.append(f"{name}: `{cmd[:60]}` runs without --config (program.md's commands all name it)")
        if name != "program.md" and re.search(r"re-?run (the baseline|the noise calibration)|baseline --force mid",
                                              flat, re.I):
            out.append(f"{name}: tells the agent to re-run the baseline mid-session; program.md forbids it")
        if re.search(r"\bagent\b[^.]{0,80}--max-experiments"
                     r"|--max-experiments[^.]{0,80}\b(you|the agent) (may|can|should)", flat, re.I):
            out.append(f"{name}: lets the agent bound its own session; only a person runs `init --max-experiments`")
        if re.search(r"UNSTABLE[^.]{0,120}(fix the machine, then re-run|not this one again)", flat):
            out.append(f"{name}: an UNSTABLE objective lane is not 'run once more as it is'")
        if re.search(r"product of kept (CIs|runs' ratios)", flat):
            out.append(f"{name}: a cumulative figure other than the chained one with its CI")
    return out


def test_the_documents_agree():
    assert disagreements(_docs()) == []


PLANTS = {
    "reset": ("README.md", "DISCARD runs `git reset --hard HEAD^` on the candidate.", "git reset --hard"),
    "seed rule": ("knowledge/handbook/07_approximation/01_approximation_and_caching.md",
                  "Prefer exact rungs (seed rule 5).", "seed rule 5"),
    "rule number": ("knowledge/handbook/03_single_gpu/09_numerical_precision_modes.md",
                    "Try the bf16 path (program.md rule 6).", "program.md rule 6"),
    "config": ("knowledge/handbook/09_reference/09_a5500_benchmark_runbook.md",
               "\n```bash\ndit-ar experiment --classification exact --description \"x\"\n```\n", "without --config"),
    "baseline": ("knowledge/handbook/09_reference/09_a5500_benchmark_runbook.md",
                 "If the machine changed, re-run the noise calibration.", "re-run the baseline"),
    "bound": ("knowledge/handbook/README.md", "The agent should pass its budget as `--max-experiments`.",
              "bound its own session"),
    "unstable": ("knowledge/handbook/00_foundations/02_benchmarking_and_quality_gates.md",
                 "An UNSTABLE lane: fix the machine, then re-run.", "run once more"),
    "cumulative": ("program.md", "Cite the product of kept runs' ratios.", "chained"),
}


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_each_disagreement_planted_back_is_found(kind):
    name, text, said = PLANTS[kind]
    docs = _docs()
    docs[name] = docs[name] + "\n" + text + "\n"
    found = disagreements(docs)
    assert len(found) == 1 and found[0].startswith(name + ":") and said in found[0], found
