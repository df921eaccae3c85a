"""The task's arguments as they were at the call.

A task may change its arguments in place before it fails (sorts or pops a list, fills
a dict, normalises an array). Captured at the failure, resume and "debug again" would
run on the leftovers. So the enabled path takes a snapshot before the task runs, and
the capture at the failure writes the snapshot instead of the changed objects.

Almost every call succeeds, so the snapshot runs no code of the arguments, never raises
into the task, and costs no more than what it keeps (:mod:`interactive.inputs.sizing`
decides, by exact type identity, while it pickles):

- nothing is kept of what cannot change in place (numbers, strings, bytes, small tuples of
  them, classes and functions, Enum members, read-only arrays and memory-mapped files,
  Arrow data): a type check each, and the capture pickles it at the failure;
- the built-in and ``collections`` containers, NumPy arrays and PyTorch CPU tensors (and
  what nests in them of the same) are pickled (protocol 5) within ``max_snapshot_bytes``
  for the whole call, their writable buffers copied out of band once they are known to
  fit; read-only buffers inside them are kept by reference;
- anything else is left for the capture at the failure, and the session names it with
  the reason: an instance of a class of the task's own (dataclasses included) or of a
  subclass of a trusted type, an argument over the budget or holding more than
  :data:`interactive.inputs.sizing.MAX_OBJECT_BYTES` of Python objects, a tensor on a GPU,
  a writable memory-mapped file.

With ``snapshot_inputs="failure"`` nothing is taken at the call.
"""

from __future__ import annotations

import logging
import pickle
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from interactive.inputs import sizing, tensors
from interactive.storage import pickles

log = logging.getLogger(__name__)

BIG_BYTES = sizing.BIG_BYTES


@dataclass(slots=True)
class Argument:
    """One argument at the call: its pickle and buffers, or why it was not kept."""

    blob: bytes | None = None
    buffers: tuple[pickle.PickleBuffer, ...] = ()
    not_kept: str | None = None
    """Why the argument was not copied at the call (its state at the failure is used)."""


UNCHANGEABLE = Argument()
"""An argument that cannot change in place: the capture pickles it at the failure."""


@dataclass(slots=True)
class CallSnapshot:
    """Every argument of one call, positional first, then keywords (their order)."""

    arguments: tuple[Argument, ...]


class BufferSink:
    """Collects out-of-band buffers, for the capture at the failure; big ``bytes`` are
    wrapped so they go out of band too."""

    def __init__(self) -> None:
        self.buffers: list[pickle.PickleBuffer] = []
        self._torch_dumps = tensors.storage_pickler()

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


sizing.trust(_OutOfBand)


def _wrap_bytes(value: Any) -> Any:
    kind = type(value)
    if (kind is bytes or kind is bytearray) and len(value) >= BIG_BYTES:
        return _OutOfBand(value)
    return value


def take(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], budget: int
) -> CallSnapshot | None:
    """The call's arguments now, copying at most ``budget`` bytes in all; None when no
    argument can change in place. Runs no code of the arguments; an error of podcode's own
    costs only that argument's snapshot (named, with the error), never the task."""
    values = (*args, *kwargs.values()) if kwargs else args
    for value in values:
        if id(type(value)) not in sizing.ATOMS:
            break
    else:
        return None  # numbers and strings: the common call, a look-up each
    arguments = []
    room = budget
    changeable = False
    for value in values:
        try:
            kept, used = _take_one(value, room, budget)
        except Exception as exc:  # podcode's own bug: that argument is left for the failure
            log.debug("snapshot of an argument failed", exc_info=True)
            kept, used = Argument(not_kept=f"podcode's snapshot of it failed ({_error(exc)})"), 0
        room -= used
        changeable = changeable or kept is not UNCHANGEABLE
        arguments.append(kept)
    return CallSnapshot(tuple(arguments)) if changeable else None


def _take_one(value: Any, room: int, budget: int) -> tuple[Argument, int]:
    """One argument: nothing when it cannot change, else its copy if it fits in ``room``
    (and the bytes that took), else why not."""
    if sizing.unchanging(value):
        return UNCHANGEABLE, 0
    if sizing.object_floor(value) > sizing.MAX_OBJECT_BYTES:
        return Argument(not_kept=sizing.too_many_objects()), 0
    if type(value) is bytearray and len(value) > _IN_BAND:  # sized before it is copied
        value = _OutOfBand(value)
    pickler = sizing.pickler()
    try:
        blob = pickler.pickle(value, room)
        return _kept(blob, pickler.budget, room, budget)
    except sizing.OverBudget as over:
        return Argument(not_kept=_over_budget(over.size, room, budget)), 0
    except sizing.Refused as refused:
        return Argument(not_kept=str(refused)), 0
    except Exception as exc:  # a trusted library's own pickling refused (a lock, a socket)
        return Argument(not_kept=f"it could not be pickled ({_error(exc)})"), 0
    finally:
        sizing.done(pickler)


_IN_BAND = 64 << 10
"""A top-level ``bytearray`` up to this size is pickled in band (cheaper for small ones);
a bigger one goes out of band."""


def _kept(blob: bytes, taken: sizing.Budget, room: int, budget: int) -> tuple[Argument, int]:
    """The argument pickled as ``blob``, its writable buffers copied now that it is known
    to fit (read-only ones kept by reference); and the bytes of ``room`` that took."""
    used = len(blob) + taken.copied
    if used > room:
        raise sizing.OverBudget(used)
    kept = tuple(
        buffer if view.readonly else pickle.PickleBuffer(bytearray(view))
        for buffer, view in zip(taken.buffers, taken.views, strict=True)
    )
    return Argument(blob=blob, buffers=kept), used


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


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
    kind = type(live)
    if kind is not type(saved) or live is saved:
        return saved
    restorer = _restorer(kind)
    if restorer is None:
        return saved
    try:
        restorer(live, saved)
    except Exception:  # a read-only array, a shape that no longer fits: use the copy
        return saved
    return live


def _restorer(kind: type) -> Callable[[Any, Any], None] | None:
    """How a value of exactly ``kind`` is set back in place: lists, dicts, sets,
    ``bytearray``, NumPy arrays and PyTorch tensors of the same shape and dtype."""
    if kind is list or kind is bytearray:
        return _sequence
    if kind is dict or kind is set:
        return _mapping
    numpy = sys.modules.get("numpy")
    if numpy is not None and kind is numpy.ndarray:
        return _copy_array
    torch = sys.modules.get("torch")
    if torch is not None and (kind is torch.Tensor or kind is torch.nn.Parameter):
        return _copy_tensor
    return None


def _sequence(live: Any, saved: Any) -> None:
    live[:] = saved


def _mapping(live: Any, saved: Any) -> None:
    live.clear()
    live.update(saved)


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
