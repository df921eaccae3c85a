"""The task's arguments as they were at the call.

A task may change its arguments in place before it fails (sorts or pops a list, fills
a dict, normalises an array). Captured at the failure, resume and "debug again" would
run on the leftovers. So the enabled path takes a snapshot before the task runs, and
the capture at the failure writes the snapshot instead of the changed objects.

The snapshot is a pickle (protocol 5) of each argument, with its large contiguous
buffers (NumPy arrays, PyTorch storages, ``bytearray``) out of band:

- immutable arguments (numbers, strings, bytes, tuples of them) cannot change: nothing
  is kept, the capture pickles them at the failure;
- read-only buffers inside other objects cannot change: kept by reference, no copy;
- writable buffers are copied while the call's copies stay within
  ``max_snapshot_bytes``; beyond it, only a fingerprint (BLAKE3) of the argument is
  kept, and at the failure podcode tells whether the task changed it (then the session
  says plainly that its saved state is the one at the failure);
- an argument that cannot be pickled at the call, or that holds a tensor on a GPU (a
  copy to the host at every call would cost too much), is captured at the failure,
  and the session says so.

Calls whose arguments are all immutable scalars, strings, bytes or tuples of them need
no snapshot and pay one type check per argument. With ``snapshot_inputs="failure"``
nothing is taken at the call.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from interactive.inputs import tensors
from interactive.storage import pickles
from interactive.storage.hashing import fingerprint

_ATOMS: frozenset[type] = frozenset(
    {int, float, complex, bool, str, bytes, type(None), range, frozenset}
)
BIG_BYTES = 1 << 20
"""``bytes`` objects at least this large go out of band (and are never copied)."""


@dataclass(frozen=True)
class Argument:
    """One argument at the call: its pickle and buffers, or a fingerprint, or why not."""

    blob: bytes | None = None
    buffers: tuple[pickle.PickleBuffer, ...] = ()
    digest: bytes | None = None
    """Set instead of ``blob`` when the argument was over the snapshot budget."""
    error: str | None = None
    """Why the argument could not be pickled at the call."""


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


def _wrap_bytes(value: Any) -> Any:
    if isinstance(value, bytes) and len(value) >= BIG_BYTES:
        return pickle.PickleBuffer(value)
    return value


def immutable(value: Any) -> bool:
    """Whether ``value`` cannot be changed in place (scalars, strings, tuples of them)."""
    kind = type(value)
    if kind in _ATOMS:
        return True
    return kind is tuple and all(immutable(item) for item in value)


def argument_digest(blob: bytes, buffers: list[pickle.PickleBuffer]) -> bytes:
    """The fingerprint an argument's pickle and buffers are compared by."""
    return fingerprint([blob, *pickles.raw_buffers(buffers)])


def take(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], budget: int
) -> CallSnapshot | None:
    """The call's arguments now, copying at most ``budget`` bytes of writable buffers;
    None when no argument can change in place."""
    values = [*args, *kwargs.values()]
    if all(immutable(value) for value in values):
        return None
    sink = BufferSink(host_only=True)  # a GPU tensor: captured at the failure, said so
    room = [budget]
    return CallSnapshot(tuple(_argument(sink, value, room) for value in values))


def _argument(sink: BufferSink, value: Any, room: list[int]) -> Argument:
    if immutable(value):
        return UNCHANGEABLE
    start = len(sink.buffers)
    try:
        blob = sink.dumps(value)
    except Exception as exc:  # pickling can raise anything a __reduce__ raises
        return Argument(error=f"{type(exc).__name__}: {exc}")
    found = sink.buffers[start:]
    del sink.buffers[start:]
    try:
        views = pickles.raw_buffers(found)
    except BufferError as exc:
        return Argument(error=f"BufferError: {exc}")
    writable = sum(view.nbytes for view in views if not view.readonly)
    if len(blob) + writable > room[0]:
        return Argument(digest=argument_digest(blob, found))
    room[0] -= len(blob) + writable
    kept = tuple(
        buffer if view.readonly else pickle.PickleBuffer(bytearray(view))
        for buffer, view in zip(found, views, strict=True)
    )
    return Argument(blob=blob, buffers=kept)


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
