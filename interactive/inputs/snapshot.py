"""The task's arguments as they were at the call.

A task may change its arguments in place before it fails (sorts or pops a list, fills
a dict, normalises an array). Captured at the failure, resume and "debug again" would
run on the leftovers. So the enabled path takes a snapshot before the task runs, and
the capture at the failure writes the snapshot instead of the changed objects.

The success path must be free: almost every call succeeds. So each argument's cost is
decided first (:mod:`interactive.inputs.sizing`: by buffer sizes and a bounded walk, no
pickling, no code of the argument's own classes), then only what is worth it is copied:

- nothing that cannot change in place (numbers, strings, tuples of them, read-only
  arrays and memory-mapped files): the capture pickles it at the failure;
- arguments within ``max_snapshot_bytes`` (for the whole call) are pickled (protocol 5)
  with their writable buffers (NumPy arrays, PyTorch storages, ``bytearray``) copied
  out of band; read-only buffers inside them are kept by reference;
- anything else (over the budget, a class with its own pickling code, more objects than
  the walk looks at, a tensor on a GPU, a writable memory-mapped file, an argument that
  does not pickle) is captured at the failure, and the session names it with the reason.

With ``snapshot_inputs="failure"`` nothing is taken at the call.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from interactive.inputs import sizing, tensors
from interactive.storage import pickles

BIG_BYTES = sizing.BIG_BYTES


@dataclass(frozen=True)
class Argument:
    """One argument at the call: its pickle and buffers, or why it was not kept."""

    blob: bytes | None = None
    buffers: tuple[pickle.PickleBuffer, ...] = ()
    not_kept: str | None = None
    """Why the argument was not copied at the call (its state at the failure is used)."""


UNCHANGEABLE = Argument()
"""An argument that cannot change in place: the capture pickles it at the failure."""


@dataclass(frozen=True)
class CallSnapshot:
    """Every argument of one call, positional first, then keywords (their order)."""

    arguments: tuple[Argument, ...]


class BufferSink:
    """Collects out-of-band buffers; big ``bytes`` are wrapped so they go out of band too.
    ``host_only``: a GPU tensor is refused (:class:`interactive.inputs.tensors.OnDevice`)
    rather than copied to the host."""

    def __init__(self, host_only: bool = False) -> None:
        self.buffers: list[pickle.PickleBuffer] = []
        self._torch_dumps = tensors.storage_pickler(host_only)

    def dumps(self, value: Any) -> bytes:
        return pickles.dumps(_wrap_bytes(value), self.buffers, self._torch_dumps)


class _OutOfBand:
    """A big ``bytes`` or ``bytearray`` argument, pickled as its type over one out-of-band
    buffer: a ``bytes`` is kept by reference, a ``bytearray`` copied once (in band, the
    pickle would grow into a second copy)."""

    __slots__ = ("value",)

    def __init__(self, value: bytes | bytearray) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self.value), (pickle.PickleBuffer(self.value),))


def _wrap_bytes(value: Any) -> Any:
    if type(value) in (bytes, bytearray) and len(value) >= BIG_BYTES:
        return _OutOfBand(value)
    return value


def take(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], budget: int
) -> CallSnapshot | None:
    """The call's arguments now, copying at most ``budget`` bytes in all; None when no
    argument can change in place. Never raises, never runs an argument's own code."""
    values = (*args, *kwargs.values()) if kwargs else args
    for value in values:
        if type(value) not in sizing.ATOMS:
            break
    else:
        return None  # numbers and strings: the common call, a type check each
    estimates = [sizing.estimate(value) for value in values]
    if all(found.verdict == sizing.UNCHANGEABLE for found in estimates):
        return None
    sink: BufferSink | None = None
    room = budget
    arguments = []
    for value, found in zip(values, estimates, strict=True):
        if found.verdict == sizing.UNCHANGEABLE:
            arguments.append(UNCHANGEABLE)
        elif found.verdict != sizing.KEEP:
            arguments.append(Argument(not_kept=found.reason))
        elif found.nbytes > room:
            arguments.append(Argument(not_kept=_over_budget(found.nbytes, room, budget)))
        else:
            sink = sink or BufferSink(host_only=True)  # a GPU tensor: left, said so
            kept, used = _copy(sink, value, room, budget)
            room -= used
            arguments.append(kept)
    return CallSnapshot(tuple(arguments))


def _copy(sink: BufferSink, value: Any, room: int, budget: int) -> tuple[Argument, int]:
    """``value`` pickled with its writable buffers copied, if that fits in ``room``; and
    the bytes of ``room`` that took."""
    try:
        blob = sink.dumps(value)
        views = pickles.raw_buffers(sink.buffers)
    except Exception as exc:  # a library's pickling raised: the capture tries again
        sink.buffers.clear()
        return Argument(not_kept=f"it could not be pickled at the call ({type(exc).__name__}: "
                                 f"{exc})"), 0
    found, sink.buffers = sink.buffers, []
    writable = sum(view.nbytes for view in views if not view.readonly)
    if len(blob) + writable > room:
        return Argument(not_kept=_over_budget(len(blob) + writable, room, budget)), 0
    kept = tuple(
        buffer if view.readonly else pickle.PickleBuffer(bytearray(view))
        for buffer, view in zip(found, views, strict=True)
    )
    return Argument(blob=blob, buffers=kept), len(blob) + writable


def _over_budget(size: int, room: int, budget: int) -> str:
    taken = budget - room
    left = f", of which the arguments before it took {_mib(taken)}" if taken else ""
    return (f"it is {_mib(size)}, over max_snapshot_bytes ({_mib(budget)}{left}; raise "
            "PODCODE_MAX_SNAPSHOT_BYTES to copy it at every call)")


def _mib(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB"


def restore(live: Any, saved: Any) -> Any:
    """``live`` set back to ``saved``'s state in place where its type allows (the caller
    keeps the same object), else ``saved``."""
    if type(live) is not type(saved) or live is saved:
        return saved
    restorer = _RESTORERS.get(type(live)) or _array_restorer(live)
    if restorer is None:
        return saved
    try:
        restorer(live, saved)
    except Exception:  # a read-only array, a shape that no longer fits: use the copy
        return saved
    return live


def _list(live: list[Any], saved: list[Any]) -> None:
    live[:] = saved


def _mapping(live: Any, saved: Any) -> None:
    live.clear()
    live.update(saved)


def _bytearray(live: bytearray, saved: bytearray) -> None:
    live[:] = saved


_RESTORERS: Mapping[type, Callable[[Any, Any], None]] = {
    list: _list,
    dict: _mapping,
    set: _mapping,
    bytearray: _bytearray,
}


def _array_restorer(live: Any) -> Callable[[Any, Any], None] | None:
    """NumPy arrays and PyTorch tensors of the same shape and dtype: copied into."""
    module = type(live).__module__
    if module == "numpy" and type(live).__name__ == "ndarray":
        return _copy_array
    if module == "torch" and type(live).__name__ in ("Tensor", "Parameter"):
        return _copy_tensor
    return None


def _copy_array(live: Any, saved: Any) -> None:
    if live.shape != saved.shape or live.dtype != saved.dtype:
        raise ValueError("shape or dtype changed")
    live[...] = saved


def _copy_tensor(live: Any, saved: Any) -> None:
    import torch

    if live.shape != saved.shape or live.dtype != saved.dtype:
        raise ValueError("shape or dtype changed")
    with torch.no_grad():
        live.copy_(saved)
