"""The performance lanes: the workers' start-up, measuring, the lanes' evidence, reach, the host
probe, the profile. Imports loop.run and loop.integrity (contract `loop-layers`).
"""
