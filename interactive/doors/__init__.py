"""The doors into one open session: the control API, the IDE (code-server or JupyterLab)
and its ``.vscode`` files, the notebook whose cells run in the failed frame
(``notebook/``), SSH, the desktop editors' endpoint, the login page, the language
server, and a coding agent's routes (``agent_routes``: the failure, its frames and locals,
evaluation, the workspace's files and edits; ``actors``: an agent's calls recorded or
refused). Each door serves the session through the methods the session hands it
(Protocols, never the ``Session`` class): the session (:mod:`interactive.session`) starts
and stops them, and a door never imports it.

Runs on: the pod, on the session's threads. May import: ``base``, ``storage``, ``kube``,
``reaper``, ``distributed``, ``inputs``.
"""
