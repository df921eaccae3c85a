"""The frame kernel: cells run in the task's process, in the frame where it failed.

One worker thread per session runs the cells, one at a time, never on the session's event
loop and out of the debugger's sight (the debugger's "suspend all threads" never stops a
cell, and a cell never stops the debugger). A cell's namespace is one dict per failure:
the failed frame's globals, then its locals on top (a copy: the frame itself is never
changed), then what the cells assigned; a function or comprehension in a cell sees all
of them (separate globals and locals would hide the frame's locals from a comprehension
before Python 3.12). A new failure (the resumed task failed again) starts a new namespace.
A cell may name another frame of the failed call (``frame``: an index of
:func:`interactive.doors.failure.stack`, 0 where it raised); each frame has a namespace
of its own, built the same way.

A cell whose last statement is an expression shows its value (:mod:`.outputs`) unless the
cell ends with ``;`` (as in Jupyter); ``print``
output is captured for the cell's thread only (:mod:`.streams`); matplotlib figures left
open by a cell are shown as PNG images and closed. An exception is shown as a traceback
in the cell: the session keeps waiting.

Interrupt: ``KeyboardInterrupt`` is raised in the worker thread
(``PyThreadState_SetAsyncExc``); Python code stops at its next bytecode. A cell inside a
native call (``time.sleep``, a C extension) sees it only when the call returns: if it has
not stopped within :data:`INTERRUPT_WAIT_SECONDS`, the interrupt says so.

The session never waits for a cell: when it ends (resume, abort, SIGTERM, cleanup),
:meth:`FrameKernel.close` answers the running cell as left running and the queued ones as
not run, at once. The worker is a daemon thread: one blocked in native code does not hold
up the process's exit. A cell that holds the GIL in native code (a C loop that never
releases it) stops every thread of the process, the session's included: nothing in the
process can end it, and the pod's own end (Kubernetes kills the process when its
termination grace period is over) is the bound; the session's watchdog process then ends
the IDE's processes and clears the session's secrets (:mod:`interactive.session.watchdog`).
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import ctypes
import itertools
import linecache
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, NoReturn

from interactive.base.threads import start_thread
from interactive.base.types import ExcInfo
from interactive.doors.failure import frame_at
from interactive.doors.notebook import outputs, streams

log = logging.getLogger(__name__)

INTERRUPT_WAIT_SECONDS = 1.0
"""How long an interrupted cell has to stop before it is reported blocked in native code."""


def failed_frame(excinfo: ExcInfo, workspace: Path | None = None) -> FrameType:
    """The frame the debugger shows first: the innermost one of the traceback in the
    workspace (the task's own code), else the innermost one."""
    tb, frames = excinfo[2], list[FrameType]()
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    if not frames:
        raise ValueError("the exception has no traceback: no failed frame to run cells in")
    if workspace is not None:
        root = os.path.realpath(workspace) + os.sep
        ours = [f for f in frames if os.path.realpath(f.f_code.co_filename).startswith(root)]
        if ours:
            return ours[-1]
    return frames[-1]


def namespace(frame: FrameType) -> dict[str, Any]:
    """The cells' namespace for ``frame``: its globals, its locals over them (copies), and
    the notebook's helpers as ``here`` unless the frame has a name ``here`` of its own."""
    from interactive.doors.notebook import here

    names = dict(frame.f_globals)
    names.update(frame.f_locals)
    names.setdefault("__builtins__", __builtins__)
    names.setdefault("here", here)
    return names


def split(source: str, filename: str) -> tuple[CodeType | None, CodeType | None]:
    """The cell compiled: the statements to run, and its last statement when that is an
    expression (to evaluate and show); SyntaxError as Python raises it."""
    tree = ast.parse(source, filename, "exec")
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    body = compile(tree, filename, "exec") if tree.body else None
    value = None
    if last is not None:
        value = compile(ast.Expression(last.value), filename, "eval")
    return body, value


@dataclass
class CellResult:
    """What a cell showed, in order, and whether it ended without an exception."""

    outputs: list[outputs.Output] = field(default_factory=list)
    ok: bool = True
    count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"outputs": self.outputs, "ok": self.ok, "execution_count": self.count}


@dataclass
class _Cell:
    source: str
    done: concurrent.futures.Future[CellResult]
    result: CellResult
    printed: streams.Listener | None = None
    interrupted: bool = False
    frame: int | None = None
    """The frame it runs in (None: the failed frame)."""


class FrameKernel:
    """Runs cells in the failed frame given by ``failure()`` (None: no failure to run in)."""

    def __init__(self, failure: Callable[[], ExcInfo | None], workspace: Path | None = None,
                 name: str = "notebook") -> None:
        self._failure = failure
        self._workspace = workspace
        self._name = name
        self._cells: queue.SimpleQueue[_Cell | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running: _Cell | None = None
        self._namespaces: dict[FrameType, dict[str, Any]] = {}
        self._for: BaseException | None = None
        self._counter = itertools.count(1)
        self._closed = False
        self.helpers: dict[str, Any] = {}
        """Set by the session: what :mod:`.here` offers a cell (resume, the inputs...)."""

    # -- the session's side ---------------------------------------------------------
    def execute(self, source: str, printed: streams.Listener | None = None,
                frame: int | None = None) -> concurrent.futures.Future[CellResult]:
        """Queue ``source``; the future holds its outputs once it ran. ``printed`` is told
        what the cell prints as it prints it (on the cell's thread: it must not block).
        ``frame``: the index of the frame to run it in (None: the failed frame); a frame
        the failure does not have is the cell's error."""
        with self._lock:
            cell = _Cell(source, concurrent.futures.Future(), CellResult(count=next(self._counter)),
                         printed, frame=frame)
            if self._closed:  # no worker will take it
                cell.done.set_result(abandoned(cell.result.count, NOT_RUN))
                return cell.done
            if self._thread is None:
                self._thread = start_thread(self._work, f"{self._name}-cells")
        self._cells.put(cell)
        return cell.done

    def interrupt(self, wait: float = INTERRUPT_WAIT_SECONDS,
                  only: concurrent.futures.Future[CellResult] | None = None) -> str:
        """Stop the running cell: ``"idle"`` (none ran), ``"interrupted"`` (it stopped within
        ``wait`` seconds) or ``"native"`` (it is blocked in native code and will stop when
        that returns to Python). ``only``: stop that cell (the future :meth:`execute`
        returned) and no other; still queued, it is taken off the queue (``"not run"``)."""
        with self._lock:
            cell, thread = self._running, self._thread
            if only is not None and (cell is None or cell.done is not only):
                return "not run" if only.cancel() else "idle"
            if cell is None or thread is None or thread.ident is None:
                return "idle"
            if not cell.interrupted:  # one per cell: the worker's guard expects at most one
                cell.interrupted = True
                raise_in(thread.ident, KeyboardInterrupt)
        concurrent.futures.wait([cell.done], wait)
        return "interrupted" if cell.done.done() else "native"

    def busy(self) -> bool:
        return self._running is not None

    def close(self) -> None:
        """Stop taking cells, at once: a running cell is interrupted and answered as left
        running (one in native code goes on until its call returns, on its daemon thread:
        nothing waits for it); cells still queued are answered as not run."""
        with self._lock:
            self._closed = True
            cell = self._running
        while True:  # the queued cells: answered now, not when the running one returns
            try:
                queued = self._cells.get_nowait()
            except queue.Empty:
                break
            if queued is not None:
                _answer(queued.done, abandoned(queued.result.count, NOT_RUN))
        self._cells.put(None)
        if cell is not None:
            self.interrupt(0)
            _answer(cell.done, abandoned(cell.result.count, LEFT_RUNNING))

    # -- the worker thread ----------------------------------------------------------
    def _work(self) -> None:
        """Run the queued cells until :meth:`close`. A cell's one interrupt can land
        anywhere from the moment the cell is running until :meth:`_quiet` (also in this
        loop, between frames): every cell still gets its answer, and the thread goes on."""
        from interactive.doors.notebook import here

        here.attach(self)
        while True:
            cell = self._cells.get()  # nothing can interrupt the thread here (see _quiet)
            if cell is None:
                return
            try:
                self._run(cell)
            except BaseException:
                log.debug("notebook: an interrupt arrived outside the cell's code", exc_info=True)
            while True:
                try:
                    self._quiet()
                except _Quiet:
                    break
                except BaseException:  # the cell's interrupt landed first: once more
                    log.debug("notebook: an interrupt arrived as its cell ended", exc_info=True)
            _answer(cell.done, cell.result)

    def _quiet(self) -> NoReturn:
        """Make sure no interrupt lands from now until the next cell runs, and raise
        :class:`_Quiet`. None is sent (:meth:`interrupt` sends one only while ``_running``
        is set, under the lock), and one sent that has not landed yet is replaced by
        ``_Quiet``, which lands at once. Landing later, an interrupt could stop the thread
        inside a lock taken by Python code (the cell's future's ``Condition``, the queue's)
        and leave it held: the cell's reader, or the next cell's writer, would wait for
        good."""
        with self._lock:
            self._running = None
            raise_in(threading.get_ident(), _Quiet)
            for _ in range(_SPIN):
                pass  # each turn checks for a pending exception: _Quiet lands in the first
        raise _Quiet  # lost (inside a garbage collector's callback, say): none is pending

    def _run(self, cell: _Cell) -> None:
        if not cell.done.set_running_or_notify_cancel():
            return
        with self._lock:
            if self._closed:
                _answer(cell.done, abandoned(cell.result.count, NOT_RUN))
                return
            self._running = cell
        try:
            self._execute(cell.source, cell.result, cell.printed, cell.frame)
        except BaseException as exc:  # an interrupt landing as the outcome was shown
            cell.result.ok = False
            cell.result.outputs.append(outputs.error(exc, frozenset()))

    def _execute(self, source: str, result: CellResult,
                 printed: streams.Listener | None = None, frame: int | None = None) -> None:
        """Run one cell, its outputs into ``result``. Whatever raises (the cell, its
        value's ``__repr__``, an exception's ``__str__``, a ``BaseException``) ends as an
        error output and ``ok`` false."""
        filename = f"<cell {result.count}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        shown: outputs.Output | None = None
        failure: outputs.Output | None = None
        with streams.captured(printed) as (out, err):
            try:
                use_agg()
                names = self._names(frame)
                body, value = split(source, filename)
                if body is not None:
                    exec(body, names)  # noqa: S102 - the engineer's own cell, in their process
                if value is not None:
                    got = eval(value, names)  # noqa: S307 - as above
                    got = names["_"] = None if source.rstrip().endswith(";") else got
                    if got is not None and not (outputs.is_figure(got) and _has_figures()):
                        shown = outputs.display(got)  # its __repr__ is the cell's code too
            except BaseException as exc:
                result.ok, failure = False, outputs.error(exc, frozenset({filename}))
            figures = _open_figures()
        result.outputs.extend(_streams(out.getvalue(), err.getvalue(), out.spool.dropped))
        result.outputs.extend(figures)
        if shown is not None:
            result.outputs.append(shown)
        if failure is not None:
            result.outputs.append(failure)

    def _names(self, index: int | None = None) -> dict[str, Any]:
        """The namespace of frame ``index`` (None: the failed frame) of the current failure
        (new ones for a new failure)."""
        excinfo = self._failure()
        if excinfo is None:
            raise RuntimeError("the session shows no failure now: no frame to run the cell in")
        if self._for is not excinfo[1]:
            self._namespaces = {}
            self._for = excinfo[1]
        frame = failed_frame(excinfo, self._workspace) if index is None else \
            frame_at(excinfo, index)
        if frame not in self._namespaces:
            self._namespaces[frame] = namespace(frame)
        return self._namespaces[frame]


def _streams(out: str, err: str, dropped: int = 0) -> list[outputs.Output]:
    """The cell's prints; the note of what was not kept ends the last of them."""
    printed = [(name, text) for name, text in (("stdout", out), ("stderr", err)) if text]
    if dropped and not printed:
        printed = [("stdout", "")]
    return [outputs.stream(name, text, dropped if at == len(printed) - 1 else 0)
            for at, (name, text) in enumerate(printed)]


def _has_figures() -> bool:
    pyplot = sys.modules.get("matplotlib.pyplot")
    return pyplot is not None and bool(pyplot.get_fignums())


LEFT_RUNNING = ("the session ended while this cell ran: it was left running on its own "
                "thread (a call in native code, such as time.sleep, returns to Python only "
                "when it ends) and its answer is lost")
NOT_RUN = "the session ended before this cell ran"


def abandoned(count: int, why: str) -> CellResult:
    """The answer of a cell the session did not wait for."""
    return CellResult([{"type": "error", "ename": "podcode", "evalue": why,
                        "traceback": f"podcode: {why}"}], ok=False, count=count)


def _answer(done: concurrent.futures.Future[CellResult], result: CellResult) -> None:
    """Give the cell its answer unless it has one (the session's close and the cell's
    end may race)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        done.set_result(result)


def _open_figures() -> list[outputs.Output]:
    """Every figure pyplot holds, as PNG, then closed (nothing if pyplot is not in use)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return []
    shown = []
    for number in pyplot.get_fignums():
        figure = pyplot.figure(number)
        try:
            shown.append(outputs.figure_png(figure))
        except Exception as exc:  # a figure that cannot be drawn says why, in the cell
            shown.append(outputs.error(exc, frozenset()))
        finally:
            pyplot.close(figure)
    return shown


OFF_SCREEN = frozenset({"agg", "pdf", "svg", "ps", "pgf", "cairo", "template"})
"""matplotlib's backends that open no window."""


def use_agg() -> None:
    """matplotlib draws off-screen in the cells' thread (no window can open in a pod):
    its Agg backend, when matplotlib is imported and set to a backend with windows (or
    not set yet). Unset, pyplot would pick one at the first figure."""
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return
    chosen = dict.__getitem__(matplotlib.rcParams, "backend")  # unresolved: not a str
    if isinstance(chosen, str) and (chosen.lower() in OFF_SCREEN or chosen.startswith("module:")):
        return
    matplotlib.use("Agg")


_SPIN = 10_000_000
"""Turns of :meth:`FrameKernel._quiet`'s wait for its own exception (a tenth of a second
or so: it lands in the first)."""


class _Quiet(BaseException):
    """Raised by the cells' thread in itself, in place of an interrupt that has not
    landed (:meth:`FrameKernel._quiet`)."""


def raise_in(ident: int, exc_type: type[BaseException]) -> None:
    """Raise ``exc_type`` in the thread ``ident`` at its next Python bytecode."""
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                                      ctypes.py_object(exc_type))
    if done > 1:  # more than one thread: undo, as the C API asks
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
        raise SystemError(f"raising {exc_type.__name__} reached {done} threads")
