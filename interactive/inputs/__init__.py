"""The task's captured inputs: saving arguments (pickle, tensors without copies)
and ``load_inputs()`` to call the task again with them.

Runs on: the pod (and in the engineer's debug runs). May import: ``base``, ``storage``.
"""
