"""Capture a task's inputs so that a fresh process can load equal objects.

Each argument is pickled on its own (protocol 5) so one unpicklable argument
does not lose the others. Large contiguous buffers (NumPy arrays, PyTorch
storages, bytes-like objects) go out of band into one raw file, written at disk
speed; loading maps that file copy-on-write, so the loaded arrays and tensors
share the page cache's pages until they are written to (no copy, no second
allocation). Tensors keep their shared storage, dtype and device
(:mod:`interactive.inputs.tensors`).
A session saves at most ``max_capture_bytes``; an argument beyond that is not
saved, like an unpicklable one, and a warning says so.

A session captures into its own folder,
``$PODCODE_HOME/sessions/<pid>-<start>/inputs/<task>/``, so that two processes
running the same task never overwrite each other's::

    manifest.json   what was saved, where, and what could not be
    data.bin        the per-argument pickles, back to back
    buffers.bin     the out-of-band buffers, 64-byte aligned (:mod:`interactive.storage.pickles`)

:func:`load_inputs` looks, in order, in this process's own session, in the
session whose IDE started this process (``PODCODE_SESSION_ID``, set in every
terminal and debugger of a session's VS Code), then takes the newest capture of
the task in the home. The folder is removed when the session ends with the task
done; it is kept when the session fails, is aborted or cleaned up, or its
process dies.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import pickle
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from interactive.base import files, record
from interactive.base.errors import InputsError
from interactive.base.identity import SESSION_VARIABLE, is_running, own_session_id
from interactive.base.names import folder_name, task_matches
from interactive.base.settings import podcode_home
from interactive.inputs.snapshot import BIG_BYTES, Argument, BufferSink, CallSnapshot
from interactive.storage import pickles

log = logging.getLogger(__name__)

FORMAT = 1
INPUTS = "inputs"


@dataclass
class CaptureReport:
    """What :func:`save_inputs` did."""

    folder: Path
    saved: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Argument name → why it could not be saved."""
    at_failure: dict[str, str] = field(default_factory=dict)
    """Argument name → why its saved state is the one at the failure, not at the call."""

    def notes(self) -> list[str]:
        """What the session says about its inputs, one line per argument concerned."""
        return [
            *(f"input {name!r} could not be saved ({why}): resume calls the task with it as "
              "the task left it, and 'debug again' needs it supplied by hand"
              for name, why in self.failed.items()),
            *(f"input {name!r} {why}" for name, why in self.at_failure.items()),
        ]


def inputs_folder(task: str, home: Path | None = None) -> Path:
    """``home/inputs/<task>``: ``home`` is a session's folder (or, for older captures,
    ``$PODCODE_HOME`` itself)."""
    return (home or podcode_home()) / INPUTS / folder_name(task)


def argument_names(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[str]:
    """Readable names of the positional arguments, from the signature when it binds."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return [f"args[{index}]" for index in range(len(args))]
    names: list[str] = []
    for name, value in bound.arguments.items():
        if name in kwargs:
            continue
        kind = inspect.signature(fn).parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            names.extend(f"{name}[{index}]" for index in range(len(value)))
        else:
            names.append(name)
    return names[: len(args)] + [f"args[{index}]" for index in range(len(names), len(args))]


def _size(count: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def _too_large(total: int, max_bytes: int) -> str:
    return (
        f"too large to capture: {_size(total)} with the arguments before it, over "
        f"max_capture_bytes ({_size(max_bytes)}; raise it with PODCODE_MAX_CAPTURE_BYTES)"
    )


def _write_arguments(
    data: BinaryIO,
    named: list[tuple[str, str, Any]],
    snapshot: CallSnapshot | None,
    sink: BufferSink,
    report: CaptureReport,
    max_bytes: int | None,
) -> list[dict[str, Any]]:
    """Each argument's pickle into ``data`` (its buffers into ``sink``): its manifest
    entries."""
    entries: list[dict[str, Any]] = []
    total = 0
    for index, (name, kind, value) in enumerate(named):
        entry: dict[str, Any] = {"name": name, "kind": kind}
        entries.append(entry)
        start = len(sink.buffers)
        taken = snapshot.arguments[index] if snapshot is not None else None
        if type(value) is str and len(value) >= BIG_BYTES:  # in chunks: no second copy
            total = _save_text(data, entry, value, total, max_bytes, report)
            continue
        if taken is not None and taken.blob is not None:
            blob = taken.blob  # as it was at the call
            sink.buffers.extend(taken.buffers)
        else:
            try:
                blob = sink.dumps(value)
            except _PICKLING_ERRORS as exc:  # anything a __reduce__ raises, even these
                entry["error"] = report.failed[name] = f"{type(exc).__name__}: {exc}"
                continue
            why = _at_failure(taken)
            if why:
                entry["at_failure"] = report.at_failure[name] = why
        try:
            blob = _with_objects(blob, sink, start)
        except Exception as exc:  # ray.get of a nested object timed out or failed
            entry["refs"] = report.at_failure[name] = (
                f"holds Ray ObjectRefs saved as references only ({type(exc).__name__}: "
                f"{exc}): 'debug again' outside the job cannot fetch their objects")
        size = len(blob) + sum(memoryview(b).nbytes for b in sink.buffers[start:])
        if max_bytes is not None and total + size > max_bytes:
            del sink.buffers[start:]
            entry["error"] = report.failed[name] = _too_large(total + size, max_bytes)
            continue
        total += size
        entry.update(offset=data.tell(), size=len(blob), buffers=[start, len(sink.buffers)])
        data.write(blob)
        report.saved.append(name)
    return entries


def _with_objects(blob: bytes, sink: BufferSink, start: int) -> bytes:
    """In a Ray worker: ``blob`` (its buffers in ``sink`` from ``start``) with the
    ObjectRefs nested in it saved with their objects (:mod:`interactive.storage.objectrefs`);
    ``blob`` itself when it holds none. Raises when an object cannot be fetched."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized() or b"ObjectRef" not in blob:
        return blob
    from interactive.storage.objectrefs import dumps_resolved

    buffers: list[pickle.PickleBuffer] = []
    resolved = dumps_resolved(pickles.loads(blob, sink.buffers[start:]), buffers.append)
    sink.buffers[start:] = buffers
    return resolved


def save_inputs(
    task: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    home: Path | None = None,
    *,
    max_bytes: int | None = None,
    snapshot: CallSnapshot | None = None,
) -> CaptureReport:
    """Save the call's arguments for ``task`` under ``home`` (at most ``max_bytes`` in
    all): as they were at the call where ``snapshot`` holds them, else as they are now.
    Never raises for an argument that cannot be saved."""
    folder = inputs_folder(task, home)
    record.make_private(folder.parent)
    report = CaptureReport(folder)
    sink = BufferSink()
    named = [
        (name, "positional", value)
        for name, value in zip(argument_names(fn, args, kwargs), args, strict=False)
    ]
    named += [(name, "keyword", value) for name, value in kwargs.items()]
    with files.staged_folder(folder) as staging:  # a full disk leaves nothing behind
        with open(staging / "data.bin", "wb") as data:
            entries = _write_arguments(data, named, snapshot, sink, report, max_bytes)
        with open(staging / "buffers.bin", "wb") as out:
            spans = pickles.write_parts(out, pickles.raw_buffers(sink.buffers))
        manifest = {
            "format": FORMAT,
            "task": task,
            "created": time.time(),
            "arguments": entries,
            "buffers": spans,
        }
        with open(staging / "manifest.json", "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1)
    for name, why in report.failed.items():
        log.warning(
            "input %r of task %s cannot be saved (%s); the session opens without it",
            name,
            task,
            why,
        )
    return report


def _save_text(
    out: BinaryIO, entry: dict[str, Any], text: str, total: int, max_bytes: int | None,
    report: CaptureReport,
) -> int:
    """Write a large ``str`` argument as UTF-8, a chunk at a time (encoding or pickling it
    whole would hold a second copy); the bytes saved so far."""
    name = entry["name"]
    if max_bytes is not None and total + len(text) > max_bytes:
        entry["error"] = report.failed[name] = _too_large(total + len(text), max_bytes)
        return total
    entry.update(offset=out.tell(), text=True, buffers=[0, 0])
    written = 0
    for start in range(0, len(text), BIG_BYTES):
        written += out.write(text[start : start + BIG_BYTES].encode("utf-8", "surrogatepass"))
    entry["size"] = written
    report.saved.append(name)
    return total + written


_PICKLING_ERRORS = (Exception, KeyboardInterrupt, SystemExit)
"""What an argument's own pickling code may raise: a ``KeyboardInterrupt`` or
``SystemExit`` raised there loses that argument, never the session."""


def _at_failure(taken: Argument | None) -> str | None:
    """Why an argument pickled now may not be as it was at the call (None: it is, or no
    snapshot was asked for)."""
    if taken is None or taken.not_kept is None:
        return None
    return (f"was not copied at the call ({taken.not_kept}): resume and 'debug again' use its "
            "state at the failure")


def save_session_inputs(
    task: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    home: Path,
    max_bytes: int | None = None,
    snapshot: CallSnapshot | None = None,
    session: str | None = None,
) -> CaptureReport:
    """A session's capture: into its own folder under ``home`` (``session``: its name, by
    default the process's); the captures of ``task`` that processes now gone left in
    ``home`` are removed (this one replaces them)."""
    report = save_inputs(task, fn, args, kwargs, record.session_dir(home, session),
                         max_bytes=max_bytes, snapshot=snapshot)
    try:
        prune(home, task)
    except OSError as exc:
        log.warning("could not remove older captures of %s: %s", task, exc)
    return report


def _process_gone(folder: Path) -> bool:
    """Whether the session in ``folder`` (``sessions/<pid>-<start>``) has no process left."""
    data = record.read_record(folder / record.FILE) or {}
    pid, started = data.get("pid"), data.get("started")
    if pid is None:
        head, _, tail = folder.name.partition("-")
        if not head.isdigit():
            return False
        pid, started = int(head), int(tail) / 100 if tail.isdigit() else None
    return is_running(pid, started) is False


def prune(home: Path, task: str) -> list[Path]:
    """Remove the captures of ``task`` in ``home`` left by processes that are gone (and
    such a session's folder once it holds no capture); what was removed."""
    removed = []
    legacy = inputs_folder(task, home)
    if legacy.exists():
        removed.append(legacy)
    own = record.session_dir(home)
    for folder in sorted((home / record.SESSIONS).glob("*")):
        if folder == own or not folder.is_dir() or not _process_gone(folder):
            continue
        captured = inputs_folder(task, folder)
        if captured.exists():
            removed.append(captured)
        left = [p for p in (folder / INPUTS).glob("*") if p != captured]
        if not left:
            removed.append(folder)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _read_manifest(folder: Path) -> dict[str, Any]:
    try:
        with open(folder / "manifest.json", encoding="utf-8") as handle:
            manifest: dict[str, Any] = json.load(handle)
    except FileNotFoundError:
        raise InputsError(
            f"no captured inputs in {folder}: the task has not failed under @vscode here"
        ) from None
    except (OSError, ValueError) as exc:
        raise InputsError(f"captured inputs in {folder} are unreadable: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise InputsError(
            f"captured inputs in {folder} have format {manifest.get('format')!r}, expected {FORMAT}"
        )
    return manifest


def _preferred_sessions(home: Path, environ: Mapping[str, str]) -> list[Path]:
    """This process's session, then the session whose IDE started this process (in
    ``home``, or in a rank's folder of it)."""
    named = [own_session_id(), environ.get(SESSION_VARIABLE, "")]
    folders = []
    for name in dict.fromkeys(n for n in named if n):
        folders.append(record.session_dir(home, name))
        folders.extend(sorted(home.glob(f"rank-*/{record.SESSIONS}/{name}")))
    return folders


def _captures(home: Path) -> list[Path]:
    """Every capture folder in ``home`` (its ranks' included), newest first."""
    manifests = [*home.glob(f"{record.SESSIONS}/*/{INPUTS}/*/manifest.json"),
                 *home.glob(f"rank-*/{record.SESSIONS}/*/{INPUTS}/*/manifest.json"),
                 *home.glob(f"{INPUTS}/*/manifest.json")]

    def created(path: Path) -> float:
        try:
            return float(json.loads(path.read_text(encoding="utf-8"))["created"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0.0

    return [path.parent for path in sorted(manifests, key=created, reverse=True)]


def find_inputs(task: str, home: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The folder :func:`load_inputs` reads for ``task``: this process's session's capture,
    else that of the session whose IDE started it, else the newest in ``home``."""
    environ = os.environ if environ is None else environ
    for session in _preferred_sessions(home, environ):
        folder = inputs_folder(task, session)
        if (folder / "manifest.json").exists():
            return folder
    slug = folder_name(task)
    newest = next((folder for folder in _captures(home) if folder.name == slug), None)
    return newest or inputs_folder(task, home)


def _default_task(home: Path, environ: Mapping[str, str]) -> str:
    """The task of this process's session, of the session whose IDE started this process,
    of the home's first session, else the only task captured in the home."""
    for folder in [*_preferred_sessions(home, environ), home]:
        task = (record.read_record(folder / record.FILE) or {}).get("task")
        if isinstance(task, str):
            return task
    tasks = sorted({str(_read_manifest(folder)["task"]) for folder in _captures(home)})
    if len(tasks) == 1:
        return tasks[0]
    raise InputsError(
        f"which task? name it: load_inputs(task=...) ({len(tasks)} captured in {home}"
        + (f": {', '.join(tasks)})" if tasks else ")")
    )


class _Missing:
    def __repr__(self) -> str:
        return "<not saved>"


MISSING: Any = _Missing()
"""Stands for an argument that :func:`load_each` could not load."""


def load_inputs(
    task: str | None = None, home: Path | None = None, *, folder: Path | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The captured ``(args, kwargs)`` of ``task`` (default: the current session's task),
    named as ``podcode --task`` names it: in full, or by a tail (``normalize`` for
    ``features.normalize``).

    Read from ``folder`` when given (a session resuming its own capture), else found in
    this process's own session, else in the session whose VS Code started this process
    (its terminals and "debug again"), else the newest capture of the task in ``home``
    (default ``$PODCODE_HOME``).
    """
    home = home or podcode_home()
    if folder is None:
        named = _captured_task(task, home) if task else _default_task(home, os.environ)
        folder = find_inputs(named, home)
    manifest = _read_manifest(folder)
    missing = [entry["name"] for entry in manifest["arguments"] if "error" in entry]
    if missing:
        raise InputsError(
            f"inputs {', '.join(map(repr, missing))} of {manifest['task']} could not be saved "
            "when the task failed (see the session log); call the task with your own values"
        )
    args, kwargs = load_each(folder, manifest)
    names = [entry["name"] for entry in manifest["arguments"]]
    unreadable = [name for name, value in zip(names, [*args, *kwargs.values()], strict=True)
                  if value is MISSING]
    if unreadable:
        raise InputsError(f"inputs {', '.join(map(repr, unreadable))} of {manifest['task']} "
                          f"cannot be loaded from {folder} (see the warning above)")
    return tuple(args), kwargs


def _captured_task(given: str, home: Path) -> str:
    """The captured task that ``given`` names, by the CLI's rule for ``--task``
    (:func:`interactive.base.names.task_matches`: the full name, or a tail of it after a dot
    or a script's colon); a usage error when it names several, or none."""
    tasks = set()
    for capture in _captures(home):
        try:
            tasks.add(str(_read_manifest(capture)["task"]))
        except (InputsError, KeyError):
            continue
    if given in tasks:
        return given
    named = sorted(name for name in tasks if task_matches(name, given))
    if len(named) == 1:
        return named[0]
    if named:
        raise InputsError(f"{given!r} names several captured tasks in {home}: "
                          f"{', '.join(named)}; name one in full: load_inputs(task=...)")
    captured = f"captured there: {', '.join(sorted(tasks))}" if tasks else "none is captured there"
    raise InputsError(f"no captured inputs of a task {given!r} in {home} ({captured}); a task's "
                      "inputs are captured when it fails under @vscode with this PODCODE_HOME")


def load_each(
    folder: Path, manifest: dict[str, Any] | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """Every argument of the capture in ``folder`` that can be loaded, each on its own:
    :data:`MISSING` in the place of one that was not saved or does not load (logged)."""
    manifest = manifest or _read_manifest(folder)
    try:
        buffers = pickles.views(pickles.map_file(folder / "buffers.bin"), manifest["buffers"])
    except pickles.Truncated:
        raise InputsError(f"{folder / 'buffers.bin'} is shorter than its manifest says") from None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    with open(folder / "data.bin", "rb") as data:
        blob = data.read()
    for entry in manifest["arguments"]:
        value = MISSING if "error" in entry else _load_argument(entry, blob, buffers)
        if entry["kind"] == "positional":
            args.append(value)
        else:
            kwargs[entry["name"]] = value
    return args, kwargs


def _load_argument(entry: dict[str, Any], blob: bytes, buffers: list[Any]) -> Any:
    first, last = entry["buffers"]
    chunk = blob[entry["offset"] : entry["offset"] + entry["size"]]
    if entry.get("text"):
        return chunk.decode("utf-8", "surrogatepass")
    try:
        value = pickles.loads(chunk, buffers[first:last])
    except Exception as exc:  # a class that moved or changed since the capture
        log.warning("input %r cannot be loaded (%s: %s)", entry["name"], type(exc).__name__, exc)
        return MISSING
    if isinstance(value, (pickle.PickleBuffer, memoryview)):
        value = bytes(value)  # a big bytes argument, saved out of band
    return value
