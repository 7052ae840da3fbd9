"""The candidate pipeline: the only path an optimization session edits (see program.md)."""
