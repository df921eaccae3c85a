"""Finding, installing, launching and supervising code-server and its extensions.

Modules: ``config`` (CodeServerConfig), ``locate`` (find_code_server,
ensure_code_server), ``install`` (install, ``podcode install``), ``codeserver``
(CodeServer), ``supervised`` (SupervisedServer: start, restarts and stop of an IDE
server, code-server's and JupyterLab's), ``probe`` (readiness over HTTP), ``process``
(stopping a process tree), ``extensions`` (companion_vsix, install_extensions),
``errors``.
"""
