"""User-facing errors: each one is a single line that names the file/key and the fix."""


class DitarError(Exception):
    """A problem the user can fix; printed as one line, never with a traceback."""


class ConfigError(DitarError):
    pass


class SnapshotError(DitarError):
    pass


class CandidateError(Exception):
    """The candidate pipeline failed while running (becomes a CRASH verdict)."""

    def __init__(self, kind: str, message: str, item: str | None = None, seconds: float | None = None,
                 where: str | None = None):
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
