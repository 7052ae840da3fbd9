"""The fleet: a champion shared through a git remote, and its view. Imports loop.run and
loop.integrity (contract `loop-layers`).
"""
