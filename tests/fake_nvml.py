"""A fake NVML *library* under the real ``pynvml`` module.

Tests install it in place of ``libnvidia-ml.so.1``: the real nvidia-ml-py code
runs (its function names, its argument conventions, its two-call buffer
protocol, its error classes) and calls these C entry points, which answer
through the ctypes objects pynvml passes, with NVML's return codes.

Modelled on the real library: MIG slices are not top-level devices but children
of their parent (``nvmlDeviceGetMigDeviceHandleByIndex``, empty slots answer
``NVML_ERROR_NOT_FOUND``); utilisation of a MIG device, device-level or per
process, is ``NVML_ERROR_NOT_SUPPORTED``; per-process samples carry the host's
process ids and a timestamp in microseconds, and only those newer than the
caller's timestamp are returned (``NVML_ERROR_NOT_FOUND`` when there is none).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

SUCCESS, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, INSUFFICIENT_SIZE = 0, 3, 4, 6, 7
DRIVER_NOT_LOADED = 9
MESSAGES = {NOT_SUPPORTED: b"Not Supported", NOT_FOUND: b"Not Found",
            NO_PERMISSION: b"Insufficient Permissions",
            INSUFFICIENT_SIZE: b"Insufficient Size", DRIVER_NOT_LOADED: b"Driver Not Loaded"}


@dataclass
class Slice:
    """A MIG device: a GPU instance and a compute instance in one slot of its parent."""

    uuid: str
    slot: int
    gpu_instance: int
    compute_instance: int = 0


@dataclass
class Process:
    """One per-process utilisation sample: host pid, SM utilisation, timestamp (µs)."""

    pid: int
    sm: int
    stamp: int = 1_000_000


@dataclass
class Device:
    """A top-level GPU. ``slices`` is None for a GPU without MIG."""

    uuid: str
    utilization: int = 0
    processes: list[Process] = field(default_factory=list)
    slices: list[Slice] | None = None
    mig_enabled: bool = True
    process_error: int = SUCCESS
    """What ``nvmlDeviceGetProcessUtilization`` answers instead of samples, if anything."""


def _error_string(code: int) -> bytes:
    return MESSAGES.get(code, b"Unknown Error")


class _Handle(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int)]


class FakeLibrary:
    """The C functions the sampler reaches through pynvml, as attributes."""

    def __init__(self, devices: list[Device], init_error: int = SUCCESS) -> None:
        self.devices = devices
        self.init_error = init_error
        self.calls: list[str] = []
        self._handles: dict[int, Device | tuple[Device, Slice]] = {}
        self._keep: list[_Handle] = []
        # pynvml sets ``restype`` on this one: a plain function takes the attribute
        self.nvmlErrorString = _error_string

    # -- plumbing --------------------------------------------------------------------
    def _point(self, out: Any, target: Device | tuple[Device, Slice]) -> None:
        handle = _Handle(len(self._keep))
        self._keep.append(handle)
        self._handles[ctypes.addressof(handle)] = target
        out._obj.contents = ctypes.cast(ctypes.pointer(handle),
                                        type(out._obj)).contents

    def _target(self, handle: Any) -> Device | tuple[Device, Slice]:
        return self._handles[ctypes.addressof(handle.contents)]

    # -- the entry points ------------------------------------------------------------
    def nvmlInitWithFlags(self, flags: int) -> int:  # noqa: N802 - NVML's names
        self.calls.append("init")
        return self.init_error

    def nvmlShutdown(self) -> int:  # noqa: N802
        self.calls.append("shutdown")
        return SUCCESS

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:  # noqa: N802
        count._obj.value = len(self.devices)
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:  # noqa: N802
        self._point(out, self.devices[index.value])
        return SUCCESS

    def nvmlDeviceGetUUID(self, handle: Any, buffer: Any, size: Any) -> int:  # noqa: N802
        target = self._target(handle)
        uuid = target[1].uuid if isinstance(target, tuple) else target.uuid
        buffer.value = uuid.encode()
        return SUCCESS

    def nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:  # noqa: N802
        target = self._target(handle)
        if isinstance(target, tuple) or target.slices is None:
            return NOT_SUPPORTED
        current._obj.value = pending._obj.value = int(target.mig_enabled)
        return SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, count: Any) -> int:  # noqa: N802
        target = self._target(handle)
        if isinstance(target, tuple) or target.slices is None:
            return NOT_SUPPORTED
        count._obj.value = 7
        return SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(  # noqa: N802
        self, handle: Any, index: Any, out: Any
    ) -> int:
        target = self._target(handle)
        assert not isinstance(target, tuple) and target.slices is not None
        for piece in target.slices:
            if piece.slot == index.value:
                self._point(out, (target, piece))
                return SUCCESS
        return NOT_FOUND

    def nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> int:  # noqa: N802
        target = self._target(handle)
        assert isinstance(target, tuple)
        out._obj.value = target[1].gpu_instance
        return SUCCESS

    def nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> int:  # noqa: N802
        target = self._target(handle)
        assert isinstance(target, tuple)
        out._obj.value = target[1].compute_instance
        return SUCCESS

    def nvmlDeviceGetUtilizationRates(self, handle: Any, out: Any) -> int:  # noqa: N802
        target = self._target(handle)
        if isinstance(target, tuple):
            return NOT_SUPPORTED
        self.calls.append(f"device {target.uuid}")
        out._obj.gpu, out._obj.memory = target.utilization, 0
        return SUCCESS

    def nvmlDeviceGetProcessUtilization(  # noqa: N802
        self, handle: Any, samples: Any, count: Any, last_seen: Any
    ) -> int:
        target = self._target(handle)
        if isinstance(target, tuple):
            return NOT_SUPPORTED
        self.calls.append(f"processes {target.uuid}")
        if target.process_error != SUCCESS:
            return target.process_error
        fresh = [p for p in target.processes if p.stamp > last_seen.value]
        if not fresh:
            return NOT_FOUND
        if samples is None or count._obj.value < len(fresh):
            count._obj.value = len(fresh)
            return INSUFFICIENT_SIZE
        for slot, process in zip(samples, fresh, strict=False):
            slot.pid, slot.timeStamp, slot.smUtil = process.pid, process.stamp, process.sm
        count._obj.value = len(fresh)
        return SUCCESS


def install(monkeypatch: pytest.MonkeyPatch, devices: list[Device],
            init_error: int = SUCCESS) -> FakeLibrary:
    """Put a fake library under the real pynvml for this test; returns it."""
    library = FakeLibrary(devices, init_error)
    monkeypatch.setattr(pynvml, "nvmlLib", library)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return library
