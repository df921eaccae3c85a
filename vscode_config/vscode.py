"""Render the workspace's ``.vscode`` files and merge them with the user's own."""

from __future__ import annotations

import json
from typing import Any

from vscode_config.templates import compile_templates, render

OURS = "podcode:"
POD_DEBUG_TYPE = "podcode"
"""The companion extension's debugger: the pod's code-server has no other Python debugger."""
DESKTOP_DEBUG_TYPE = "debugpy"
"""Microsoft's Python Debugger extension, in a desktop VS Code attaching to the pod."""
TEMPLATES = ("launch.json.j2", "settings.json.j2", "rerun.py.j2")
"""What a session renders into ``.vscode`` when it opens."""


def debug_type(ide: str) -> str:
    """The ``type`` of the pod's launch configurations: the companion's debugger when the
    session serves code-server, else the desktop one (``ide="none"``)."""
    return DESKTOP_DEBUG_TYPE if ide == "none" else POD_DEBUG_TYPE


def prepare() -> None:
    """Parse and compile the session's templates ahead of the session (in memory only)."""
    compile_templates(TEMPLATES)


def launch_configurations(**values: Any) -> dict[str, Any]:
    """Our launch.json, from ``launch.json.j2`` (every value is required)."""
    rendered: dict[str, Any] = json.loads(render("launch.json.j2", **values))
    return rendered


def workspace_settings(**values: Any) -> dict[str, Any]:
    rendered: dict[str, Any] = json.loads(render("settings.json.j2", **values))
    return rendered


def merge_launch(existing: Any, ours: dict[str, Any]) -> dict[str, Any]:
    """The user's configurations and compounds kept in order, ours (names starting
    ``podcode:``) replaced."""
    merged = dict(existing) if isinstance(existing, dict) else {}
    merged.setdefault("version", ours["version"])
    for key in ("configurations", "compounds"):
        theirs = merged.get(key)
        theirs = theirs if isinstance(theirs, list) else []
        kept = [
            c
            for c in theirs
            if not (isinstance(c, dict) and str(c.get("name", "")).startswith(OURS))
        ]
        if kept or ours.get(key):
            merged[key] = kept + ours.get(key, [])
    return merged


def merge_settings(existing: Any, ours: dict[str, Any]) -> dict[str, Any]:
    """The user's settings win except the interpreter, which must be the running one."""
    merged = dict(ours)
    if isinstance(existing, dict):
        merged.update(existing)
    merged["python.defaultInterpreterPath"] = ours["python.defaultInterpreterPath"]
    return merged


MCP_SERVER = "podcode"
"""The name of podcode's server in ``.vscode/mcp.json``."""


def mcp_servers(command: str, args: list[str]) -> dict[str, Any]:
    """``.vscode/mcp.json`` in VS Code's format: podcode's MCP server over stdio (the coding
    agent of the IDE reaches the session through it)."""
    return {"servers": {MCP_SERVER: {"type": "stdio", "command": command, "args": args}}}


def merge_mcp(existing: Any, ours: dict[str, Any]) -> dict[str, Any]:
    """The user's ``mcp.json`` with podcode's server added: their servers (and a server of
    their own named ``podcode``) and other keys are kept as they are."""
    merged = dict(existing) if isinstance(existing, dict) else {}
    servers = merged.get("servers")
    servers = dict(servers) if isinstance(servers, dict) else {}
    for name, server in ours["servers"].items():
        servers.setdefault(name, server)
    merged["servers"] = servers
    return merged


def rerun_script(**values: Any) -> str:
    return render("rerun.py.j2", **values)
