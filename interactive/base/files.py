"""Write a JSON file atomically, created with its final mode (never wider, even briefly)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """Atomically write ``data`` as JSON with ``mode`` (created with it, never wider)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.chmod(temp, mode)
    temp.replace(path)
