"""Long end-to-end runs through `dit-ar` and `pytest` (the agent's loop, undecided runs, xdist,
the lower-bound smoke set, compile caches, sequential lanes, a noisy host, the documented commands,
the report's rendering, crashes, a judge killed mid-run, the semantic gates, ten A/A lanes), run only
when named, so `pytest tests` stays inside its ten minutes: the core tier in .ci/run beside the
adversarial battery (`python -m pytest tests/e2e tests/adversarial -n 2 --dist worksteal -m 'not
long'`), the long tier (tests/conftest.py LONG, and the `solo` tests that make their own load, alone)
in .ci/run-long."""
