"""Finding, installing, launching and supervising code-server and its extensions.

Modules: ``config`` (CodeServerConfig), ``locate`` (find_code_server,
ensure_code_server), ``install`` (install, ``podcode install``), ``launch``
(CodeServer), ``extensions`` (companion_vsix, install_extensions), ``errors``.
"""
