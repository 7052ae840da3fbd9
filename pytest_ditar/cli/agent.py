"""`dit-ar mcp`: the research loop as tools an agent host calls, a Model Context Protocol server on
stdio (cli.agent_server). The `mcp` SDK is the optional `agent` extra: it is imported here only when
the command runs, so the plugin and every other command start without it."""
from __future__ import annotations

import argparse
import sys

from pytest_ditar.cli.command import Command, config_path

INSTALL = "pip install -e '.[agent]'"


class Mcp(Command):
    name = "mcp"
    help = "serve the loop's commands as MCP tools on stdio, for an agent host (the `agent` extra)"
    description = ("A Model Context Protocol server on stdio: the tools doctor, suite, status, profile, try_change, "
                   "experiment, compare and search each run the same `dit-ar ... --json` command and return its "
                   "document with the next step; program.md and the docs are resources. Configure an agent host "
                   "with command `dit-ar`, args [\"mcp\"] (README).")

    @classmethod
    def run(cls, args: argparse.Namespace) -> int:
        try:
            # start-up: the SDK loads only for this command (the optional `agent` extra)
            from pytest_ditar.cli import agent_server
        except ImportError as exc:
            if (exc.name or "").split(".")[0] not in ("mcp", "anyio", "jsonschema"):
                raise
            print(f"dit-ar: error: `dit-ar mcp` needs the MCP SDK, which is not installed ({exc}): {INSTALL}",
                  file=sys.stderr)
            return 2
        agent_server.serve(config_path(args), args.tag)
        return 0
