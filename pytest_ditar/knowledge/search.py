"""Handbook search: BM25 (bm25s) over the sections of the markdown handbook.

A page is a markdown file under the handbook directory with YAML frontmatter (see
``knowledge/handbook/README.md``). Pages are split at markdown headings; each section becomes
one BM25 document made of the page title, the heading (repeated, to boost heading matches),
the body and the page tags. The index is cached on disk under ``<handbook>/../.index/<key>/``
where ``key`` hashes every page's relative path, mtime and size plus the index format
version, so editing, adding or removing a page rebuilds it on the next search.

This module is import-light on purpose: it never imports torch or diffusers; bm25s (numpy,
scipy) is imported lazily inside the functions that need it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INDEX_FORMAT_VERSION = "3"
REQUIRED_KEYS = ("title", "tags", "class", "hardware", "evidence")
VALID_CLASSES = ("exact", "numerical", "approximate", "quantization", "reference")
VALID_EVIDENCE = ("measured-here", "published", "hypothesis")
VALID_HARDWARE = ("a5500", "any", "ampere", "h200", "multi-gpu")
SKIP_NAMES = {"README.md"}
HEADING_BOOST = 3  # heading tokens are repeated this many times in the indexed text
TITLE_BOOST = 1

_FRONTMATTER_RE = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.S)
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_TOKEN_RE = re.compile(r"[a-z0-9][a-z0-9_+]*(?:[.][a-z0-9_]+)*")


# --------------------------------------------------------------------------- data


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


@dataclass(frozen=True)
class Hit:
    path: str  # relative to the handbook directory, posix separators
    heading: str
    score: float
    snippet: str
    title: str
    tags: tuple[str, ...]
    cls: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "heading": self.heading,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "title": self.title,
            "tags": list(self.tags),
            "class": self.cls,
        }


# --------------------------------------------------------------------------- parsing


def _page_files(handbook_dir: Path) -> list[Path]:
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

    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:  # pragma: no cover - message depends on yaml
        return None, text[m.end():], text[: m.end()].count("\n") + 1, f"invalid YAML frontmatter: {exc}"
    if not isinstance(meta, dict):
        return None, text[m.end():], text[: m.end()].count("\n") + 1, "frontmatter is not a mapping"
    return meta, text[m.end():], text[: m.end()].count("\n") + 1, None


def split_sections(body: str, title: str = "") -> tuple[Section, ...]:
    """Split a markdown body at headings (ignoring '#' lines inside code fences)."""
    sections: list[Section] = []
    heading, level, start_line, buf = title, 0, 0, []
    in_fence = False
    for i, line in enumerate(body.splitlines(), start=1):
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _HEADING_RE.match(line)
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
    meta, body, body_line, _err = split_frontmatter(text)
    meta = meta or {}
    rel = path.relative_to(handbook_dir).as_posix()
    page = Page(path=path, rel=rel, meta=meta, body=body, body_line=body_line)
    sections = split_sections(body, title=page.title)
    return Page(path=path, rel=rel, meta=meta, body=body, body_line=body_line, sections=sections)


def load_pages(handbook_dir: Path) -> list[Page]:
    """Every handbook page (README.md and dot-folders excluded), sorted by relative path."""
    handbook_dir = Path(handbook_dir)
    return [load_page(p, handbook_dir) for p in _page_files(handbook_dir)]


def validate_frontmatter(page: Page) -> list[str]:
    """Errors in a page's frontmatter; an empty list means valid."""
    text = page.path.read_text(encoding="utf-8")
    meta, _body, _line, err = split_frontmatter(text)
    if err:
        return [f"{page.rel}: {err}"]
    assert meta is not None
    errors = []
    for key in REQUIRED_KEYS:
        if key not in meta:
            errors.append(f"{page.rel}: missing key '{key}'")
    if "title" in meta and (not isinstance(meta["title"], str) or not meta["title"].strip()):
        errors.append(f"{page.rel}: 'title' must be a non-empty string")
    if "tags" in meta:
        tags = meta["tags"]
        if not isinstance(tags, list) or not tags or not all(isinstance(t, str) and t.strip() for t in tags):
            errors.append(f"{page.rel}: 'tags' must be a non-empty list of strings")
    if "class" in meta and meta["class"] not in VALID_CLASSES:
        errors.append(f"{page.rel}: 'class' must be one of {VALID_CLASSES}, got {meta['class']!r}")
    if "hardware" in meta and meta["hardware"] not in VALID_HARDWARE:
        errors.append(f"{page.rel}: 'hardware' must be one of {VALID_HARDWARE}, got {meta['hardware']!r}")
    if "evidence" in meta and meta["evidence"] not in VALID_EVIDENCE:
        errors.append(f"{page.rel}: 'evidence' must be one of {VALID_EVIDENCE}, got {meta['evidence']!r}")
    return errors


# --------------------------------------------------------------------------- tokenizing

_STOPWORDS: frozenset[str] | None = None


def _stopwords() -> frozenset[str]:
    global _STOPWORDS
    if _STOPWORDS is None:
        from bm25s.stopwords import STOPWORDS_EN

        _STOPWORDS = frozenset(STOPWORDS_EN)
    return _STOPWORDS


def _stem(tok: str) -> str:
    """A tiny, deterministic suffix folder (plurals, -ing, -ed); enough for a handbook."""
    if len(tok) <= 3 or not tok.isalpha():
        return tok
    for suf, rep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if tok.endswith(suf) and len(tok) - len(suf) >= 3:
            if suf == "s" and tok.endswith(("ss", "us", "is")):
                return tok
            if suf == "es" and not tok.endswith(("shes", "ches", "xes", "zes", "sses")):
                continue
            return tok[: len(tok) - len(suf)] + rep
    return tok


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens; dotted names also yield their parts (torch.compile -> torch, compile)."""
    stop = _stopwords()
    out: list[str] = []
    for raw in _TOKEN_RE.findall(text.lower()):
        parts = [raw]
        if "." in raw or "_" in raw:
            parts += [p for p in re.split(r"[._]", raw) if p]
        for p in parts:
            if len(p) < 2 and not p.isdigit():
                continue
            if p in stop:
                continue
            out.append(_stem(p))
    return out


def _section_text(page: Page, sec: Section) -> str:
    heading = sec.heading if sec.heading != page.title else ""
    return "\n".join(
        [(page.title + " ") * TITLE_BOOST, (heading + " ") * HEADING_BOOST, sec.body, " ".join(page.tags)]
    )


# --------------------------------------------------------------------------- index


def _index_root(handbook_dir: Path) -> Path:
    return handbook_dir.parent / ".index"


def index_key(handbook_dir: Path) -> str:
    h = hashlib.sha256(f"ditar-knowledge-v{INDEX_FORMAT_VERSION}:{TITLE_BOOST}:{HEADING_BOOST}\n".encode())
    code = Path(__file__).stat()  # indexing code changed -> rebuild
    h.update(f"{code.st_mtime_ns}\0{code.st_size}\n".encode())
    for p in _page_files(handbook_dir):
        st = p.stat()
        h.update(f"{p.relative_to(handbook_dir).as_posix()}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
    return h.hexdigest()[:20]


def _snippet_source(sec_body: str) -> str:
    """One line per paragraph / list item / table row (code, headings, footnote defs dropped)."""
    out = []
    for _first, unit in _units(sec_body):
        line = " ".join(text.strip() for _, text in unit)
        line = _LIST_ITEM_RE.sub("", line).strip()
        if line and not re.fullmatch(r"\|?[\s:|-]+\|?", line):
            out.append(line)
    return "\n".join(out)


def _build(handbook_dir: Path, out_dir: Path) -> None:
    import bm25s

    pages = load_pages(handbook_dir)
    meta, corpus = [], []
    for page in pages:
        for sec in page.sections:
            corpus.append(tokenize(_section_text(page, sec)) or ["__empty__"])
            meta.append(
                {
                    "path": page.rel,
                    "heading": sec.heading,
                    "title": page.title,
                    "tags": list(page.tags),
                    "cls": page.cls,
                    "text": _snippet_source(sec.body),
                }
            )
    if not corpus:
        corpus, meta = [["__empty__"]], [None]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    tmp = out_dir.with_name(out_dir.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    retriever.save(str(tmp), corpus=None, show_progress=False)
    (tmp / "sections.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    try:
        os.replace(tmp, out_dir)
    except OSError:  # another process won the race; use theirs
        shutil.rmtree(tmp, ignore_errors=True)


_MEMO: dict[str, tuple[Any, list[Any]]] = {}


def _load_index(handbook_dir: Path) -> tuple[Any, list[Any]]:
    handbook_dir = Path(handbook_dir).resolve()
    key = index_key(handbook_dir)
    memo_key = f"{handbook_dir}:{key}"
    if memo_key in _MEMO:
        return _MEMO[memo_key]
    root = _index_root(handbook_dir)
    out_dir = root / key
    if not (out_dir / "sections.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        for old in root.iterdir():  # stale indexes of earlier handbook states
            if old.is_dir() and old.name != key:
                shutil.rmtree(old, ignore_errors=True)
        _build(handbook_dir, out_dir)
    import bm25s

    retriever = bm25s.BM25.load(str(out_dir), load_corpus=False, mmap=False)
    meta = json.loads((out_dir / "sections.json").read_text(encoding="utf-8"))
    _MEMO.clear()
    _MEMO[memo_key] = (retriever, meta)
    return retriever, meta


def _make_snippet(text: str, qtokens: set[str], width: int = 180) -> str:
    best, best_score = "", -1
    for line in text.splitlines():
        score = len(set(tokenize(line)) & qtokens)
        if score > best_score:
            best, best_score = line, score
    best = re.sub(r"\s+", " ", best).strip()
    if len(best) <= width:
        return best
    # centre the window on the first word that matches the query
    start = 0
    for m in re.finditer(r"\S+", best):
        if set(tokenize(m.group(0))) & qtokens:
            start = best.rfind(" ", 0, max(0, m.start() - width // 4)) + 1
            break
    window = best[start : start + width - 6].strip()
    return ("..." if start else "") + window + "..."


def search(
    handbook_dir: Path,
    query: str,
    k: int = 5,
    tag: str | None = None,
    cls: str | None = None,
) -> list[Hit]:
    """Top-k handbook sections for ``query`` (BM25 via bm25s), optionally filtered by tag/class."""
    qtokens = tokenize(query)
    if not qtokens or k <= 0:
        return []
    retriever, meta = _load_index(Path(handbook_dir))
    import numpy as np

    scores = np.asarray(retriever.get_scores(qtokens), dtype=float)
    if tag is not None or cls is not None:
        tag_l = tag.lower() if tag else None
        mask = np.array(
            [
                m is not None
                and (tag_l is None or tag_l in (t.lower() for t in m["tags"]))
                and (cls is None or m["cls"] == cls)
                for m in meta
            ],
            dtype=bool,
        )
        scores = np.where(mask, scores, -np.inf)
    order = np.argsort(-scores, kind="stable")
    qset = set(qtokens)
    hits: list[Hit] = []
    for i in order[: max(k * 3, k)]:
        s = float(scores[i])
        if not np.isfinite(s) or s <= 0 or meta[i] is None:
            continue
        m = meta[i]
        hits.append(
            Hit(
                path=m["path"],
                heading=m["heading"],
                score=s,
                snippet=_make_snippet(m["text"], qset),
                title=m["title"],
                tags=tuple(m["tags"]),
                cls=m["cls"],
            )
        )
        if len(hits) >= k:
            break
    return hits


# --------------------------------------------------------------------------- number sources
# The convention is documented in knowledge/handbook/README.md ("Number-source convention").

_UNIT = (
    r"(?:GB/s|TB/s|MB/s|TFLOP/s|GFLOP/s|TFLOPS|GFLOPS|TFLOP|GFLOP|TOPS|GiB|GB|MiB|MB|KiB|KB"
    r"|ms|us|µs|ns|s|%(?!\s*(?:CI|confidence))|W|MHz|GHz|GT/s)"
)
# A factor is written attached ("1.18x", "2x"); "16 x 72" with spaces is a shape product.
MEASUREMENT_RE = re.compile(
    r"(?<![\w.^])\d+(?:[.,]\d+)*(?:\s?" + _UNIT + r"(?![\w/])|[x×](?![\w/]))"
)
_FOOTNOTE_REF_RE = re.compile(r"\[\^([^\]\s]+)\]")
_FOOTNOTE_DEF_RE = re.compile(r"^\s*\[\^([^\]\s]+)\]:", re.M)
_INLINE_CODE_RE = re.compile(r"`[^`]*`")
_MARKER_RES = (
    re.compile(r"\(source:", re.I),
    re.compile(r"measured\s+here\s+on", re.I),
    re.compile(r"\(derived:", re.I),
    re.compile(r"\(hypothesis", re.I),
)
_LIST_ITEM_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def _units(body: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """Split a page body into checkable units: table rows, list items, paragraphs.

    Returns (kind-agnostic) lists of (line_number, text) per unit; fenced code, headings and
    footnote definitions are left out.
    """
    units: list[list[tuple[int, str]]] = []
    cur: list[tuple[int, str]] = []
    in_fence = False

    def flush() -> None:
        nonlocal cur
        if cur:
            units.append(cur)
        cur = []

    for i, line in enumerate(body.splitlines(), start=1):
        if _FENCE_RE.match(line):
            flush()
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        stripped = line.strip()
        if not stripped or _HEADING_RE.match(line) or _FOOTNOTE_DEF_RE.match(line):
            flush()
            continue
        if stripped.startswith("|"):
            flush()
            units.append([(i, line)])
            continue
        if _LIST_ITEM_RE.match(line):
            flush()
            cur = [(i, line)]
            continue
        cur.append((i, line))
    flush()
    return [(u[0][0], u) for u in units]


def unsourced_numbers(page: Page) -> list[str]:
    """Lines of ``page`` with a measurement-like number and no source marker in their unit."""
    defs = set(_FOOTNOTE_DEF_RE.findall(page.body))
    problems = []
    for _first, unit in _units(page.body):
        text = _INLINE_CODE_RE.sub(" code ", "\n".join(line for _, line in unit))
        refs = set(_FOOTNOTE_REF_RE.findall(text))
        sourced = bool(refs & defs) or any(r.search(text) for r in _MARKER_RES)
        for lineno, line in unit:
            clean = _INLINE_CODE_RE.sub(" code ", line)
            m = MEASUREMENT_RE.search(clean)
            if m and not sourced:
                problems.append(
                    f"{page.rel}:{page.body_line + lineno - 1}: '{m.group(0)}' has no source marker: {line.strip()[:100]}"
                )
    return problems


def undefined_footnotes(page: Page) -> list[str]:
    defs = set(_FOOTNOTE_DEF_RE.findall(page.body))
    body = "\n".join(ln for ln in page.body.splitlines() if not _FOOTNOTE_DEF_RE.match(ln))
    refs = set(_FOOTNOTE_REF_RE.findall(_INLINE_CODE_RE.sub("", body)))
    return [f"{page.rel}: footnote [^{r}] has no definition" for r in sorted(refs - defs)]
