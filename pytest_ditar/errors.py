"""User-facing errors: each one is a single line that names the file/key and the fix."""


class DitarError(Exception):
    """A problem the user can fix; printed as one line, never with a traceback."""


class ConfigError(DitarError):
    pass


class SnapshotError(DitarError):
    pass


class CandidateError(Exception):
    """The candidate pipeline failed while running (becomes a CRASH verdict)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # exception | non_finite | oom | timeout
        self.message = message
