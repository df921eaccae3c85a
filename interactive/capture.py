"""Capture a task's inputs so that a fresh process can load equal objects.

Each argument is pickled on its own (protocol 5) so one unpicklable argument
does not lose the others. Large contiguous buffers (NumPy arrays, bytes-like
objects) go out of band into one raw file, written and read at disk speed.

Layout of ``$PODCODE_HOME/inputs/<task>/``::

    manifest.json   what was saved, where, and what could not be
    data.bin        the per-argument pickles, back to back
    buffers.bin     the out-of-band buffers, back to back, 64-byte aligned
"""

from __future__ import annotations

import inspect
import json
import logging
import mmap
import os
import pickle
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from interactive.errors import InputsError
from interactive.settings import podcode_home

log = logging.getLogger(__name__)

FORMAT = 1
_ALIGN = 64
_BIG_BYTES = 1 << 20  # bytes objects at least this large go out of band


@dataclass
class CaptureReport:
    """What :func:`save_inputs` did."""

    folder: Path
    saved: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Argument name → why it could not be saved."""


def task_slug(task: str) -> str:
    """A file-name-safe, readable form of a task's qualified name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", task).strip(".") or "task"


def inputs_folder(task: str, home: Path | None = None) -> Path:
    return (home or podcode_home()) / "inputs" / task_slug(task)


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


class _BufferSink:
    """Collects out-of-band buffers; big ``bytes`` are wrapped so they go out of band too."""

    def __init__(self) -> None:
        self.buffers: list[pickle.PickleBuffer] = []

    def dumps(self, value: Any) -> bytes:
        start = len(self.buffers)
        try:
            return pickle.dumps(_wrap_bytes(value), protocol=5, buffer_callback=self.buffers.append)
        except BaseException:
            del self.buffers[start:]
            raise


def _wrap_bytes(value: Any) -> Any:
    if isinstance(value, bytes) and len(value) >= _BIG_BYTES:
        return pickle.PickleBuffer(value)
    return value


def _write_buffers(out: BinaryIO, buffers: list[pickle.PickleBuffer]) -> list[list[int]]:
    spans: list[list[int]] = []
    offset = 0
    for buffer in buffers:
        raw = buffer.raw()
        pad = (-offset) % _ALIGN
        if pad:
            out.write(b"\0" * pad)
            offset += pad
        out.write(raw)
        spans.append([offset, raw.nbytes])
        offset += raw.nbytes
    return spans


def save_inputs(
    task: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    home: Path | None = None,
) -> CaptureReport:
    """Save the call's arguments for ``task``; never raises for an unpicklable argument."""
    folder = inputs_folder(task, home)
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = folder.parent / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    report = CaptureReport(folder)
    sink = _BufferSink()
    entries: list[dict[str, Any]] = []
    named = [
        (name, "positional", value)
        for name, value in zip(argument_names(fn, args, kwargs), args, strict=False)
    ]
    named += [(name, "keyword", value) for name, value in kwargs.items()]
    with open(staging / "data.bin", "wb") as data:
        for name, kind, value in named:
            entry: dict[str, Any] = {"name": name, "kind": kind}
            start = len(sink.buffers)
            try:
                blob = sink.dumps(value)
            except Exception as exc:  # pickling can raise anything a __reduce__ raises
                entry["error"] = f"{type(exc).__name__}: {exc}"
                report.failed[name] = entry["error"]
            else:
                entry.update(offset=data.tell(), size=len(blob), buffers=[start, len(sink.buffers)])
                data.write(blob)
                report.saved.append(name)
            entries.append(entry)
    with open(staging / "buffers.bin", "wb") as out:
        spans = _write_buffers(out, sink.buffers)
    manifest = {
        "format": FORMAT,
        "task": task,
        "created": time.time(),
        "arguments": entries,
        "buffers": spans,
    }
    with open(staging / "manifest.json", "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    _replace_folder(staging, folder)
    for name, why in report.failed.items():
        log.warning(
            "input %r of task %s cannot be saved (%s); the session opens without it",
            name,
            task,
            why,
        )
    return report


def _replace_folder(staging: Path, folder: Path) -> None:
    old = folder.parent / f".{folder.name}.{os.getpid()}.old"
    if folder.exists():
        folder.rename(old)
    staging.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


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


def _default_task(home: Path) -> str:
    session = home / "session.json"
    if session.exists():
        with open(session, encoding="utf-8") as handle:
            task = json.load(handle).get("task")
        if isinstance(task, str):
            return task
    folders = (
        sorted((home / "inputs").glob("*/manifest.json")) if (home / "inputs").exists() else []
    )
    if len(folders) == 1:
        return str(_read_manifest(folders[0].parent)["task"])
    raise InputsError(
        f"which task? name it: load_inputs(task=...) ({len(folders)} captured in {home / 'inputs'})"
    )


def _uninitialized(size: int) -> memoryview:
    """Writable memory that is not zero-filled first: NumPy's allocator when it is there
    (it asks for huge pages, so reading in is about twice as fast), else an anonymous map."""
    try:
        import numpy
    except ImportError:
        return memoryview(mmap.mmap(-1, size))
    return numpy.empty(size, dtype=numpy.uint8).data.cast("B")


def _read_pool(path: Path) -> memoryview:
    """The whole buffer file in writable memory, read once (no zero-filling pass first)."""
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return memoryview(bytearray())
        view = _uninitialized(size)
        done = 0
        while done < size:
            count = handle.readinto(view[done:])
            if not count:
                raise InputsError(f"{path} is shorter than its manifest says")
            done += count
    return view


def load_inputs(
    task: str | None = None, home: Path | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The captured ``(args, kwargs)`` of ``task`` (default: the current session's task)."""
    home = home or podcode_home()
    folder = inputs_folder(task or _default_task(home), home)
    manifest = _read_manifest(folder)
    missing = [entry["name"] for entry in manifest["arguments"] if "error" in entry]
    if missing:
        raise InputsError(
            f"inputs {', '.join(map(repr, missing))} of {manifest['task']} could not be saved "
            "when the task failed (see the session log); call the task with your own values"
        )
    view = _read_pool(folder / "buffers.bin")
    buffers = [view[offset : offset + length] for offset, length in manifest["buffers"]]
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    with open(folder / "data.bin", "rb") as data:
        blob = data.read()
    for entry in manifest["arguments"]:
        first, last = entry["buffers"]
        chunk = blob[entry["offset"] : entry["offset"] + entry["size"]]
        value = pickle.loads(chunk, buffers=buffers[first:last])  # noqa: S301 - our own capture
        if isinstance(value, pickle.PickleBuffer):
            value = bytes(value)
        if entry["kind"] == "positional":
            args.append(value)
        else:
            kwargs[entry["name"]] = value
    return tuple(args), kwargs
