"""tests.log: what a gated run's tests reported, one line a test, each distinct failure's text once.

A candidate that raises fails every corpus item with the same error; written per item, the one
line that matters drowns in copies (24 of them for 12 items, once). So a failure already seen is
one line naming the first test that hit it, while the run goes (what a killed run leaves), and at
the end of the run the log is rewritten with each such error as one block: "the same error on 12
items: ..." and its text, once. The plugin shortens pytest's own report of a repeat the same way."""
from __future__ import annotations

from pathlib import Path

from pytest_ditar.store.atomic import write_text_atomic

LOG = "tests.log"  # in the run directory


class TestLog:
    __test__ = False  # a class named Test*: not a test class for pytest

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, str | None]] = []  # (nodeid, "when outcome", failure text)
        self.hits: dict[str, list[str]] = {}  # failure text -> the tests that failed with it, in order

    def add(self, nodeid: str, when: str, outcome: str, longrepr: str, run_dir: Path | None) -> str | None:
        """Note one report, appended to `run_dir`/tests.log where given (a gated run). Returns, for a
        failure whose text an earlier test failed with already, that test's id (else None)."""
        text = longrepr if outcome == "failed" and longrepr.strip() else None
        self.entries.append((nodeid, f"{when} {outcome}", text))
        line, first = f"{nodeid} {when} {outcome}\n", None
        if text is not None:
            ids = self.hits.setdefault(text, [])
            ids.append(nodeid)
            first = ids[0] if len(ids) > 1 else None
            line = f"{line[:-1]}: the same error as {first}\n" if first else f"{line}{text}\n\n"
        if run_dir is not None:
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
                with open(run_dir / LOG, "a") as fh:
                    fh.write(line)
            except OSError:
                pass  # a log lost to a candidate that removed the run's directory: the gate finds the damage
        return first

    def collapsed(self) -> bool:
        """Whether any error hit more than one test (then `render` differs from the live log)."""
        return any(len(ids) > 1 for ids in self.hits.values())

    def render(self) -> str:
        """The whole log, in report order, each failure text once: where several tests hit it, one
        block at its first hit names them all."""
        out, written = [], set()
        for nodeid, what, text in self.entries:
            if text is None:
                out.append(f"{nodeid} {what}\n")
                continue
            if text in written:
                continue
            written.add(text)
            ids = self.hits[text]
            head = f"{nodeid} {what}" if len(ids) == 1 else \
                f"the same error on {len(ids)} items ({what}): " + ", ".join(ids)
            out.append(f"{head}\n{text}\n\n")
        return "".join(out)

    def close(self, run_dir: Path) -> None:
        """At the end of a gated run: tests.log rewritten collapsed, where anything repeated."""
        if self.collapsed():
            try:
                write_text_atomic(run_dir / LOG, self.render())
            except OSError:
                pass  # a convenience: the live log is there already
