"""Storage that outlives the pod: the store (a local folder or an fsspec URL),
checkpoints, cached task outputs, the hashing behind their keys, the aligned
pickle-buffer format shared by captured inputs and cached outputs, the workspace
snapshot and the engineer's saved edits.

Runs on: the pod (and the laptop, to read saved patches). May import: ``base``.
"""
