"""Download progress: tqdm's bar on a terminal, plain log lines otherwise.

tqdm is the progress output ML engineers already read in every training log; in a
pod, where the output goes to a log file, a redrawn bar is noise, so every 10 %
becomes one log line instead.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

from tqdm import tqdm

log = logging.getLogger(__name__)

_LOG_STEP_PERCENT = 10


def describe(done: int, total: int | None) -> str:
    """``45% 12.3/27.0 MB``, or ``12.3 MB`` without a total (for log lines)."""
    mb = done / 1e6
    if not total:
        return f"{mb:.1f} MB"
    return f"{min(1.0, done / total):.0%} {mb:.1f}/{total / 1e6:.1f} MB"


class Progress:
    """Reports bytes received: a tqdm bar on a terminal, a log line every 10 % otherwise."""

    def __init__(self, label: str, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty() if tty is None else tty
        self._logged = -1
        self._bar: Any = None

    def update(self, done: int, total: int | None) -> None:
        if self.tty:
            if self._bar is None:
                self._bar = tqdm(
                    desc=self.label, total=total, unit="B", unit_scale=True,
                    unit_divisor=1000, file=self.stream, leave=True, dynamic_ncols=True,
                )
            self._bar.update(done - self._bar.n)
            return
        step = int(100 * done / total) // _LOG_STEP_PERCENT if total else done // 50_000_000
        if step > self._logged:
            self._logged = step
            log.info("%s: %s", self.label, describe(done, total))

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
