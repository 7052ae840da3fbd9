"""Handbook search: BM25 (bm25s) over the sections of the markdown handbook.

Each section of a page (see pages.py) becomes one BM25 document made of the page title, the
heading (repeated, to boost heading matches), the body and the page tags. The index is cached on
disk under ``<handbook>/../.index/<key>/`` where ``key`` hashes every page's relative path, mtime
and size plus the index format version, so editing, adding or removing a page rebuilds it on the
next search.

This module is import-light on purpose: it never imports torch or diffusers; bm25s (numpy) is
imported lazily inside the functions that need it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ditar.knowledge import pages as pages_mod
from pytest_ditar.knowledge.pages import LIST_ITEM_RE, Page, Section, load_pages, page_files, units
from pytest_ditar.store.atomic import publish_dir, temp_dir_beside

INDEX_FORMAT_VERSION = "3"
HEADING_BOOST = 3  # heading tokens are repeated this many times in the indexed text
TITLE_BOOST = 1

_TOKEN_RE = re.compile(r"[a-z0-9][a-z0-9_+]*(?:[.][a-z0-9_]+)*")


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


def _index_root(handbook_dir: Path) -> Path:
    return handbook_dir.parent / ".index"


def index_key(handbook_dir: Path) -> str:
    h = hashlib.sha256(f"ditar-knowledge-v{INDEX_FORMAT_VERSION}:{TITLE_BOOST}:{HEADING_BOOST}\n".encode())
    for module in (__file__, pages_mod.__file__):  # indexing code changed -> rebuild
        code = Path(module).stat()
        h.update(f"{code.st_mtime_ns}\0{code.st_size}\n".encode())
    for p in page_files(handbook_dir):
        st = p.stat()
        h.update(f"{p.relative_to(handbook_dir).as_posix()}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
    return h.hexdigest()[:20]


def _snippet_source(sec_body: str) -> str:
    """One line per paragraph / list item / table row (code, headings, footnote defs dropped)."""
    out = []
    for _first, unit in units(sec_body):
        line = " ".join(text.strip() for _, text in unit)
        line = LIST_ITEM_RE.sub("", line).strip()
        if line and not re.fullmatch(r"\|?[\s:|-]+\|?", line):
            out.append(line)
    return "\n".join(out)


def _build(handbook_dir: Path, out_dir: Path) -> None:
    import bm25s

    pages = load_pages(handbook_dir)
    meta: list[dict[str, Any] | None] = []
    corpus: list[list[str]] = []
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
    tmp = temp_dir_beside(out_dir)
    retriever.save(str(tmp), corpus=None, show_progress=False)
    (tmp / "sections.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    publish_dir(tmp, out_dir)  # False: another process built it first; theirs is the same index


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
    class_name: str | None = None,
) -> list[Hit]:
    """Top-k handbook sections for ``query`` (BM25 via bm25s), optionally filtered by tag/class."""
    qtokens = tokenize(query)
    if not qtokens or k <= 0:
        return []
    retriever, meta = _load_index(Path(handbook_dir))
    import numpy as np

    scores = np.asarray(retriever.get_scores(qtokens), dtype=float)
    if tag is not None or class_name is not None:
        tag_l = tag.lower() if tag else None
        mask = np.array(
            [
                m is not None
                and (tag_l is None or tag_l in (t.lower() for t in m["tags"]))
                and (class_name is None or m["cls"] == class_name)
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
