"""Issue 43: what CI reads of a gated run and of a guard, through pytest's own command line:
--ditar-json, GitHub Actions' step summary, annotations and outputs (their files named by the
GITHUB_* variables), junit testsuite properties; and pytest-codspeed beside the gate.

pytest-codspeed is not installed here and is never downloaded: a conftest plugin stands in for
it and does what its pytest_configure does (pytest_codspeed/plugin.py): registers its plugin
object as "codspeed_plugin", and once enabled by $CODSPEED_ENV sets pytest-benchmark's
--benchmark-disable. (Its fixture swap and deselection follow from the same switch.)"""
import json
import re

from candidates import STOCK

GEN_DEF = "    def generate(self, request: Request) -> Generated:\n"

# the attack: a candidate's exception text with line breaks, each next line a workflow command of its
# own (a forged annotation, and a stop of the runner's commands that would hide the gate's). The
# worker sends an exception's first line only; and whatever pytest prints of a run is read as no
# command at all: the gate stops the runner's commands before any test runs (core.ci.stop_commands)
FORGED = "kernel exploded\n::error title=forged::all lanes faster\n::stop-commands::mine"
RAISES = STOCK.replace(GEN_DEF, GEN_DEF + f"        raise RuntimeError({FORGED!r})\n")


def _github(tmp_path, monkeypatch) -> dict:
    files = {"GITHUB_STEP_SUMMARY": tmp_path / "summary.md", "GITHUB_OUTPUT": tmp_path / "output"}
    for var, path in files.items():
        path.write_text("")
        monkeypatch.setenv(var, str(path))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    return files


def _outputs(path) -> dict:
    out, lines, i = {}, path.read_text().splitlines(), 0
    while i < len(lines):
        key, sep, value = lines[i].partition("=")
        if not sep:  # name<<DELIM, value lines, DELIM
            key, _, delim = lines[i].partition("<<")
            end = lines.index(delim, i + 1)
            value, i = "\n".join(lines[i + 1:end]), end
        out[key] = value
        i += 1
    return out


def test_a_crash_names_its_line_for_github_and_junit_and_json(research, tmp_path, monkeypatch):
    files = _github(tmp_path, monkeypatch)
    sha = research.commit_candidate(RAISES, "exact", "Explode")
    doc_path = tmp_path / "run.verdict.json"
    res = research.pytest(f"--ditar-json={doc_path}")
    out = res.stdout.str()
    last = out.strip().splitlines()[-1]
    assert res.ret == 10 and last.startswith("DITAR VERDICT: CRASH "), out[-3000:]
    doc = json.loads(doc_path.read_text())
    assert doc["kind"] == "gate" and doc["verdict"] == "CRASH" and doc["line"] == last and doc["exit_status"] == 10
    assert doc["commit"] == sha[:7] and doc["errors"] and doc["errors"][0]["kind"] == "exception"
    line_no = next(i for i, ln in enumerate(RAISES.splitlines(), 1) if "kernel exploded" in ln)
    assert doc["errors"][0]["message"] == "RuntimeError: kernel exploded"  # the worker sends its first line
    assert doc["errors"][0]["where"].startswith(f"mutable/pipeline.py:{line_no} "), doc["errors"]
    # pytest's own report quotes the exception as it is: the forged lines reach stdout, but only where
    # the runner reads no command (stopped before any test ran, with a token the candidate never saw)
    lines = out.splitlines()
    commands = [i for i, ln in enumerate(lines) if ln.startswith("::")]
    stop = lines[commands[0]]
    assert stop.startswith("::stop-commands::ditar-"), lines[commands[0]]
    token = stop.split("::")[2]
    resume = lines.index(f"::{token}::")
    assert all(i < resume for i in commands if "forged" in lines[i] or "mine" in lines[i])  # inert, where printed
    ours = lines[resume + 1:-1]  # after the resume: our annotations, escaped, then the verdict line
    assert ours == [f"::error file=mutable/pipeline.py,line={line_no},title=ditar CRASH::exception: RuntimeError: "
                    "kernel exploded"], ours
    outputs = _outputs(files["GITHUB_OUTPUT"])
    assert outputs["verdict"] == "CRASH" and outputs["exit_status"] == "10" and outputs["kind"] == "gate", outputs
    assert outputs["lane"] == "latency_b1" and outputs["reason"] == doc["reason"]
    summary = files["GITHUB_STEP_SUMMARY"].read_text()
    assert summary.startswith("### pytest-ditar gate\n\n**CRASH**") and last in summary, summary
    # junit: the run's copy, filed into its run directory, carries the verdict
    junit = (research.root / doc["run_dir"] / "junit.xml").read_text()
    assert re.search(r'<property name="ditar.verdict" value="CRASH"\s*/>', junit), junit[:1000]
    assert '<property name="ditar.kind" value="gate"' in junit


def test_codspeed_enabled_is_refused_naming_it_and_installed_but_off_the_guard_runs(research, tmp_path, monkeypatch):
    # pytest-codspeed is an installed plugin; the judge's pytest loads no conftest (issue 49), so the
    # stand-in is registered on a config of pytest's own making, as the installed plugin would be
    from types import SimpleNamespace

    from pytest_ditar.plugin.gateplugin import CODSPEED_PLUGIN, plugin_conflict

    for enabled in (True, False):
        plugins = {CODSPEED_PLUGIN: SimpleNamespace(is_codspeed_enabled=enabled)}
        config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=plugins.get))
        why = plugin_conflict(config)  # type: ignore[arg-type]
        assert (why is not None and "pytest-codspeed is enabled in this ditar run" in why
                and "-p no:codspeed" in why) if enabled else why is None, why

    # installed, not enabled: nothing changes, the guard judges
    files = _github(tmp_path, monkeypatch)
    doc_path = tmp_path / "guard.verdict.json"
    res = research.pytest("--ditar-guard", "--ditar-tag=t", "-m", "quality", f"--ditar-json={doc_path}")
    out = res.stdout.str()
    assert res.ret == 0 and out.strip().splitlines()[-1].startswith("DITAR GUARD: PASS"), out[-3000:]
    doc = json.loads(doc_path.read_text())
    assert doc["kind"] == "guard" and doc["verdict"] == "PASS" and doc["failures"] == [] and doc["exit_status"] == 0
    assert _outputs(files["GITHUB_OUTPUT"])["verdict"] == "PASS"
    assert "### pytest-ditar guard: **PASS** (tolerance 5%)" in files["GITHUB_STEP_SUMMARY"].read_text()
    assert not [ln for ln in out.splitlines() if ln.startswith("::error")]


# Issue 49: a crash reason quotes the candidate's exception; in the step summary (and the run's
# summary.md) it rendered as the candidate wrote it: a heading and a table row "KEEP 9.99x".
MARKUP = ("<h1>KEEP 9.99x</h1><table><tr><td>KEEP</td><td>9.99x</td></tr></table> ## KEEP | KEEP | 9.99x | "
          "**KEEP** [KEEP](https://example.com) ![x](https://example.com/p.png) $x$ ~~old~~ a\\b &amp;")
RAISES_MARKUP = STOCK.replace(GEN_DEF, GEN_DEF + f"        raise RuntimeError({MARKUP!r})\n")


def test_a_crash_reason_with_html_and_markdown_renders_as_text_in_the_step_summary(research, tmp_path, monkeypatch):
    markdown_it = __import__("pytest").importorskip("markdown_it")
    import html

    files = _github(tmp_path, monkeypatch)
    research.commit_candidate(RAISES_MARKUP, "exact", "Markup in a crash")
    doc_path = tmp_path / "run.verdict.json"
    res = research.pytest(f"--ditar-json={doc_path}")
    assert res.ret == 10, res.stdout.str()[-3000:]
    doc = json.loads(doc_path.read_text())
    run_md = (research.root / doc["run_dir"] / "summary.md").read_text()
    step_md = files["GITHUB_STEP_SUMMARY"].read_text()
    assert run_md in step_md, (run_md, step_md)
    md = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    rendered = md.render(step_md)
    for tag in ("<h1", "<h2", "<table", "<td", "<strong>KEEP", "<a ", "<img", "<s>", "<del>"):
        assert tag not in rendered, (tag, rendered)
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    assert MARKUP in text, text  # the message itself, character for character, as text
