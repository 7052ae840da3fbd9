"""Long end-to-end runs through `dit-ar` and `pytest` (the agent's loop, undecided runs, xdist,
the lower-bound smoke set, compile caches, sequential lanes): CI's own step,
`python -m pytest tests/e2e -n 2`, so `pytest tests` stays inside its ten minutes."""
