"""Which rank's failure stopped this one: the first real failure of the job, across pods.

A rank that fails with a bug of its own records it in the process group's store
(``podcode/failure-<generation>``) before it breaks the group: the first record
of a generation stays (``compare_set`` on an absent key), later ones read it.
The store is the job's, shared by every pod (torchrun's agent store on the
first node, or rank 0's), so a rank on another pod finds it too.

A rank whose collective failed because the group broke ("Connection closed by
peer") is a victim: it never records itself as a cause. It names the first real
failure (rank, pod, exception and message) when the store or its own pod's
ranks know it, and otherwise says that a rank on another pod broke the group.

The record and the message are pure; the store is passed in.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

ABSENT = b"\0podcode: no such key"
"""What :func:`first` compares the key with: a value no rank ever records."""


def key(generation: int) -> str:
    """The store key of a generation's first failure (a resume starts the next)."""
    return f"podcode/failure-{generation}"


@dataclass(frozen=True)
class Failure:
    """One rank's own failure: its global rank, pod and ``"Type: message"``."""

    rank: int
    error: str
    pod: str | None = None

    def encode(self) -> bytes:
        return json.dumps({"rank": self.rank, "error": self.error, "pod": self.pod}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Failure | None:
        """The failure ``raw`` records; None for anything else."""
        try:
            data = json.loads(raw)
            pod = data.get("pod")
            return cls(int(data["rank"]), str(data["error"]),
                       None if pod is None else str(pod))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def pod_name(environ: Mapping[str, str] | None = None) -> str | None:
    """This pod's name (``POD_NAME``, from the downward API), None outside a pod."""
    environ = os.environ if environ is None else environ
    return environ.get("POD_NAME") or None


def record_first(store: Any, generation: int, failure: Failure) -> Failure | None:
    """Record ``failure`` unless a failure of this generation is recorded already; the
    first failure (this one or the earlier one), None if the store cannot be used."""
    try:
        raw = bytes(store.compare_set(key(generation), b"", failure.encode()))
    except Exception as exc:  # the store is gone: the peers cannot be told this way
        log.warning("cannot record this rank's failure in the group's store: %s", exc)
        return None
    return Failure.decode(raw)


def first(store: Any, generation: int) -> Failure | None:
    """The generation's first recorded failure, without waiting for one: a store's
    ``get`` of a missing key blocks for the store's timeout, ``compare_set`` with an
    expected value that no key holds only reads."""
    try:
        raw = bytes(store.compare_set(key(generation), ABSENT, ABSENT))
    except Exception as exc:
        log.warning("cannot read the first failure from the group's store: %s", exc)
        return None
    return None if raw == ABSENT else Failure.decode(raw)


def reason(culprit: Failure | None, other_pods: bool) -> str:
    """What a victim says stopped it: the culprit named, or who broke the group as far
    as is known (``other_pods``: the job has ranks on other pods)."""
    if culprit is None:
        where = "on another pod" if other_pods else "of this job"
        return f"stopped because a rank {where} broke the process group"
    on = f" on pod {culprit.pod}" if culprit.pod else ""
    return f"stopped because rank {culprit.rank}{on} failed ({culprit.error})"
