"""The gate and its steps: preflight, the decision, the record, the baseline, the next-step line,
what a run leaves for CI. The top of loop: it may import the other four (contract `loop-layers`).
"""
