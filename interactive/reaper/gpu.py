"""GPU activity as it is in clusters: the session's own processes, MIG slices, DCGM.

For each GPU this process may use, one reading in percent, by the first of:

1. **per-process** (a whole GPU whose NVML process ids this process can match,
   see :mod:`interactive.reaper.pidns`): the utilisation of the task's own process
   tree, from NVML's per-process samples (``nvmlDeviceGetProcessUtilization``),
   so that another tenant of a shared GPU (time-slicing, MPS, a node seen whole)
   does not keep an abandoned session alive;
2. **device-level** (a whole GPU otherwise): ``nvmlDeviceGetUtilizationRates``,
   everything on the GPU;
3. **MIG slice**: NVML has no utilisation for MIG instances, device-level or per
   process, so the graphics engine activity of the slice is read from a
   dcgm-exporter (``dcgm_url``); without one, the slice gives no reading and the
   other signals decide.

Which one is in use is said once per GPU, in the log and in the session's
status notes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from interactive.base.types import Environ
from interactive.reaper import dcgm
from interactive.reaper.idle import Sample
from interactive.reaper.pidns import ProcessView

logger = logging.getLogger(__name__)

NVML_DEVICE_MIG_ENABLE = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
OTHER_SIGNALS = "the editor, terminals, debugger, workspace files and CPU decide instead"


def visible_gpus(environ: Environ) -> list[str] | None:
    """The GPUs this process may use, as NVML indices or UUID prefixes; None: all.

    ``CUDA_VISIBLE_DEVICES`` wins (indices or ``GPU-``/``MIG-`` UUIDs; like CUDA,
    the list stops at the first invalid entry; empty or ``-1``: none). Inside a
    container NVML already sees only the GPUs the runtime gave it, so
    ``NVIDIA_VISIBLE_DEVICES`` is used only when it lists UUIDs.
    """
    cuda = environ.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None:
        chosen: list[str] = []
        for item in (part.strip() for part in cuda.split(",")):
            if item.isdigit() or item.upper().startswith(("GPU-", "MIG-")):
                chosen.append(item)
            else:
                break
        return chosen
    nvidia = [part.strip() for part in environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",")]
    uuids = [item for item in nvidia if item.upper().startswith(("GPU-", "MIG-"))]
    return uuids or None


@dataclass(frozen=True)
class Gpu:
    """A whole GPU, or a MIG slice of one (a child of its parent in NVML)."""

    index: int
    """NVML's index of the GPU (of the parent, for a slice)."""
    uuid: str
    handle: Any = field(compare=False, repr=False)
    parent_uuid: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None

    @property
    def mig(self) -> bool:
        return self.parent_uuid is not None

    @property
    def name(self) -> str:
        return f"MIG slice {self.uuid}" if self.mig else f"GPU {self.index} ({self.uuid})"

    def matches(self, want: str) -> bool:
        """Whether one ``CUDA_VISIBLE_DEVICES`` entry names this GPU or slice."""
        want = want.upper()
        if want.isdigit():
            return int(want) == self.index
        if want.startswith("MIG-GPU-"):  # the older form: MIG-<parent UUID>/<GI>/<CI>
            parent, _, ids = want[len("MIG-"):].partition("/")
            return self.mig and self.parent_uuid is not None and (
                self.parent_uuid.upper() == parent
                and ids == f"{self.gpu_instance}/{self.compute_instance}"
            )
        if want.startswith("MIG-"):
            return self.mig and self.uuid.upper().startswith(want)
        # a GPU's UUID: the GPU, or every slice of it when it is split
        return (self.parent_uuid or self.uuid).upper().startswith(want)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def discover(nvml: Any) -> list[Gpu]:
    """Every whole GPU and every MIG slice NVML shows (slices instead of their parent)."""
    found = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        if _mig_enabled(nvml, handle):
            found.extend(_slices(nvml, index, uuid, handle))
        else:
            found.append(Gpu(index, uuid, handle))
    return found


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:  # NotSupported: a GPU without MIG
        return False
    return bool(current == NVML_DEVICE_MIG_ENABLE)


def _slices(nvml: Any, index: int, parent: str, handle: Any) -> list[Gpu]:
    slices = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:  # NotFound: an empty slot
            continue
        try:
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
        except nvml.NVMLError:
            gi = ci = -1
        slices.append(Gpu(index, _text(nvml.nvmlDeviceGetUUID(mig)), mig, parent, gi, ci))
    return slices


def select(gpus: Iterable[Gpu], wanted: list[str] | None) -> list[Gpu]:
    if wanted is None:
        return list(gpus)
    return [gpu for gpu in gpus if any(gpu.matches(want) for want in wanted)]


@dataclass
class GpuSampler:
    """Active when a visible GPU or slice is busier than ``idle_percent`` (see the module).

    Without NVML (no driver, no GPU: any ``pynvml.NVMLError``) it says "no GPU"
    once in the log and reports nothing from then on. ``nvml`` is the ``pynvml``
    module (from nvidia-ml-py); tests pass it with a fake library under it.
    ``note`` receives the sentences for the session's status notes.
    """

    idle_percent: float
    environ: Environ = field(default_factory=lambda: dict(os.environ))
    nvml: Any = None
    dcgm_url: str | None = None
    note: Callable[[str], None] | None = None
    processes: ProcessView = field(default_factory=ProcessView)
    fetch_dcgm: Callable[[str], list[dcgm.Series]] = dcgm.fetch
    _gpus: list[Gpu] | None = field(default=None, init=False)
    _disabled: bool = field(default=False, init=False)
    _said: set[str] = field(default_factory=set, init=False)
    _last_seen: dict[str, int] = field(default_factory=dict, init=False)
    _device_level: dict[str, str] = field(default_factory=dict, init=False)
    """GPUs read device-level although the pids match, and why (by UUID)."""

    def sample(self, now: float) -> Sample:
        gpus = self._open()
        if not gpus:
            return Sample("gpu", False, None, "")
        pids = self._own_pids()
        series = self._dcgm() if any(gpu.mig for gpu in gpus) else None
        readings = [r for r in (self._reading(gpu, pids, series) for gpu in gpus) if r is not None]
        if not readings:
            return Sample("gpu", False, None, "")
        busiest = max(readings)
        active = busiest > self.idle_percent
        return Sample("gpu", active, busiest, f"GPU {busiest:.0f}%" if active else "")

    def close(self) -> None:
        if self._gpus is not None and not self._disabled:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # shutting down is best effort
                logger.debug("nvmlShutdown failed", exc_info=True)
        self._gpus = None

    # -- what to read ----------------------------------------------------------------
    def _open(self) -> list[Gpu]:
        if self._disabled:
            return []
        if self._gpus is None:
            try:
                nvml = self._init()
                self._gpus = select(discover(nvml), visible_gpus(self.environ))
            except Exception as exc:  # pynvml.NVMLError and its subclasses, or no pynvml
                self._disable(f"NVML is not available ({type(exc).__name__}: {exc})")
                return []
            if not self._gpus:
                self.close()
                self._disable("no visible GPU")
        return self._gpus or []

    def _init(self) -> Any:
        if self.nvml is None:
            import pynvml

            self.nvml = pynvml
        self.nvml.nvmlInit()
        return self.nvml

    def _own_pids(self) -> set[int] | None:
        own = self.processes.own_pid()
        return None if own is None else self.processes.tree(own)

    def _dcgm(self) -> list[dcgm.Series] | dcgm.DcgmError | None:
        if self.dcgm_url is None:
            return None
        try:
            return self.fetch_dcgm(self.dcgm_url)
        except dcgm.DcgmError as exc:
            return exc

    # -- one reading per GPU ----------------------------------------------------------
    def _reading(
        self, gpu: Gpu, pids: set[int] | None, series: list[dcgm.Series] | dcgm.DcgmError | None
    ) -> float | None:
        try:
            if gpu.mig:
                return self._slice(gpu, series)
            if pids is not None and gpu.uuid not in self._device_level:
                reading = self._per_process(gpu, pids)
                if reading is not None:
                    return reading
            return self._device(gpu, pids)
        except Exception:  # a GPU that fell off the bus, a driver hiccup
            logger.debug("no utilisation reading for %s", gpu.name, exc_info=True)
            return None

    def _per_process(self, gpu: Gpu, pids: set[int]) -> float | None:
        """The task's processes' share of the GPU; None when NVML has no such samples."""
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(
                gpu.handle, self._last_seen.get(gpu.uuid, 0)
            )
        except self.nvml.NVMLError as exc:
            code = _code(exc)
            if code not in (NVML_ERROR_NOT_FOUND, 0):  # else: no sample since last time
                self._device_level[gpu.uuid] = (
                    "NVML has no per-process samples on it" if code == NVML_ERROR_NOT_SUPPORTED
                    else f"NVML's per-process samples cannot be read ({type(exc).__name__})"
                )
                return None
            samples = []
        busiest: dict[int, int] = {}
        for sample in samples:
            stamp = int(sample.timeStamp)
            self._last_seen[gpu.uuid] = max(self._last_seen.get(gpu.uuid, 0), stamp)
            if int(sample.pid) in pids:
                busiest[int(sample.pid)] = max(busiest.get(int(sample.pid), 0), int(sample.smUtil))
        self._say(
            f"GPU activity of {gpu.name}: the utilisation of this task's own processes "
            "(NVML per-process samples); other processes on this GPU do not count"
        )
        return float(min(100, sum(busiest.values())))

    def _device(self, gpu: Gpu, pids: set[int] | None) -> float:
        reading = float(self.nvml.nvmlDeviceGetUtilizationRates(gpu.handle).gpu)
        why = self._device_level.get(gpu.uuid) if pids is not None else None
        why = why or self.processes.reason or "this process's ids cannot be matched to NVML's"
        self._say(
            f"GPU activity of {gpu.name}: the whole GPU's utilisation (NVML), since {why}; "
            "other processes on this GPU count as activity too"
        )
        return reading

    def _slice(self, gpu: Gpu, series: list[dcgm.Series] | dcgm.DcgmError | None) -> float | None:
        if series is None:
            self._say(
                f"GPU activity cannot be measured on {gpu.name}: NVML has no utilisation for "
                f"MIG slices and no dcgm-exporter is configured (dcgm_url, PODCODE_DCGM_URL); "
                f"{OTHER_SIGNALS}"
            )
            return None
        if isinstance(series, dcgm.DcgmError):
            self._say(
                f"GPU activity cannot be measured on {gpu.name} while the dcgm-exporter at "
                f"{self.dcgm_url} cannot be read ({str(series).split(':')[0]}); {OTHER_SIGNALS}",
                detail=str(series),
            )
            return None
        assert gpu.parent_uuid is not None and gpu.gpu_instance is not None
        reading = dcgm.engine_active(series, gpu.parent_uuid, gpu.gpu_instance)
        if reading is None:
            self._say(
                f"GPU activity cannot be measured on {gpu.name}: the dcgm-exporter at "
                f"{self.dcgm_url} has no {dcgm.METRIC} for GPU instance {gpu.gpu_instance} of "
                f"{gpu.parent_uuid}; {OTHER_SIGNALS}"
            )
            return None
        self._say(
            f"GPU activity of {gpu.name}: its graphics engine activity ({dcgm.METRIC}) from "
            f"the dcgm-exporter at {self.dcgm_url}"
        )
        return reading

    # -- saying things once -----------------------------------------------------------
    def _say(self, sentence: str, detail: str = "") -> None:
        if sentence in self._said:
            return
        self._said.add(sentence)
        logger.info("%s%s", sentence, f" ({detail})" if detail else "")
        if self.note is not None:
            self.note(sentence)

    def _disable(self, why: str) -> None:
        self._disabled = True
        logger.info("no GPU: %s; GPU utilisation is not watched", why)
