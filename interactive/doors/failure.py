"""The failure as a coding agent reads it (``GET /api/frames``): the exception, its
traceback as text with the source lines, and the frames of the failed call, innermost
first.

The frames are the traceback's, podcode's own left out (the decorator and the steps that
called the task, as the debugger leaves them out too): index 0 is where it raised, the
last is the task's own function. The same list numbers the frames that
``GET /api/frames/{index}/locals`` and ``POST /api/evaluate`` take.
"""

from __future__ import annotations

import linecache
import os
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from interactive.base.types import ExcInfo

OWN_ROOT = os.path.realpath(Path(__file__).resolve().parents[1]) + os.sep
"""podcode's runtime (the ``interactive`` package): its frames are not the task's."""
SOURCE_CONTEXT = 3
"""Lines shown before and after each frame's current line."""
MAX_TRACEBACK_CHARS = 16_000
"""The longest traceback text answered (its end is kept: where it raised)."""
MAX_MESSAGE_CHARS = 2_000
MAX_FRAMES = 100
"""The innermost frames described (a deep recursion is cut, saying so)."""


def stack(excinfo: ExcInfo) -> list[FrameType]:
    """The traceback's frames outside podcode's own code, innermost first."""
    frames: list[FrameType] = []
    tb = excinfo[2]
    while tb is not None:
        if not os.path.realpath(tb.tb_frame.f_code.co_filename).startswith(OWN_ROOT):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    frames.reverse()
    return frames


def frame_at(excinfo: ExcInfo, index: int) -> FrameType:
    """Frame ``index`` of :func:`stack`; :class:`IndexError` saying how many there are."""
    frames = stack(excinfo)
    if not 0 <= index < len(frames):
        raise IndexError(f"no frame {index}: the failure has {len(frames)} frames "
                         f"(0 is where it raised, {len(frames) - 1} the outermost)")
    return frames[index]


def shown_path(filename: str, workspace: Path) -> str:
    """``filename`` relative to the workspace when inside it, else as it is."""
    real, root = os.path.realpath(filename), os.path.realpath(workspace)
    return os.path.relpath(real, root) if real.startswith(root + os.sep) else filename


def in_workspace(filename: str, workspace: Path) -> bool:
    return os.path.realpath(filename).startswith(os.path.realpath(workspace) + os.sep)


def source_lines(filename: str, line: int, context: int = SOURCE_CONTEXT) -> str:
    """The lines around ``line``, numbered, the current one marked with ``->``."""
    shown = []
    for number in range(max(1, line - context), line + context + 1):
        text = linecache.getline(filename, number)
        if not text:
            continue
        marker = "->" if number == line else "  "
        shown.append(f"{marker}{number:5d} {text.rstrip()[:300]}")
    return "\n".join(shown)


def describe_frame(index: int, frame: FrameType, line: int, workspace: Path) -> dict[str, Any]:
    code = frame.f_code
    return {"index": index, "function": getattr(code, "co_qualname", code.co_name),
            "file": shown_path(code.co_filename, workspace), "line": line,
            "in_workspace": in_workspace(code.co_filename, workspace),
            "source": source_lines(code.co_filename, line)}


def _lines(excinfo: ExcInfo) -> dict[int, int]:
    """The line each traceback frame is at (``tb_lineno``: a frame's ``f_lineno`` is where
    it stopped, the same for a frame that raised)."""
    lines, tb = {}, excinfo[2]
    while tb is not None:
        lines[id(tb.tb_frame)] = tb.tb_lineno
        tb = tb.tb_next
    return lines


def _clip_start(text: str, limit: int) -> str:
    """``text``'s end, at most ``limit`` characters, saying how much of its start was cut."""
    if len(text) <= limit:
        return text
    return f"... ({len(text) - limit} characters of the traceback's start not shown)\n" \
        f"{text[-limit:]}"


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:MAX_MESSAGE_CHARS]
    except Exception as failed:
        return f"<str() of the {type(exc).__name__} failed: {type(failed).__name__}>"


def describe(excinfo: ExcInfo, workspace: Path, failed: FrameType | None = None
             ) -> dict[str, Any]:
    """The answer of ``GET /api/frames``; ``failed``: the frame the debugger and the
    notebook show first (its index is ``failed_frame``)."""
    exc_type, exc, _ = excinfo
    try:
        text = "".join(traceback.format_exception(exc_type, exc, excinfo[2]))
    except Exception as broken:
        text = f"{exc_type.__name__} (its traceback could not be formatted: {broken!r})"
    frames, lines = stack(excinfo), _lines(excinfo)
    described = [describe_frame(i, f, lines.get(id(f), f.f_lineno or 0), workspace)
                 for i, f in enumerate(frames[:MAX_FRAMES])]
    chosen = next((i for i, f in enumerate(frames) if f is failed), None)
    return {"exception": {"type": exc_type.__qualname__, "module": exc_type.__module__,
                          "message": _text(exc),
                          "traceback": _clip_start(text, MAX_TRACEBACK_CHARS)},
            "frames": described, "failed_frame": chosen,
            "frames_left_out": max(0, len(frames) - MAX_FRAMES)}
