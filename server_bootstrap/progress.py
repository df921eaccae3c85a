"""Download progress: a bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

log = logging.getLogger(__name__)

_BAR_WIDTH = 30
_LOG_STEP_PERCENT = 10


def render_bar(done: int, total: int | None, width: int = _BAR_WIDTH) -> str:
    """One line such as ``[#######        ]  45%  12.3/27.0 MB`` (no total: just the size)."""
    mb = done / 1e6
    if not total:
        return f"{mb:8.1f} MB"
    fraction = min(1.0, done / total)
    filled = int(fraction * width)
    bar = "#" * filled + " " * (width - filled)
    return f"[{bar}] {fraction:4.0%} {mb:6.1f}/{total / 1e6:.1f} MB"


class Progress:
    """Reports bytes received: redraws a bar on a terminal, logs every 10 % otherwise."""

    def __init__(self, label: str, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty() if tty is None else tty
        self._logged = -1

    def update(self, done: int, total: int | None) -> None:
        if self.tty:
            self.stream.write(f"\r{self.label} {render_bar(done, total)}")
            self.stream.flush()
            return
        step = int(100 * done / total) // _LOG_STEP_PERCENT if total else done // 50_000_000
        if step > self._logged:
            self._logged = step
            log.info("%s: %s", self.label, render_bar(done, total).split("] ")[-1].strip())

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
