"""What a cell shows, as Jupyter's mime bundles: pure functions, no I/O.

A value is shown as ``text/html`` when it has ``_repr_html_`` (a pandas DataFrame: a
table), as ``image/png`` when it is a matplotlib figure, and always as ``text/plain``:
an array or tensor (anything with ``shape`` and ``dtype``) gets a first line with its
shape, dtype and device above its library's own abbreviated ``repr``.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import traceback
from typing import Any

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 200_000
"""The longest value, table or traceback text sent to the IDE; longer text is cut and
says so."""
MAX_PRINTED_BYTES = 1024 * 1024
"""What a cell prints (its stdout and stderr together) is kept up to this many bytes
(UTF-8); the rest is counted, not kept, and the cell's output ends with a line saying how
many bytes were left out (:mod:`.streams`). A cell that prints without end costs no more
memory than this."""

Output = dict[str, Any]
"""One output: ``{"type": "stream", "name": "stdout", "text": ...}``, ``{"type":
"display", "data": {mime: str}}`` or ``{"type": "error", "ename", "evalue", "traceback"}``."""


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text``, cut to ``limit`` characters with a line saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... ({len(text) - limit} more characters not shown)"


def stream(name: str, text: str, dropped: int = 0) -> Output:
    """What a cell printed to ``name`` (at most :data:`MAX_PRINTED_BYTES` of it is kept),
    and the note of the ``dropped`` bytes that were not."""
    note = dropped_note(dropped) if dropped else ""
    return {"type": "stream", "name": name, "text": clip(text, MAX_PRINTED_BYTES) + note}


def dropped_note(count: int) -> str:
    """The line that ends a cell's output when ``count`` bytes of its prints were not kept."""
    return (f"\n... ({count} more bytes printed, not kept: a cell keeps the first "
            f"{MAX_PRINTED_BYTES // 1024} KiB of its output)\n")


def safe_text(value: object, describe: str = "str") -> str:
    """``str(value)`` (or ``repr``), or a line saying that it raised, and what (never
    raises for an ordinary failure of the value's own method)."""
    try:
        return str(value) if describe == "str" else repr(value)
    except Exception as exc:
        kind = type(exc).__name__
        try:
            detail = str(exc)
        except Exception:
            detail = "(its message cannot be shown either)"
        return f"<{describe}() of a {type(value).__name__} failed: {kind}: {detail}>"


def summary(value: Any) -> str | None:
    """``Tensor shape=(2, 3) dtype=torch.float32 device=cpu`` for an array-like value."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None or isinstance(value, type):
        return None
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return None
    device = getattr(value, "device", None)
    where = "" if device is None or callable(device) else f" device={device}"
    return f"{type(value).__name__} shape={dims} dtype={dtype}{where}"


def plain(value: Any) -> str:
    """``repr(value)`` (with the array summary first); a failing ``repr`` raises (the cell
    shows that error: the bug is in the value's ``__repr__``)."""
    text = repr(value)
    if not isinstance(text, str):
        raise TypeError(f"__repr__ of a {type(value).__name__} returned a "
                        f"{type(text).__name__}, not a str")
    head = summary(value)
    return clip(text if head is None else f"{head}\n{text}")


def html(value: Any) -> str | None:
    """The value's own ``_repr_html_()`` (a DataFrame's table), if it has a usable one."""
    method = getattr(value, "_repr_html_", None)
    if method is None or isinstance(value, type) or not callable(method):
        return None
    try:
        text = method()
    except Exception:
        log.debug("_repr_html_ of a %s failed", type(value).__name__, exc_info=True)
        return None
    return clip(text) if isinstance(text, str) else None


def is_figure(value: Any) -> bool:
    """A matplotlib figure (told without importing matplotlib)."""
    return any(f"{c.__module__}.{c.__qualname__}" == "matplotlib.figure.Figure"
               for c in type(value).__mro__)


def figure_png(figure: Any) -> Output:
    """A matplotlib figure as an ``image/png`` display output."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return {"type": "display", "data": {"image/png": data, "text/plain": repr(figure)}}


def display(value: Any) -> Output:
    """The last expression's value as a display output."""
    if is_figure(value):
        return figure_png(value)
    data = {"text/plain": plain(value)}
    rich = html(value)
    if rich is not None:
        data["text/html"] = rich
    return {"type": "display", "data": data}


OWN_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The notebook's own code: its frames are left out of a cell's traceback."""


def error(exc: BaseException, cell_files: frozenset[str]) -> Output:
    """``exc`` as Jupyter's error output; its traceback starts at the first frame of a
    cell's code (``cell_files``), else at the first frame outside the notebook's own code,
    leaving out the kernel's frames. An exception whose ``__str__`` (or whose traceback's
    formatting) fails still gives an error output, saying so."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in cell_files:
        tb = tb.tb_next
    if tb is None:  # raised outside a cell's code (a value's __repr__ in a module, say)
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename.startswith(OWN_FOLDER):
            tb = tb.tb_next
    evalue = safe_text(exc)
    try:
        text = "".join(traceback.format_exception(type(exc), exc, tb))  # None: syntax error
    except Exception as failed:
        text = (f"{type(exc).__name__}: {evalue}\n(its traceback could not be formatted: "
                f"{type(failed).__name__})")
    return {"type": "error", "ename": type(exc).__name__, "evalue": evalue,
            "traceback": clip(text)}
