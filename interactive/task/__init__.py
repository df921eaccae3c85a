"""The decorated call on the main thread: ``@vscode``, running the task, retries,
preemption (SIGTERM) and warming imports while the task runs.

Runs on: the pod, on the task's own thread. May import: every layer but ``cli``.
"""
