"""`dit-ar mcp`'s tools, without the MCP SDK: each tool's arguments, the `dit-ar ... --json` command
line it runs, the schema of the document it returns, and what an agent host is told on a refusal.

The server judges nothing itself: a tool is the CLI's entry point run as a child process
(`python -m pytest_ditar.cli`), its arguments given as option values (`--opt=value`) or after
`--`, so no value can become another option, and nothing is added to the command line the CLI's
own flags would not be (no pytest arguments) or to its environment. What the child prints on
stdout is the tool's document; its stderr is the run's progress. cli.agent_server speaks MCP
around this module; the plugin and the rest of the CLI never import either.
"""
from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pytest_ditar.cli.experiment import CLASS_HELP
from pytest_ditar.core.vocabulary import CLASSES

Args = Mapping[str, object]
Json = dict[str, object]
# The step after a document that carries none of its own (compare's, search's): what the loop does next.
AFTER = {
    "compare": "cite the objective lane's figure as its `how` says (`chained`: the champion's, over the baseline); "
               "then the next hypothesis: `dit-ar search \"...\"`, edit mutable/, `dit-ar try`",
    "search": "read the sections named (this server's handbook resources hold the pages), then one hypothesis "
              "against the bottleneck: edit mutable/, `dit-ar try` (the try_change tool), commit, `dit-ar experiment`",
}


@dataclass(frozen=True)
class Param:
    """One argument of a tool, as an agent host shows it (its input schema) and as it is checked."""

    type: str  # "string" or "boolean"
    required: bool
    description: str
    enum: tuple[str, ...] = ()

    def schema(self) -> Json:
        return {"type": self.type, "description": self.description, **({"enum": list(self.enum)} if self.enum else {})}


CLASS_ARG = Param("string", True, CLASS_HELP, CLASSES)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    params: Mapping[str, Param]
    argv: Callable[[Args], list[str]]  # the `dit-ar` arguments after the global ones, `--json` included
    kind: str  # its document's schema: pytest_ditar/schemas/<kind>.schema.json
    gated: bool = False  # times or judges the candidate: one such run at a time

    def input_schema(self) -> Json:
        return {"type": "object", "additionalProperties": False,
                "properties": {k: p.schema() for k, p in self.params.items()},
                "required": [k for k, p in self.params.items() if p.required]}


def _opt(name: str, args: Args, key: str) -> list[str]:
    return [f"--{name}={args[key]}"] if args.get(key) not in (None, "") else []


TOOLS: tuple[Tool, ...] = (
    Tool("doctor", "`dit-ar doctor --json`: branch, tree, baseline, config, versions, device and the host now "
         "(a few seconds of A/A rounds unless no_probe); each check's row and the fix for a FAIL.",
         {"no_probe": Param("boolean", False, "skip the host probe (the A/A rounds of the objective lane)")},
         lambda a: ["doctor", "--json", *(["--no-probe"] if a.get("no_probe") else [])], "doctor"),
    Tool("suite", "`dit-ar suite --json`: the active suite as the candidate meets it, the class floors and the "
         "classes this session can judge.", {}, lambda a: ["suite", "--json"], "suite"),
    Tool("status", "`dit-ar status --json`: baseline, champion (cite `champion.cumulative`), recent experiments, "
         "tries, ledger chain.", {}, lambda a: ["status", "--json"], "status"),
    Tool("profile", "`dit-ar profile --json`: one call of the working tree's candidate under torch.profiler, by "
         "pipeline phase; records nothing.",
         {"lane": Param("string", False, "the lane whose batch and steps it runs (default: the objective lane)"),
          "against": Param("string", False, "also profile this ref (a commit, `champion` or `baseline`) on the "
                                            "same request, and show the difference")},
         lambda a: ["profile", "--json", *_opt("lane", a, "lane"), *_opt("against", a, "against")], "profile",
         gated=True),
    Tool("try_change", "`dit-ar try --json`: the working tree against the champion with the gate's lanes and the "
         "class's quality floors; no verdict, no ledger row, no git. FASTER: commit it with its `Ditar-Class:` "
         "trailer, then the experiment tool.",
         {"classification": CLASS_ARG,
          "description": Param("string", True, "the idea in a few words (noted in tried.jsonl)")},
         lambda a: ["try", f"--classification={a['classification']}", f"--description={a['description']}", "--json"],
         "verdict", gated=True),
    Tool("experiment", "`dit-ar experiment --json`: the full gate on the committed candidate (one hypothesis, "
         "committed with its `Ditar-Class:` trailer): KEEP, DISCARD (reverted), CRASH (reverted) or REFUSED; "
         "recorded in the ledger.",
         {"classification": CLASS_ARG,
          "description": Param("string", True, "the hypothesis in one line (ledger, summary, report)")},
         lambda a: ["experiment", f"--classification={a['classification']}", f"--description={a['description']}",
                    "--json"], "verdict", gated=True),
    Tool("compare", "`dit-ar compare A B --json`: two timed sides lane by lane under the gate's rules; reads only.",
         {"a": Param("string", True, "baseline, champion, a run dir, a run number (3 or run:3) or a commit"),
          "b": Param("string", True, "the side judged against A, named the same ways")},
         lambda a: ["compare", "--json", "--", str(a["a"]), str(a["b"])], "compare"),
    Tool("search", "`dit-ar search --json`: BM25 over the research handbook's sections. Write the mechanism, the "
         "bottleneck and model/hardware terms.",
         {"query": Param("string", True, "search terms, e.g. 'cuda graphs scheduler batch 1'")},
         lambda a: ["search", "--json", "--", str(a["query"])], "search"),
)
BY_NAME = {t.name: t for t in TOOLS}
_JSON_TYPES: dict[str, type] = {"string": str, "boolean": bool}


def argument_problem(tool: Tool, args: Args) -> str | None:
    """Why `args` cannot be `tool`'s (an unknown or missing argument, a wrong type, a class outside
    the vocabulary), naming the fix; None where they can."""
    unknown = sorted(set(args) - set(tool.params))
    if unknown:
        return (f"{tool.name}: unknown argument(s) {', '.join(unknown)}; it takes "
                f"{', '.join(tool.params) or 'no arguments'}")
    for key, p in tool.params.items():
        if key not in args or args[key] is None:
            if p.required:
                return f"{tool.name}: argument {key} is required"
            continue
        value = args[key]
        if not isinstance(value, _JSON_TYPES[p.type]):
            return f"{tool.name}: argument {key} must be a {p.type}, not {type(value).__name__}"
        if isinstance(value, str) and "\0" in value:
            return f"{tool.name}: argument {key} holds a NUL character"
        if p.enum and value not in p.enum:
            return (f"{tool.name}: {key} {value!r} is not a class this judge knows: one of {', '.join(p.enum)} "
                    f"({p.description})")
    return None


def command(tool: Tool, args: Args, config: Path, tag: str | None) -> list[str]:
    """The child's command line: the CLI's own entry point, under this interpreter."""
    return [sys.executable, "-m", "pytest_ditar.cli", f"--config={config}", *([f"--tag={tag}"] if tag else []),
            *tool.argv(args)]


@functools.cache  # read once per server: every listing and every result reads it (callers never mutate it)
def schema(kind: str) -> Json:
    loaded: Json = json.loads((resources.files("pytest_ditar") / "schemas" / f"{kind}.schema.json").read_text())
    return loaded


def output_schema(tool: Tool) -> Json:
    """The tool result's structured content: the document (its shipped schema, whose `$defs` move to
    this schema's root, where its `#/$defs/...` references then resolve), its exit status and next step."""
    doc = schema(tool.kind)
    inner = {k: v for k, v in doc.items() if k not in ("$schema", "$id", "$defs")}
    out: Json = {"$schema": doc["$schema"], "type": "object", "required": ["tool", "exit_status", "next", "document"],
           "properties": {"tool": {"const": tool.name}, "exit_status": {"type": "integer"},
                          "next": {"type": ["string", "null"]}, "document": inner},
           "additionalProperties": False}
    if "$defs" in doc:
        out["$defs"] = doc["$defs"]
    return out


def refusal(doc: object) -> str | None:
    """A document that says the run was refused (nothing judged): its reason and next step."""
    if not isinstance(doc, dict) or "REFUSED" not in (doc.get("verdict"), doc.get("outcome")):
        return None
    return f"REFUSED: {doc.get('reason') or doc.get('line')}" + (f"\nnext: {doc['next']}" if doc.get("next") else "")


def next_of(tool: Tool, doc: object) -> str | None:
    if isinstance(doc, dict) and "next" in doc:
        return doc["next"] if isinstance(doc["next"], str) else None
    return AFTER.get(tool.name)


@dataclass(frozen=True)
class InFlight:
    tool: str
    pid: int | None  # None until the child has started
    started: float  # time.time()

    def busy(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started))
        who = f"pid {self.pid}" if self.pid is not None else "starting"
        return (f"busy: {self.tool} is running ({who}, started {when}); one gated run (try_change, experiment, "
                "profile) at a time: wait for its result, then call again")


class RunSlot:
    """The one gated run in flight. The server runs on one event loop: a claim is checked and taken
    with no await between, so two concurrent calls cannot both take it."""

    def __init__(self) -> None:
        self.current: InFlight | None = None

    def claim(self, tool: str) -> str | None:
        """Take the slot for `tool`; the busy error naming the run in flight where it is taken."""
        if self.current is not None:
            return self.current.busy()
        self.current = InFlight(tool, None, time.time())
        return None

    def started(self, pid: int) -> None:
        if self.current is not None:
            self.current = InFlight(self.current.tool, pid, self.current.started)

    def release(self) -> None:
        self.current = None
