"""One open debug session: its orchestration, the control API, the post-mortem
(debugpy), the notebook whose cells run in the failed frame (``notebook/``), the IDE
(code-server), the ``.vscode`` files, publishing the session and the watchdog that cleans
up if the process is killed.

Runs on: the pod, on the session's threads. May import: every layer but ``task`` and ``cli``.
"""
