"""GPU activity from a dcgm-exporter: the graphics engine activity of MIG slices.

NVML reports no utilisation, device-level or per process, for a MIG instance.
DCGM's profiling metric ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` does, per GPU
instance: dcgm-exporter publishes it in the Prometheus text format as a ratio
(0 to 1), with the parent GPU's ``UUID`` and the instance's ``GPU_I_ID`` as
labels::

    DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-5f2c...",GPU_I_PROFILE="1g.10gb",
                                  GPU_I_ID="9",...} 0.734
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

METRIC = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
MAX_BYTES = 16 * 1024 * 1024
"""A metrics page larger than this is cut (a node's page is usually well under 1 MB)."""
TIMEOUT_SECONDS = 2.0
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class DcgmError(Exception):
    """The exporter could not be read."""


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    value: float


def parse(text: str, metric: str = METRIC) -> Iterator[Series]:
    """The samples of ``metric`` in a Prometheus text page (comments and others skipped)."""
    for line in text.splitlines():
        if not line.startswith(metric) or line[len(metric):len(metric) + 1] not in ("{", " "):
            continue
        rest = line[len(metric):]
        labels: dict[str, str] = {}
        if rest.startswith("{"):
            end = rest.rfind("}")
            if end < 0:
                continue
            labels = {key: value.replace('\\"', '"') for key, value in
                      _LABEL.findall(rest[1:end])}
            rest = rest[end + 1:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if value == value:  # not NaN
            yield Series(labels, value)


def engine_active(series: list[Series], parent_uuid: str, gpu_instance: int) -> float | None:
    """The graphics engine activity of one MIG instance, in percent; None when absent."""
    for sample in series:
        labels = sample.labels
        if (labels.get("UUID", "").upper() == parent_uuid.upper()
                and labels.get("GPU_I_ID") == str(gpu_instance)):
            return max(0.0, min(100.0, 100.0 * sample.value))
    return None


def fetch(url: str, timeout: float = TIMEOUT_SECONDS) -> list[Series]:
    """The exporter's ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` samples; DcgmError if unreadable."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http(s) only
            text = response.read(MAX_BYTES).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        exc.close()
        raise DcgmError(f"HTTPError: {exc.code} {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise DcgmError(f"{type(exc).__name__}: {exc}") from None
    return list(parse(text))
