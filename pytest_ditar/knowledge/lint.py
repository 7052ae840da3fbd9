"""Handbook lint: valid frontmatter, a source for every measurement, defined footnotes.

What `tests/unit/knowledge/test_handbook_frontmatter.py` (and any doctor-style check) runs over
each page. The number-source convention is documented in knowledge/handbook/README.md
("Number-source convention").
"""

from __future__ import annotations

import re

from pytest_ditar.core.vocabulary import HANDBOOK_CLASSES
from pytest_ditar.knowledge.pages import FOOTNOTE_DEF_RE, Page, split_frontmatter, units

REQUIRED_KEYS = ("title", "tags", "class", "hardware", "evidence")
VALID_CLASSES = HANDBOOK_CLASSES
VALID_EVIDENCE = ("measured-here", "published", "hypothesis")
VALID_HARDWARE = ("a5500", "any", "ampere", "h200", "multi-gpu")

_UNIT = (
    r"(?:GB/s|TB/s|MB/s|TFLOP/s|GFLOP/s|TFLOPS|GFLOPS|TFLOP|GFLOP|TOPS|GiB|GB|MiB|MB|KiB|KB"
    r"|ms|us|µs|ns|s|%(?!\s*(?:CI|confidence))|W|MHz|GHz|GT/s)"
)
# A factor is written attached ("1.18x", "2x"); "16 x 72" with spaces is a shape product.
MEASUREMENT_RE = re.compile(
    r"(?<![\w.^])\d+(?:[.,]\d+)*(?:\s?" + _UNIT + r"(?![\w/])|[x×](?![\w/]))"
)
_FOOTNOTE_REF_RE = re.compile(r"\[\^([^\]\s]+)\]")
_INLINE_CODE_RE = re.compile(r"`[^`]*`")
_MARKER_RES = (
    re.compile(r"\(source:", re.I),
    re.compile(r"measured\s+here\s+on", re.I),
    re.compile(r"\(derived:", re.I),
    re.compile(r"\(hypothesis", re.I),
)


def validate_frontmatter(page: Page) -> list[str]:
    """Errors in a page's frontmatter; an empty list means valid."""
    # Re-read the file: a Page keeps an empty meta for a broken frontmatter, and the error matters here.
    meta, _body, _line, err = split_frontmatter(page.path.read_text(encoding="utf-8"))
    if err:
        return [f"{page.rel}: {err}"]
    assert meta is not None
    errors = [f"{page.rel}: missing key '{key}'" for key in REQUIRED_KEYS if key not in meta]
    if "title" in meta and (not isinstance(meta["title"], str) or not meta["title"].strip()):
        errors.append(f"{page.rel}: 'title' must be a non-empty string")
    if "tags" in meta:
        tags = meta["tags"]
        if not isinstance(tags, list) or not tags or not all(isinstance(t, str) and t.strip() for t in tags):
            errors.append(f"{page.rel}: 'tags' must be a non-empty list of strings")
    for key, valid in (("class", VALID_CLASSES), ("hardware", VALID_HARDWARE), ("evidence", VALID_EVIDENCE)):
        if key in meta and meta[key] not in valid:
            errors.append(f"{page.rel}: '{key}' must be one of {valid}, got {meta[key]!r}")
    return errors


def unsourced_numbers(page: Page) -> list[str]:
    """Lines of ``page`` with a measurement-like number and no source marker in their unit."""
    defs = set(FOOTNOTE_DEF_RE.findall(page.body))
    problems = []
    for _first, unit in units(page.body):
        text = _INLINE_CODE_RE.sub(" code ", "\n".join(line for _, line in unit))
        refs = set(_FOOTNOTE_REF_RE.findall(text))
        sourced = bool(refs & defs) or any(r.search(text) for r in _MARKER_RES)
        for lineno, line in unit:
            clean = _INLINE_CODE_RE.sub(" code ", line)
            m = MEASUREMENT_RE.search(clean)
            if m and not sourced:
                problems.append(
                    f"{page.rel}:{page.body_line + lineno - 1}: '{m.group(0)}' has no source marker: "
                    f"{line.strip()[:100]}"
                )
    return problems


def undefined_footnotes(page: Page) -> list[str]:
    defs = set(FOOTNOTE_DEF_RE.findall(page.body))
    body = "\n".join(ln for ln in page.body.splitlines() if not FOOTNOTE_DEF_RE.match(ln))
    refs = set(_FOOTNOTE_REF_RE.findall(_INLINE_CODE_RE.sub("", body)))
    return [f"{page.rel}: footnote [^{r}] has no definition" for r in sorted(refs - defs)]
