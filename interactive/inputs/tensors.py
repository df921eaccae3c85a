"""PyTorch tensors in a capture: storages out of band, shared storage kept, devices restored.

torch pickles a tensor as its storage plus offset, size and strides, and the storage
in band: ``torch.save`` into bytes inside the pickle (one more copy of every tensor,
and no way at all for the newer dtypes such as ``uint16`` or ``float8``). Here a
storage's bytes go out of band instead, like a NumPy array's buffer: written raw into
the capture's buffer file and loaded without a copy.

- A storage that several tensors share (tied weights, views, slices, a ``state_dict``
  whose entries alias) is written once and loaded once; the tensors share it again.
- Every dtype round-trips (``bfloat16``, ``float8``, ``uint16``, complex, bool): the
  bytes are copied as they are and the tensor keeps its dtype, offset, strides and
  ``requires_grad``.
- A tensor on a GPU (or another accelerator) is copied to the host at capture. At
  load its storage goes back to the same device when that device exists here, else
  it stays on the CPU and a warning says so.

torch is never imported by podcode to capture: :func:`storage_pickler` is used only
when ``torch`` is already in ``sys.modules`` (no tensor can exist otherwise), and the
loading functions import it only when a capture holds tensors. The snapshot at each call
(:mod:`interactive.inputs.sizing`) pickles storages with the same :class:`Storages`, after
checking, by exact type, that they are on the host and fit its budget.
"""

from __future__ import annotations

import ctypes
import io
import logging
import pickle
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
_warned: set[str] = set()
"""Devices already warned about in this process: one warning per device, not per tensor."""


class Carrier:
    """One storage's bytes on the host and the device they came from; pickled once,
    however many tensors use the storage."""

    __slots__ = ("host", "device")

    def __init__(self, host: Any, device: str) -> None:
        self.host = host
        self.device = device

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (_load_storage, (pickle.PickleBuffer(host_bytes(self.host)), self.device))


def host_bytes(storage: Any) -> memoryview:
    """The bytes of a CPU storage, without a copy (the view keeps the storage alive)."""
    size = storage.nbytes()
    if size == 0:
        return memoryview(b"")
    raw = (ctypes.c_ubyte * size).from_address(storage.data_ptr())
    raw._podcode_owner = storage  # alive as long as the view
    return memoryview(raw).cast("B")


class Storages:
    """The storages met in one pickle, each with its :class:`Carrier` (made once)."""

    def __init__(self, torch: Any) -> None:
        self.kinds = (torch.storage.TypedStorage, torch.UntypedStorage)
        self._uint8 = torch.uint8
        self._seen: dict[int, Carrier] = {}

    def has(self, untyped: Any) -> bool:
        """Whether ``untyped`` was met already in this pickle (its bytes are written once)."""
        return untyped._cdata in self._seen

    def reduce(self, untyped: Any, dtype: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """How a storage of ``dtype`` over ``untyped`` is pickled: its carrier, out of band."""
        key = untyped._cdata
        carrier = self._seen.get(key)
        if carrier is None:
            host = untyped if untyped.device.type == "cpu" else untyped.cpu()
            carrier = self._seen[key] = Carrier(host, str(untyped.device))
        return (_typed_storage, (carrier, dtype))

    def reduce_any(self, obj: Any) -> Any:
        """:meth:`reduce` for a typed or untyped storage; ``NotImplemented`` for anything
        else."""
        if not isinstance(obj, self.kinds):
            return NotImplemented
        if isinstance(obj, self.kinds[0]):
            return self.reduce(obj._untyped_storage, obj.dtype)
        return self.reduce(obj, self._uint8)  # as torch.load gives an untyped storage back


class _StoragePickler(pickle.Pickler):
    """Pickles torch storages out of band, each one once."""

    def __init__(
        self, file: io.BytesIO, buffer_callback: Callable[[pickle.PickleBuffer], Any], torch: Any
    ) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._storages = Storages(torch)

    def reducer_override(self, obj: Any) -> Any:
        return self._storages.reduce_any(obj)


def storage_pickler() -> Callable[[Any, Callable[[pickle.PickleBuffer], Any]], bytes] | None:
    """A ``dumps(value, buffer_callback)`` that puts torch storages out of band, or None
    when torch is not loaded (then no value can hold a tensor)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "UntypedStorage"):
        return None

    def dumps(value: Any, buffer_callback: Callable[[pickle.PickleBuffer], Any]) -> bytes:
        out = io.BytesIO()
        _StoragePickler(out, buffer_callback, torch).dump(value)
        return out.getvalue()

    return dumps


def _torch() -> Any:
    """torch, imported when a capture being loaded holds tensors."""
    import torch

    return torch


def _load_storage(data: Any, device: str) -> Any:
    torch = _torch()
    view = memoryview(data).cast("B")
    if view.nbytes == 0:
        storage = torch.UntypedStorage(0)
    else:
        if view.readonly:  # only a capture read by other means: our loader's memory is writable
            view = memoryview(bytearray(view))
        storage = torch.frombuffer(view, dtype=torch.uint8).untyped_storage()
    return storage if device == "cpu" else _to_device(storage, device)


def _to_device(storage: Any, device: str) -> Any:
    """``storage`` on ``device`` when this machine has it, else on the CPU with a warning."""
    torch = _torch()
    target = torch.device(device)
    if target.type == "cuda" and not (
        torch.cuda.is_available() and (target.index or 0) < torch.cuda.device_count()
    ):
        reason = "no such CUDA device here"
    else:
        try:
            return storage.to(device=target)
        except (RuntimeError, AssertionError) as exc:
            reason = str(exc)
    if device not in _warned:
        _warned.add(device)
        log.warning("captured tensors from %s are loaded on the CPU: %s", device, reason)
    return storage


def _typed_storage(storage: Any, dtype: Any) -> Any:
    return _torch().storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)
