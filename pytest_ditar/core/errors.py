"""User-facing errors: each one is a single line that names the file/key and the fix."""


class DitarError(Exception):
    """A problem the user can fix; printed as one line, never with a traceback."""


class ConfigError(DitarError):
    pass


class SnapshotError(DitarError):
    pass


KINDS = ("exception", "non_finite", "oom", "timeout")
SHOWN_MAX = 2000  # characters of candidate-made text a reason may carry


def one_line(text: object, limit: int = SHOWN_MAX) -> str:
    """Text a candidate made (an exception's class name and message, a worker's log line), as the
    judge may show it: one line, every character that is not printable (newlines, carriage
    returns, ANSI escapes, Unicode line separators) written as its escape, cut at `limit` with the
    cut said. It never ends a line, so it never starts one: no line it reaches starts with
    `DITAR ` unless the judge wrote that start."""
    s = str(text)
    cut = len(s) > limit
    s = s[:limit]
    if not s.isprintable():
        s = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)
    return s + (f" [cut at {limit} characters]" if cut else "")


class CandidateError(Exception):
    """The candidate pipeline failed while running (becomes a CRASH verdict). Every field may hold
    text the candidate made (a worker sends it): each is kept as one escaped line (one_line)."""

    def __init__(self, kind: str, message: str, item: str | None = None, seconds: float | None = None,
                 where: str | None = None):
        message = one_line(message)
        where = one_line(where) if where is not None else None
        kind = kind if kind in KINDS else "exception"
        super().__init__(message)
        self.kind = kind  # exception | non_finite | oom | timeout
        self.message = message  # detail only; decision.RunError.describe adds the wording
        self.item = item
        self.seconds = seconds
        # the candidate's own innermost frame, "mutable/pipeline.py:57 in generate": where to look
        self.where = where

    def __str__(self) -> str:
        where = f" in item {self.item}" if self.item else ""
        after = f" after {self.seconds:g}s" if self.seconds is not None else ""
        label = {"exception": "candidate raised", "non_finite": "non-finite output", "oom": "out of memory",
                 "timeout": "timeout"}.get(self.kind, self.kind)
        return f"{label}{where}{after}" + (f": {self.message}" if self.message else "") \
            + (f" ({self.where})" if self.where else "")


class ReferenceFailure(DitarError):
    """A reference the candidate is timed against (the champion, its twin) could not be built or
    timed. The judge's failure, never the candidate's: the run is refused, nothing is recorded, and
    no lane falls back to numbers the reference's own code produced (its stored samples)."""
