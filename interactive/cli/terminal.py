"""Where the CLI writes and what it waits on; tests pass their own."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import webbrowser
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class Console:
    """The CLI's surroundings: streams, environment, stop flag, browser, clock."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    stop: threading.Event = field(default_factory=threading.Event)
    """Set to end a long-running verb (attach, debug) as Ctrl-C does."""
    open_browser: Callable[[str], Any] = webbrowser.open
    clock: Callable[[], float] = time.time
    watch_seconds: float = 5.0
    """How often attach and debug check that the session still answers."""

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def json(self, data: Any) -> None:
        print(json.dumps(data, indent=2, sort_keys=True), file=self.out, flush=True)

    def warn(self, text: str) -> None:
        print(f"podcode: {text}", file=self.err, flush=True)
