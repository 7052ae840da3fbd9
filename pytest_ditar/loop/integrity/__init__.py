"""What a run may trust: the state's backup and pins, the guards, the judge's environment and
tree, the roles' code, the stamps. Imports nothing else of loop (contract `loop-layers`).
"""
