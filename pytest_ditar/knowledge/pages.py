"""Handbook pages: markdown files with YAML frontmatter, split into sections and checkable units.

A page is a markdown file under the handbook directory (README.md and dot-folders excluded); see
``knowledge/handbook/README.md``. Search indexes its sections; the lint checks its frontmatter
and its units (paragraphs, list items, table rows). Light on purpose: no torch, no bm25s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SKIP_NAMES = {"README.md"}

_FRONTMATTER_RE = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.S)
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE_RE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
FOOTNOTE_DEF_RE = re.compile(r"^\s*\[\^([^\]\s]+)\]:", re.M)


@dataclass(frozen=True)
class Section:
    heading: str
    level: int
    body: str
    line: int  # 1-based line number of the heading in the file (0 for the preamble)


@dataclass(frozen=True)
class Page:
    path: Path
    rel: str
    meta: dict[str, Any]
    body: str
    body_line: int  # 1-based file line where the body starts
    sections: tuple[Section, ...] = field(default_factory=tuple)

    @property
    def title(self) -> str:
        return str(self.meta.get("title", self.rel))

    @property
    def tags(self) -> tuple[str, ...]:
        tags = self.meta.get("tags") or []
        if isinstance(tags, str):
            tags = [tags]
        return tuple(str(t) for t in tags)

    @property
    def cls(self) -> str:
        return str(self.meta.get("class", ""))


def page_files(handbook_dir: Path) -> list[Path]:
    files = [
        p
        for p in handbook_dir.rglob("*.md")
        if p.name not in SKIP_NAMES and not any(part.startswith(".") for part in p.relative_to(handbook_dir).parts)
    ]
    return sorted(files, key=lambda p: p.relative_to(handbook_dir).as_posix())


def split_frontmatter(text: str) -> tuple[dict[str, Any] | None, str, int, str | None]:
    """Return (meta, body, body_start_line, error)."""
    m = _FRONTMATTER_RE.match(text)
    if not m:
        return None, text, 1, "missing YAML frontmatter (--- ... --- at the top)"
    import yaml  # light, and only needed here

    body, body_line = text[m.end():], text[: m.end()].count("\n") + 1
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:  # pragma: no cover - message depends on yaml
        return None, body, body_line, f"invalid YAML frontmatter: {exc}"
    if not isinstance(meta, dict):
        return None, body, body_line, "frontmatter is not a mapping"
    return meta, body, body_line, None


def split_sections(body: str, title: str = "") -> tuple[Section, ...]:
    """Split a markdown body at headings (ignoring '#' lines inside code fences)."""
    sections: list[Section] = []
    heading, level, start_line = title, 0, 0
    buf: list[str] = []
    in_fence = False
    for i, line in enumerate(body.splitlines(), start=1):
        if FENCE_RE.match(line):
            in_fence = not in_fence
        m = None if in_fence else HEADING_RE.match(line)
        if m:
            text = "\n".join(buf).strip()
            if text or level:
                sections.append(Section(heading, level, text, start_line))
            heading, level, start_line, buf = m.group(2).strip(), len(m.group(1)), i, []
        else:
            buf.append(line)
    text = "\n".join(buf).strip()
    if text or level:
        sections.append(Section(heading, level, text, start_line))
    # Drop a level-1 heading section that merely repeats the title with no body.
    return tuple(s for s in sections if s.body or s.level > 1)


def load_page(path: Path, handbook_dir: Path) -> Page:
    text = path.read_text(encoding="utf-8")
    meta, body, body_line, _err = split_frontmatter(text)  # errors are the lint's business
    meta = meta or {}
    rel = path.relative_to(handbook_dir).as_posix()
    title = str(meta.get("title", rel))
    return Page(path=path, rel=rel, meta=meta, body=body, body_line=body_line,
                sections=split_sections(body, title=title))


def load_pages(handbook_dir: Path) -> list[Page]:
    """Every handbook page (README.md and dot-folders excluded), sorted by relative path."""
    handbook_dir = Path(handbook_dir)
    return [load_page(p, handbook_dir) for p in page_files(handbook_dir)]


def units(body: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """Split a page body into checkable units: table rows, list items, paragraphs.

    Returns (first line, [(line_number, text), ...]) per unit; fenced code, headings and
    footnote definitions are left out.
    """
    out: list[list[tuple[int, str]]] = []
    cur: list[tuple[int, str]] = []
    in_fence = False

    def flush() -> None:
        nonlocal cur
        if cur:
            out.append(cur)
        cur = []

    for i, line in enumerate(body.splitlines(), start=1):
        if FENCE_RE.match(line):
            flush()
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        stripped = line.strip()
        if not stripped or HEADING_RE.match(line) or FOOTNOTE_DEF_RE.match(line):
            flush()
            continue
        if stripped.startswith("|"):
            flush()
            out.append([(i, line)])
            continue
        if LIST_ITEM_RE.match(line):
            flush()
            cur = [(i, line)]
            continue
        cur.append((i, line))
    flush()
    return [(u[0][0], u) for u in out]
