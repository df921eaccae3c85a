"""A desktop VS Code attach configuration for ``podcode debug``, merged into launch.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interactive.base.files import strip_jsonc, write_bytes, write_json


def attach_configuration(
    name: str, host: str, port: int, local_root: str, remote_root: str | None
) -> dict[str, Any]:
    """debugpy ``attach`` to ``host:port``, mapping ``local_root`` to the pod's workspace."""
    configuration: dict[str, Any] = {
        "name": name,
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": host, "port": port},
        "justMyCode": False,
    }
    if remote_root:
        configuration["pathMappings"] = [{"localRoot": local_root, "remoteRoot": remote_root}]
    return configuration


def merge_launch(path: Path, configuration: dict[str, Any]) -> bool:
    """Put ``configuration`` into ``path`` (replacing one of the same name); keep the rest.

    Returns True when the old file had comments (they are not kept; a ``.bak`` copy is)."""
    existing: dict[str, Any] = {"version": "0.2.0", "configurations": []}
    had_comments = False
    if path.exists():
        text = path.read_text(encoding="utf-8")
        plain = strip_jsonc(text)
        try:
            loaded = json.loads(plain) if plain.strip() else {}
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}): fix it or move it away") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{path} is not a JSON object: fix it or move it away")
        existing.update(loaded)
        had_comments = plain != text
        if had_comments:
            write_bytes(path.with_name(path.name + ".bak"), text.encode(), 0o644)
    others = [c for c in existing.get("configurations") or []
              if not (isinstance(c, dict) and c.get("name") == configuration["name"])]
    existing["configurations"] = [*others, configuration]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, existing)
    return had_comments
