"""Resume with the edited code: planning the resume (which definitions changed,
whether the captured inputs still bind) and patching the live functions in place.

Runs on: the pod, planned on the control API's thread and applied on the task's.
May import: ``base``, ``storage``, ``inputs``.
"""
