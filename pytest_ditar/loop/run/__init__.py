"""A gated run's resources and bookkeeping: the session, its results, the classes, the champion
lookup, the holdout, verify, options, phases. Imports loop.integrity only (contract `loop-layers`).
"""
