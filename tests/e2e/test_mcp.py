"""`dit-ar mcp` (issue 53): the loop as Model Context Protocol tools, driven over stdio by the SDK's
own client, as an agent host drives it, on the tiny suite. One project and one server for the whole
scenario (CI's e2e budget): doctor, try_change (FASTER), a commit, experiment (KEEP) with a second
experiment called while the first is in flight (busy, no second ledger row), status (the champion's
figure is `dit-ar status --json`'s), compare (the CLI's document), profile, search; then malformed
calls (an unknown argument, a class the judge does not know, a class this session cannot judge, the
wrong branch, a dirty tree), each a tool error that names the fix, after which the server still
serves. A second server in an environment the judge refuses gives the CLI's own refusal, and a call
the client cancels interrupts its child. Every result's document validates against its shipped
schema (the client also checks it against the tool's output schema)."""
import json
import os
import shutil
import sys
from pathlib import Path

import anyio

# the test extra installs the SDK (pyproject): a missing one fails here, never skips the feature's test
from mcp import ClientSession, StdioServerParameters, stdio_client

from candidates import REDUNDANT, STOCK
from conftest import REPO, research_project
from jsonschemas import available, validate

KINDS = {"doctor": "doctor", "suite": "suite", "status": "status", "profile": "profile", "try_change": "verdict",
         "experiment": "verdict", "compare": "compare", "search": "search"}
TIMEOUT = 600


class Agent:
    """The client side: each call's result, its progress messages, and checks every agent relies on."""

    def __init__(self, session: ClientSession):
        self.session = session
        self.progress: dict[str, list[str]] = {}

    async def call(self, tool: str, args: dict | None = None, started: anyio.Event | None = None):
        said = self.progress.setdefault(tool, [])

        async def progress(_n, _total, message):
            said.append(message or "")
            if started is not None:
                started.set()

        return await self.session.call_tool(tool, args or {}, read_timeout_seconds=TIMEOUT, progress_callback=progress)

    async def ok(self, tool: str, args: dict | None = None) -> dict:
        """A result that is no error: its structured content, its document checked against its schema."""
        res = await self.call(tool, args)
        assert not res.is_error, res.content[0].text[-3000:]
        out = res.structured_content
        assert out["tool"] == tool and out["next"] and json.loads(res.content[0].text) == out, out
        if available():
            validate(out["document"], KINDS[tool])
        return out

    async def error(self, tool: str, args: dict | None = None) -> str:
        """A tool error (isError): its text."""
        res = await self.call(tool, args)
        assert res.is_error, res.structured_content
        print(f"{tool} error: {res.content[0].text}")  # shown with a failure (or -s)
        return res.content[0].text


def _server(proj, env: dict | None = None) -> StdioServerParameters:
    exe = shutil.which("dit-ar") or str(Path(sys.executable).parent / "dit-ar")
    # the host passes the user's environment, as a shell that started dit-ar would
    return StdioServerParameters(command=exe, args=["mcp"], cwd=str(proj.root), env={**os.environ, **(env or {})})


async def _scenario(proj, rows_before: list[dict]) -> None:
    async with stdio_client(_server(proj)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        agent = Agent(session)
        assert {t.name for t in (await session.list_tools()).tools} == set(KINDS)
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {"ditar://program.md", "ditar://docs/verdict-json.md", "ditar://report/latest"} <= listed, listed
        program = (await session.read_resource("ditar://program.md")).contents[0].text
        assert program == (REPO / "program.md").read_text()
        report = (await session.read_resource("ditar://report/latest")).contents[0].text
        index = proj.root / ".autoresearch/t/report/index.html"
        assert report == f"no report yet at {index}: `dit-ar report` writes it", report

        doctor = await agent.ok("doctor", {"no_probe": True})
        assert doctor["exit_status"] == 0 and doctor["document"]["failed"] == [], doctor["document"]["checks"]

        # try the edit (the baseline's redundant full pass removed, a 2x exact win), uncommitted
        proj.write("mutable/pipeline.py", STOCK)
        tried = await agent.ok("try_change", {"classification": "exact", "description": "Drop the redundant pass"})
        if tried["document"]["outcome"] == "UNSTABLE":  # the host's noise: try once more as it is (its next step)
            tried = await agent.ok("try_change", {"classification": "exact", "description": "Drop it, once more"})
        doc = tried["document"]
        assert doc["kind"] == "try" and doc["outcome"] in ("FASTER", "UNSTABLE"), doc
        assert tried["exit_status"] == doc["exit_status"] == {"FASTER": 0, "UNSTABLE": 11}[doc["outcome"]]
        if doc["outcome"] == "FASTER":
            assert "commit with the trailer `Ditar-Class: exact`" in tried["next"], tried["next"]
        assert any(m.startswith("DITAR TRY: ") for m in agent.progress["try_change"])  # stderr lines as progress
        assert proj.ledger() == rows_before and proj.git("status", "--porcelain") == "M mutable/pipeline.py"

        # commit it, then the gate; a second experiment while the first runs is busy, and records nothing
        for subject in ("Drop the redundant pass", "Drop the redundant pass, once more"):
            sha = proj.commit_candidate(STOCK, "exact", subject)
            started, results = anyio.Event(), {}

            async def first():
                results["first"] = await agent.call("experiment", {"classification": "exact",
                                                                   "description": subject}, started)
                started.set()  # a first call that printed nothing (refused at once) fails below, not by waiting

            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                with anyio.fail_after(120):
                    await started.wait()  # the first call's child is running
                busy = await agent.error("experiment", {"classification": "exact", "description": "a second one"})
            assert busy.startswith("busy: experiment is running (pid ") and "one gated run" in busy, busy
            res = results["first"]
            assert not res.is_error, res.content[0].text[-3000:]
            out = res.structured_content
            if available():
                validate(out["document"], "verdict")
            verdict = out["document"]
            if not (verdict["verdict"] == "DISCARD" and verdict["judged"] is False):
                break  # judged; else the gate's re-run rule: once more as it is
        rows = proj.ledger()
        assert len(rows) == len(rows_before) + (1 if subject.endswith("pass") else 2), rows
        assert verdict["verdict"] == "KEEP" and out["exit_status"] == verdict["exit_status"] == 0, verdict
        # the CLI's own record of the same run: its verdict.json (the document but its next step) and ledger row
        recorded = json.loads((proj.root / verdict["run_dir"] / "verdict.json").read_text())
        assert recorded == {k: v for k, v in verdict.items() if k != "next"}
        row = rows[-1]
        assert (row["status"], row["commit"][:7], row["metric"], [row["ci_low"], row["ci_high"]]) == \
            (verdict["verdict"], verdict["commit"], verdict["speedup"], verdict["ci95"])
        assert sha.startswith(row["commit"])
        assert f"{sha[:7]} is the champion" in out["next"], out["next"]

        status = await agent.ok("status")
        cli = json.loads(proj.ditar("status", "--json").stdout)
        assert status["document"]["champion"] == cli["champion"] and cli["champion"]["commit"] == row["commit"]
        assert status["document"]["champion"]["cumulative"]["speedup"] == cli["champion"]["cumulative"]["speedup"]
        assert status["next"] == cli["next"]
        compared = await agent.ok("compare", {"a": "baseline", "b": "champion"})
        lane = compared["document"]["lanes"][cli["objective_lane"]]
        assert lane["kind"] == "chained" and lane["speedup"] == cli["champion"]["cumulative"]["speedup"], lane
        assert compared["document"] == json.loads(proj.ditar("compare", "baseline", "champion", "--json").stdout)

        profiled = await agent.ok("profile", {"against": "baseline"})
        summary = profiled["document"]["summary"]
        assert profiled["exit_status"] == 0 and summary["against"]["ref"] == "baseline", summary.get("against")
        assert summary["candidate"]["commit"] == sha

        # malformed calls: each an error naming the fix, and the server keeps serving
        text = await agent.error("status", {"verbose": True})
        assert "unknown argument(s) verbose" in text and "no arguments" in text, text
        text = await agent.error("experiment", {"classification": "lossless", "description": "x"})
        assert "'lossless' is not a class this judge knows: one of exact, numerical" in text, text
        text = await agent.error("try_change", {"classification": "approximate", "description": "Fewer steps"})
        assert text.startswith("REFUSED: ") and "approximate" in text and "\nnext: " in text, text
        branch = proj.git("rev-parse", "--abbrev-ref", "HEAD")
        proj.git("checkout", "-q", "main")  # the wrong branch
        text = await agent.error("experiment", {"classification": "exact", "description": "On main"})
        assert text.startswith("REFUSED: ") and "'main'" in text and "\nnext: " in text, text
        proj.git("checkout", "-q", branch)
        shutil.copytree(REPO / "knowledge", proj.root / "knowledge")  # the handbook, left untracked: a dirty tree
        text = await agent.error("experiment", {"classification": "exact", "description": "On a dirty tree"})
        assert text.startswith("REFUSED: ") and "knowledge" in text and "\nnext: " in text, text
        assert len(proj.ledger()) == len(rows)  # a refusal records nothing

        found = await agent.ok("search", {"query": "cuda graphs scheduler batch 1"})
        assert found["document"] and found["document"][0]["rank"] == 1 and "dit-ar try" in found["next"]
        page = found["document"][0]["path"]
        assert f"ditar://handbook/{page}" in {str(r.uri) for r in (await session.list_resources()).resources}
        assert (await agent.ok("doctor", {"no_probe": True}))["document"]["failed"] == ["clean tree"]


def _children(proj) -> list[int]:
    """The pids of the `dit-ar` commands the server started for this project (their command lines)."""
    mine = f"--config={proj.root / 'config/autoresearch.json'}"
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pytest_ditar.cli" in args and mine.encode() in args:
            out.append(int(pid))
    return out


async def _environment(proj, env: dict) -> str:
    """A server started where the CLI would refuse the environment: the same refusal, as a tool error.
    And a call the client cancels: its child is interrupted (Ctrl-C's SIGINT to its process group) and
    the gated slot is free again."""
    async with stdio_client(_server(proj, env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        agent = Agent(session)
        profiles = proj.root / ".autoresearch/t/profiles"
        before = set(profiles.iterdir())
        async with anyio.create_task_group() as tg:  # profile runs no pytest: PYTEST_ADDOPTS does not stop it
            tg.start_soon(agent.call, "profile", {})
            with anyio.fail_after(60):
                while not (running := _children(proj)):
                    await anyio.sleep(0.2)
            await anyio.sleep(1)
            tg.cancel_scope.cancel()  # the client gives up on the call
        with anyio.fail_after(60):
            while any(Path(f"/proc/{pid}").exists() for pid in running):
                await anyio.sleep(0.5)
        assert not [d for d in set(profiles.iterdir()) - before if (d / "summary.json").exists()]  # it never finished
        text = await agent.error("try_change", {"classification": "exact", "description": "In that environment"})
        assert not text.startswith("busy"), text
        assert (await agent.ok("status"))["exit_status"] == 0  # and it keeps serving
        return text


def test_an_agent_runs_the_loop_through_the_mcp_server(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    anyio.run(_scenario, proj, proj.ledger())

    # the server adds nothing to the CLI's environment and takes nothing away: a variable the judge
    # refuses reaches it and is refused with the CLI's own words (and a cancelled call ends its child)
    proj.git("clean", "-fdq")  # the untracked handbook copy: a clean tree again
    env = {"PYTEST_ADDOPTS": "--rootdir=/"}
    text = anyio.run(_environment, proj, env)
    cli = json.loads(proj.ditar("try", "--classification", "exact", "--json", env=env).stdout)
    assert cli["outcome"] == "REFUSED" and "PYTEST_ADDOPTS" in cli["reason"], cli
    assert text == f"REFUSED: {cli['reason']}\nnext: {cli['next']}", (text, cli)
