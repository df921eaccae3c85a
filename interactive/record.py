"""``$PODCODE_HOME/session.json``: how to reach the session (mode 0600: it holds secrets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interactive.configure import write_json

FILE = "session.json"


def session_path(home: Path) -> Path:
    return home / FILE


def write_session(home: Path, record: dict[str, Any]) -> Path:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = session_path(home)
    write_json(path, record, mode=0o600)
    return path


def read_session(home: Path) -> dict[str, Any] | None:
    try:
        with open(session_path(home), encoding="utf-8") as handle:
            data: dict[str, Any] = json.load(handle)
            return data
    except FileNotFoundError:
        return None
