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


# ---- a newcomer's first screen (issue 42) ---------------------------------------------------------
GLOSSARY = ("champion", "twin", "A/A noise", "guard lane", "zygote", "off_target")


def first_screen_problems(readme: str, program: str, ci_run: str, gitignore: str) -> list[str]:
    """What a newcomer's first hour stumbled on, read from the documents: the README's first 60
    lines hold the purpose, both set-up commands (two venvs) and the glossary, every term defined
    before it is used, in sentences of at most 40 words; program.md says the output's order and
    what to do after each try outcome."""
    out = []
    head = "\n".join(readme.splitlines()[:60])
    if "pytest gates" not in head or "Diffusion Transformer" not in head:
        out.append("README: its first screen does not say what pytest-ditar is")
    if head.count("<!-- docs-test: setup -->") != 1 or head.count("<!-- docs-test: ci -->") != 1:
        out.append("README: both set-up commands must be in its first 60 lines")
    venvs = re.findall(r"python3 -m venv (\S+) && ", head)
    if len(venvs) != 2 or venvs[0] == venvs[1]:
        out.append(f"README: the demo and the tests need a venv each, not {venvs}")
    for v in venvs:
        if f"{v}/" not in gitignore.splitlines():
            out.append(f".gitignore: the README's venv {v}/ is not ignored")
    # the test command's torch is the pin this workplace keeps on disk (torchvision imports beside it);
    # an index URL would be a download CI cannot make
    if "--index-url" in head or "torch==2.14.1 torchvision==0.29.1" not in head:
        out.append("README: the test command's torch is not the pinned pair on disk")
    for term in GLOSSARY:
        entry = re.search(rf"^- \*\*{re.escape(term)}\*\*: ", head, re.M)
        if not entry:
            out.append(f"README: the glossary in its first 60 lines does not define '{term}'")
            continue
        used = re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", readme, re.I)
        if used and used.start() < entry.start():
            out.append(f"README: '{term}' is used before its glossary entry")
    prose = re.sub(r"^(    |<!--|#).*$", "", head, flags=re.M)  # commands, markers, headings: not sentences
    for para in re.split(r"\n\s*\n", prose):
        for sentence in re.split(r"(?<=[.:!?])\s+(?=[A-Z`(])|\n- ", para):
            if len(sentence.split()) > 40:
                out.append(f"README: a sentence of {len(sentence.split())} words on its first screen: "
                           f"{sentence[:60]}...")
    if "git checkout -b" in readme:
        out.append("README: `git checkout -b` before `init`, which makes the branch")
    flat = re.sub(r"\s+", " ", program)
    order = ("`ditar: lane", "`ditar: time: ...`", "`ditar: next: ...`", "pytest's short test summary",
             "last the verdict line")
    at = [flat.find(o) for o in order]
    if -1 in at or at != sorted(at):
        out.append("program.md: does not give the output's order (lanes, time, next, pytest's summary, verdict last)")
    tries = flat.split("**Try before you commit**", 1)[-1].split(" 5. ", 1)[0]
    for outcome in ("FASTER", "NOT_FASTER", "UNSTABLE", "QUALITY_FAILED"):
        if not re.search(rf"(?<![\w_]){outcome}(, [A-Z_]+)*( or [A-Z_]+)?: ", tries):
            out.append(f"program.md: no rule for a `try` that says {outcome}")
    if "not judged" not in flat or "task text" not in flat:
        out.append("program.md: says nothing of a run not judged, or of a run count in the task text")
    ci_line = next((ln for ln in ci_run.splitlines() if ln.startswith("python3 -m venv")), "")
    if ci_line and ci_line not in readme:
        out.append(".ci/run: its test line is not the README's")
    return out


def _first_screen_inputs() -> tuple[str, str, str, str]:
    return tuple((ROOT / n).read_text() for n in ("README.md", "program.md", ".ci/run", ".gitignore"))  # type: ignore


def test_a_newcomers_first_screen():
    assert first_screen_problems(*_first_screen_inputs()) == []


FIRST_SCREEN_PLANTS = {
    "jargon first": (0, lambda t: t.replace("## Set-up", "The champion wins.\n\n## Set-up", 1), "used before"),
    "one venv": (0, lambda t: t.replace(".venv-test", ".venv"), "a venv each"),
    "long sentence": (0, lambda t: t.replace("## Set-up", " ".join(["word"] * 45) + ".\n\n## Set-up", 1),
                      "a sentence of"),
    "no glossary": (0, lambda t: t.replace("- **zygote**: ", "- zygote: "), "does not define 'zygote'"),
    "branch": (0, lambda t: t + "\n    git checkout -b work\n", "git checkout -b"),
    "order": (1, lambda t: t.replace("and last the verdict line", "and the verdict line"), "output's order"),
    "try rule": (1, lambda t: t.replace("UNSTABLE: `try` once more", "UNSTABLE, `try` once more"), "UNSTABLE"),
}


@pytest.mark.parametrize("kind", sorted(FIRST_SCREEN_PLANTS))
def test_each_first_screen_problem_planted_back_is_found(kind):
    which, plant, said = FIRST_SCREEN_PLANTS[kind]
    docs = list(_first_screen_inputs())
    docs[which] = plant(docs[which])
    found = first_screen_problems(*docs)
    assert len(found) >= 1 and any(said in f for f in found), found
