"""`dit-ar mcp`'s server: the tools of cli.agent_tools over the Model Context Protocol on stdio,
built on the `mcp` SDK's low-level server (the `agent` extra). Only cli.agent imports this module,
and only when `dit-ar mcp` runs: the plugin and every other command never load `mcp`.

A tool call runs the CLI's own `--json` entry point as a child process and returns its document
(checked against the shipped schema) as structured content with its exit status and next step.
Each line the child writes on stderr goes to the caller as a progress notification. A refusal
(nothing judged), bad arguments, a busy gated slot or a CLI error are tool errors (`isError`)
whose text names the fix; the server keeps serving. A call the client cancels interrupts its child
as a Ctrl-C would (nothing judged, nothing reverted). Resources: program.md, the docs and the
handbook's pages where this project or this checkout has them, and the latest report's path.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import jsonschema
import mcp.types as types
from anyio.abc import ByteReceiveStream
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from pytest_ditar.cli import agent_tools
from pytest_ditar.config.project import load_config
from pytest_ditar.core.errors import DitarError
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.store.paths import TagPaths

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # a checkout's root (program.md, docs/) where installed editable
INSTRUCTIONS = ("pytest-ditar's research loop as tools (program.md is a resource: read it first). Each tool runs "
                "the same `dit-ar ... --json` command as the CLI and returns its document with `next`, the step "
                "to take; a refusal or bad input is a tool error that names the fix.")


class Judge:
    """The server's state: where the project is, and the one gated run in flight."""

    def __init__(self, config: Path, tag: str | None) -> None:
        self.config, self.tag = config, tag
        self.slot = agent_tools.RunSlot()

    # ---- tools ---------------------------------------------------------------------------------
    async def list_tools(self, ctx: ServerRequestContext, params: object) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=t.input_schema(),
                       output_schema=agent_tools.output_schema(t)) for t in agent_tools.TOOLS])

    async def call_tool(self, ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = agent_tools.BY_NAME.get(params.name)
        if tool is None:
            return _error(f"unknown tool {params.name!r}: the tools are {', '.join(agent_tools.BY_NAME)}")
        args = dict(params.arguments or {})
        problem = agent_tools.argument_problem(tool, args)
        if problem:
            return _error(problem)
        if not tool.gated:
            return await self._run(ctx, tool, args)
        busy = self.slot.claim(tool.name)
        if busy:
            return _error(busy)
        try:
            return await self._run(ctx, tool, args)
        finally:
            self.slot.release()

    async def _run(self, ctx: ServerRequestContext, tool: agent_tools.Tool,
                   args: dict[str, object]) -> types.CallToolResult:
        cmd = agent_tools.command(tool, args, self.config, self.tag)
        err_lines: list[str] = []
        out = bytearray()
        # the environment the server was started with, as a user's shell gives it to dit-ar: nothing added;
        # a process group of its own, so that a cancelled call reaches pytest and the workers as a Ctrl-C does
        async with await anyio.open_process(cmd, stdin=subprocess.DEVNULL, env=dict(os.environ),
                                            start_new_session=True) as proc:
            if tool.gated:
                self.slot.started(proc.pid)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_progress, ctx, proc.stderr, err_lines)
                    assert proc.stdout is not None
                    async for chunk in proc.stdout:
                        out += chunk
                rc = await proc.wait()
            finally:
                if proc.returncode is None:  # the caller cancelled: the run does not outlive its call
                    await _interrupt(proc)
        return _result(tool, bytes(out), rc, err_lines)

    # ---- resources -----------------------------------------------------------------------------
    def _resources(self) -> dict[str, tuple[Path, str]]:
        """uri -> (file, description) of what this project (else this checkout) holds."""
        found: dict[str, tuple[Path, str]] = {}
        try:
            cfg = load_config(self.config)
            roots, handbook = [cfg.root, PACKAGE_ROOT], cfg.root / cfg.knowledge_dir
        except DitarError:  # no project config here: what the checkout holds
            roots, handbook = [Path.cwd(), PACKAGE_ROOT], Path.cwd() / "knowledge/handbook"
        for root in roots:
            if (root / "program.md").is_file() and "ditar://program.md" not in found:
                found["ditar://program.md"] = (root / "program.md", "the loop, step by step: read it before a session")
            for page in sorted(root.glob("docs/*.md")):
                found.setdefault(f"ditar://docs/{page.name}", (page, f"the handbook of pytest-ditar: {page.stem}"))
        if handbook.is_dir():
            for page in sorted(handbook.rglob("*.md")):
                rel = page.relative_to(handbook).as_posix()
                found[f"ditar://handbook/{rel}"] = (page, f"research handbook page {rel} (the search tool's corpus)")
        return found

    async def list_resources(self, ctx: ServerRequestContext, params: object) -> types.ListResourcesResult:
        listed = [types.Resource(uri=uri, name=uri.removeprefix("ditar://"), description=what,
                                 mime_type="text/markdown") for uri, (_, what) in self._resources().items()]
        listed.append(types.Resource(uri=REPORT, name="report/latest", mime_type="text/plain",
                                     description="the latest `dit-ar report` page's path (or how to make one)"))
        return types.ListResourcesResult(resources=listed)

    async def read_resource(self, ctx: ServerRequestContext,
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == REPORT:
            text, mime = self._report_path(), "text/plain"
        else:
            hit = self._resources().get(uri)
            if hit is None:
                raise ValueError(f"no resource {uri}: resources/list names them")
            text, mime = hit[0].read_text(encoding="utf-8"), "text/markdown"
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text, mime_type=mime)])

    def _report_path(self) -> str:
        try:
            cfg = load_config(self.config)
            index = TagPaths.of(cfg.root, cfg.state_dir, resolve_tag(cfg, self.tag)).report / "index.html"
        except DitarError as exc:
            return f"no report: {exc}"
        return str(index) if index.is_file() else f"no report yet at {index}: `dit-ar report` writes it"


REPORT = "ditar://report/latest"
INTERRUPT_GRACE_S = 30  # a gated run interrupted records no verdict and reverts nothing; then it is killed


async def _interrupt(proc: anyio.abc.Process) -> None:
    """The child's process group, as a user's Ctrl-C reaches it (SIGINT), then killed if still there."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        with anyio.move_on_after(INTERRUPT_GRACE_S, shield=True):
            await proc.wait()
        if proc.returncode is not None:
            return


async def _progress(ctx: ServerRequestContext, stream: ByteReceiveStream | None, keep: list[str]) -> None:
    """Each stderr line of the child: a progress notification (when the caller asked for progress),
    the last ones kept for an error's text."""
    if stream is None:
        return
    n, pending = 0, b""
    async for chunk in stream:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip()
            if not line:
                continue
            keep.append(line)
            del keep[:-40]
            n += 1
            await ctx.session.report_progress(n, None, line[:500])


def _result(tool: agent_tools.Tool, out: bytes, rc: int, err_lines: list[str]) -> types.CallToolResult:
    try:
        doc = json.loads(out)
    except ValueError:  # the CLI stopped before its document: a usage or config error, said on stderr
        said = "\n".join(err_lines[-12:]) or "(nothing on stderr)"
        return _error(f"the {tool.name} tool's `dit-ar` command exited {rc} without its document:\n{said}")
    problems = list(_schema_problems(doc, tool.kind))
    if problems:
        return _error(f"dit-ar's {tool.kind} document breaks pytest_ditar/schemas/{tool.kind}.schema.json "
                      f"(a bug of the judge; report it): " + "; ".join(problems[:5]))
    structured = {"tool": tool.name, "exit_status": rc, "next": agent_tools.next_of(tool, doc), "document": doc}
    refused = agent_tools.refusal(doc)
    if refused:
        return types.CallToolResult(content=[types.TextContent(type="text", text=refused)],
                                    structured_content=structured, is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(structured, indent=1))],
                                structured_content=structured)


def _schema_problems(doc: object, kind: str) -> Iterator[str]:
    validator = jsonschema.Draft202012Validator(agent_tools.schema(kind))
    for e in validator.iter_errors(doc):
        yield f"/{'/'.join(map(str, e.absolute_path))}: {e.message}"


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def serve(config: Path, tag: str | None) -> None:
    """Serve on stdio until the client closes it."""
    judge = Judge(config, tag)
    server: Server = Server("pytest-ditar", instructions=INSTRUCTIONS, on_list_tools=judge.list_tools,
                                 on_call_tool=judge.call_tool, on_list_resources=judge.list_resources,
                                 on_read_resource=judge.read_resource)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
