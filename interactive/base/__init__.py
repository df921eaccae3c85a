"""The base layer: what every other layer shares, and nothing that runs.

Owns the types (:class:`~interactive.base.types.TaskRef`, the clock), the errors, the
settings and where ``$PODCODE_HOME`` is, whether podcode runs in a process and podcode's
log lines on the task's output, the session's phases and commands, the
session's observable state, its ``session.json`` record (one writer, one reader), atomic
file writes and VS Code's JSON with comments, task-name-to-folder, listening ports,
process identity, the one helper that starts podcode's threads, the session's event
loop, the one module that reaches into debugpy's internals (``pydevd``), and the control
API's paths (``routes``) with its one client (``control_client``), which every door that
reaches a session from outside uses.

Runs on: the pod and the laptop. May import: the standard library and small pure
dependencies only (no jinja2, aiohttp, kubernetes or debugpy: ``pydevd`` imports debugpy
inside its functions, once a session needs it); nothing else of podcode.
"""
