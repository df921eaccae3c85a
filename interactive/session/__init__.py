"""One open debug session: its orchestration (``core``: open, wait, resume, close), the
post-mortem through debugpy, delivering the fix, saving the edits as they are made
(``autosave``), publishing the session (records, the pod's labels and events) and the
watchdog that cleans up if the process is killed. The doors into the session (the control
API, the IDE, the notebook, SSH...) live in :mod:`interactive.doors`; the session starts
and stops them.

Runs on: the pod, on the session's threads. May import: every layer but ``task``,
``ray``, ``agent`` and ``cli``.
"""
