"""A session's secrets kept out of what is handed to an agent: one scrubber, used by the
session's agent routes (:mod:`interactive.doors.agent_routes`) and by ``podcode mcp``
(:mod:`interactive.agent.scrub`). What is removed is the secret as written: code that
transforms it (reverses, encodes it) can still show it."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

HIDDEN = "[secret removed]"
"""What stands where a secret was."""
MIN_SECRET_CHARS = 6
"""Shorter values are not treated as secrets: removing them would garble ordinary text
(a test's ``"x"``), and no session writes secrets that short."""


class Secrets:
    """The secrets this server knows, growing as it reaches sessions; thread-safe."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._values: tuple[str, ...] = ()
        self.add(*values)

    def add(self, *values: str | None) -> None:
        """Remember ``values`` (None, empty or short ones are ignored)."""
        with self._lock:
            known = set(self._values)
            known.update(v for v in values if v and len(v) >= MIN_SECRET_CHARS)
            # Longest first: a secret that contains another is removed whole.
            self._values = tuple(sorted(known, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        """``text`` with every known secret replaced by :data:`HIDDEN`."""
        for value in self._values:
            if value in text:
                text = text.replace(value, HIDDEN)
        return text

    def scrub_data(self, data: Any) -> Any:
        """``data`` (JSON-like: dicts, lists, strings, numbers) with every string, key
        included, scrubbed; other values are returned as they are."""
        if isinstance(data, str):
            return self.scrub(data)
        if isinstance(data, dict):
            return {self.scrub_data(k): self.scrub_data(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.scrub_data(item) for item in data]
        return data
