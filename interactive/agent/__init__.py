"""The coding agent's door: ``podcode mcp``, a Model Context Protocol server over stdio
that reaches sessions the way ``podcode attach`` does (the session record locally, the
Kubernetes API's port-forward for a pod) and speaks to them through the one control-API
client. Imported only by the ``mcp`` command, lazily (it brings the ``mcp`` SDK).

Runs on: the engineer's machine (or wherever the agent runs). May import: ``base``,
``storage``, ``kube``.
"""
