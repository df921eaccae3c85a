"""The job-wide channel: podcode's keys in the job's own rendezvous store.

A job over several pods (a PyTorchJob, an Indexed Job with a headless Service,
``torchrun --nnodes``) already shares one torch ``TCPStore`` at
``MASTER_ADDR:MASTER_PORT``: node rank 0's agent hosts it under torchrun's static
rendezvous, the rendezvous-rank-0 agent under c10d, rank 0's own process under a
plain ``python train.py``. Through it the pods agree on the job's bug, the session
that owns it, the fix and the resume generation, with no listener or port of
podcode's own.

**A client of podcode's own.** podcode opens its own client
(``TCPStore(host, port, is_master=False)``) with a short timeout
(:data:`CLIENT_TIMEOUT`), never the job's client object: the job's one carries the
group's timeout (30 minutes for gloo) and its own key prefix. torch is imported only
when the channel is opened, that is in a job that runs ``torch.distributed``.

**The store's limits.**

- A value over 8 MiB is refused, and the connection reset: a fix is cut into
  chunks of 1 MiB (:mod:`interactive.distributed.jobfix`), the manifest written last.
- ``get`` of a missing key waits for the client's timeout: podcode never calls it.
  It reads with ``compare_set(key, ABSENT, ABSENT)``, which answers at once: the
  value where the key exists, else ``ABSENT`` (a value never stored), and counters
  with ``add(key, 0)``.
- ``set`` has no answer: the store applies one connection's requests in order, so
  a fix's chunks (``set``) are in place before its manifest (``compare_set``, on the
  same client) is, and a pod that sees the manifest finds every chunk.
- Keys outlive a restart of torchrun's workers (the agent's store stays): every key
  lies under ``podcode/job/restart-<TORCHELASTIC_RESTART_COUNT>/`` (0 outside
  torchrun), so a restarted job never reads the last run's bug or fix. Every agent
  counts its own restarts; they agree while the job's nodes restart together (static
  rendezvous, or c10d without a node joining late). The resume
  generation is a counter in the store (``add``), never a number one process keeps.

**Keys** (under the namespace ``podcode/job/restart-<n>``):

========================================  ============================================
``generation``                            the resume generation: 0, then +1 per resume
``bug/<generation>``                      the generation's bug, JSON: rank, pod, error
                                          type, message; the first ``compare_set``
                                          wins and its pod owns the session
``fix/<generation>/<post>/<n>``           chunk ``n`` of a fix (``post``: the posting's
                                          random id, so two postings never mix)
``fix/<generation>/manifest``             the signed manifest, set last; the first
                                          posting wins
``session-pod``                           the pod that serves the job's session (its
                                          IDE, its email): the first bug's, set once
``command/<generation>``                  what the job does next, JSON
                                          (:mod:`interactive.distributed.jobsession`):
                                          resume, abort or end; the first one stays
``request/<generation>``                  wakes the pod that owns the session: a resume
                                          asked on another pod, or a command posted
``pods``                                  the pods that beat, one name a line
``beat/<pod>``                            the pod's liveness counter (``add``)
========================================  ============================================

A fix is posted for the generation whose bug it fixes; the resume that carries it
then bumps the generation, and every pod reads the fix of the generation before. A
pod waits for a fix with the store's ``wait`` on the manifest's key (the store wakes
it: nothing polls), through a second client: a client's ``wait`` holds it, and the
pod's beat must go on meanwhile.

**Authentication.** The store has none: whoever reaches the port can write a key.
A pod applies a fix only when its manifest is signed (HMAC-SHA256) with the job's
secret (:mod:`interactive.distributed.jobsecret`), and each file only where its
own copy is the failing pod's at the failure (:func:`jobfix.decide`). Bug claims,
the generation and beats are not signed: whoever reaches the store can disturb
them (a denial of service, never code run in a pod).

**Liveness.** Each pod adds 1 to its counter every :data:`BEAT_SECONDS` (4 s; less
often in a job of more than 64 pods, :mod:`interactive.distributed.jobbeats`: an
``add`` costs the store's host 20 to 30 microseconds of CPU; its answer also tells
the pod that the store is still there). A watcher reads every counter in one
``multi_get`` and, with its own monotonic clock (the pods' clocks are never
compared), counts a pod lost when its counter has not moved for three beats,
:data:`LOST_AFTER_SECONDS` at 4 s (:class:`Liveness`, pure).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from interactive.base.errors import PodcodeError
from interactive.base.types import Environ
from interactive.distributed import blame, jobfix

log = logging.getLogger(__name__)

PREFIX = "podcode/job"
CLIENT_TIMEOUT = datetime.timedelta(seconds=10)
"""How long one call on podcode's client may take (connecting included)."""
BEAT_SECONDS = 4.0
"""How often a pod adds to its liveness counter (at most: see
:func:`interactive.distributed.jobbeats.spacing`); each beat costs the store's host
20 to 30 microseconds of CPU."""
LOST_AFTER_SECONDS = 3 * BEAT_SECONDS
"""A pod whose counter has not moved for this long (three beats missed) is taken for lost."""
ABSENT = b"\0podcode: absent"
"""What a read compares a key with: a value podcode never stores."""
RESTART = "TORCHELASTIC_RESTART_COUNT"


class JobStoreError(PodcodeError):
    """The job's store cannot be reached, or did not answer within the client's timeout."""


@dataclass(frozen=True)
class StoreAddress:
    """Where the job's store listens, and which run of the job this is."""

    host: str
    port: int
    restart: int = 0
    """torchrun's restart count (``TORCHELASTIC_RESTART_COUNT``): the keys' namespace."""

    @property
    def namespace(self) -> str:
        return f"{PREFIX}/restart-{self.restart}"

    @property
    def job_id(self) -> str:
        """The job's run, the same on each of its pods: ``10.0.0.5:29500/restart-0``."""
        return f"{self.host}:{self.port}/restart-{self.restart}"


def address(environ: Environ | None = None) -> StoreAddress | None:
    """The job's store, from ``MASTER_ADDR``/``MASTER_PORT``; None where they are unset
    (no job over several processes) or unreadable."""
    environ = os.environ if environ is None else environ
    host = environ.get("MASTER_ADDR", "").strip()
    try:
        port = int(environ.get("MASTER_PORT", ""))
        restart = int(environ.get(RESTART, "0") or "0")
    except ValueError:
        return None
    return StoreAddress(host, port, restart) if host and 0 < port < 65536 else None


def pod_name(environ: Environ | None = None) -> str:
    """This pod's name (:func:`blame.pod_name`), else the host name: a job's pods need
    a name to tell each other apart, also where no ``POD_NAME`` is given."""
    return blame.pod_name(environ) or socket.gethostname()


@dataclass(frozen=True)
class Bug:
    """The job's bug: where it happened and what it is."""

    rank: int
    pod: str
    error: str
    """The exception's type name."""
    message: str

    def encode(self) -> bytes:
        return json.dumps({"rank": self.rank, "pod": self.pod, "error": self.error,
                           "message": self.message}, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Bug | None:
        try:
            data = json.loads(raw)
            return cls(int(data["rank"]), str(data["pod"]), str(data["error"]),
                       str(data["message"]))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Claim:
    owner: Bug | None
    """The bug that owns the generation (None: the stored claim is unreadable)."""
    won: bool
    """This claim is the owner."""


@contextlib.contextmanager
def _reaching(where: StoreAddress | None, what: str) -> Iterator[None]:
    try:
        yield
    except RuntimeError as exc:  # torch's DistError and its kinds
        at = f" at {where.host}:{where.port}" if where else ""
        raise JobStoreError(f"the job's store{at} did not answer ({what}): {exc}") from None


def connect(where: StoreAddress, timeout: datetime.timedelta = CLIENT_TIMEOUT) -> Any:
    """A client of podcode's own to the job's store (torch imported here, only here)."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    with _reaching(where, "connect"):
        return TCPStore(where.host, where.port, is_master=False, timeout=timeout)


class JobStore:
    """podcode's keys in the job's store, seen from one pod."""

    def __init__(self, client: Any, namespace: str, pod: str,
                 where: StoreAddress | None = None, waiter: Any = None) -> None:
        self.client = client
        self.waiter = waiter
        """A second client for :meth:`wait_fix`: a client's ``wait`` holds it (a beat
        on it would wait too); None: the one client is used."""
        self.namespace = namespace
        self.pod = pod
        self.where = where
        self._registered = False
        self._lock = threading.Lock()
        """One request at a time on :attr:`client`: the threads of a pod (its beat, its
        watch, the API's resume) share it, and a torch client is not safe to share."""

    @contextlib.contextmanager
    def _using(self, what: str, waiter: bool = False) -> Iterator[None]:
        """The main client, held (``waiter``: the waiting client, which one thread uses),
        and torch's errors as :class:`JobStoreError`."""
        with contextlib.nullcontext() if waiter else self._lock, _reaching(self.where, what):
            yield

    @classmethod
    def open(cls, environ: Environ | None = None, *,
             timeout: datetime.timedelta = CLIENT_TIMEOUT) -> JobStore | None:
        """The channel of this process's job; None where the job has no store."""
        where = address(environ)
        if where is None:
            return None
        return cls(connect(where, timeout), where.namespace, pod_name(environ), where,
                   waiter=connect(where, timeout))

    def key(self, *parts: object) -> str:
        return "/".join([self.namespace, *map(str, parts)])

    def read(self, key: str) -> bytes | None:
        """``key``'s value, or None at once where it is missing (never a blocking get)."""
        with self._using(f"read {key}"):
            raw = bytes(self.client.compare_set(key, ABSENT, ABSENT))
        return None if raw == ABSENT else raw

    # -- the bug and its owner ----------------------------------------------------------

    def claim_bug(self, generation: int, bug: Bug) -> Claim:
        """Claim ``generation``'s bug; the first claim stays and owns it."""
        mine = bug.encode()
        with self._using("claim the bug"):
            raw = bytes(self.client.compare_set(self.key("bug", generation), b"", mine))
        return Claim(Bug.decode(raw), raw == mine)

    def bug(self, generation: int) -> Bug | None:
        """``generation``'s bug and so its owner; None while no pod has claimed it."""
        raw = self.read(self.key("bug", generation))
        return None if raw is None else Bug.decode(raw)

    def session_pod(self, candidate: str) -> str:
        """The pod that serves the job's session (IDE, email) for the life of this run of
        the job: the first bug's pod (``candidate`` here), set once."""
        with self._using("read the session's pod"):
            raw = bytes(self.client.compare_set(self.key("session-pod"), b"",
                                                candidate.encode()))
        return raw.decode(errors="replace")

    # -- the resume generation ------------------------------------------------------------

    def generation(self) -> int:
        with self._using("read the generation"):
            return int(self.client.add(self.key("generation"), 0))

    def bump_generation(self) -> int:
        """Start the next generation (a resume); its number."""
        with self._using("bump the generation"):
            return int(self.client.add(self.key("generation"), 1))

    # -- the fix ---------------------------------------------------------------------------

    def post_fix(self, generation: int, edits: Sequence[jobfix.FileEdit],
                 secret: bytes) -> jobfix.Manifest:
        """Post ``edits`` as ``generation``'s fix: chunks first, the signed manifest last.
        Raises :class:`jobfix.FixRefused` where another fix was posted for it first."""
        post = secrets.token_hex(8)
        raw, chunks = jobfix.pack(edits, secret=secret, namespace=self.namespace,
                                  generation=generation, pod=self.pod, post=post)
        keys = [self.key("fix", generation, post, index) for index in range(len(chunks))]
        with self._using("post the fix"):
            for key, chunk in zip(keys, chunks, strict=True):
                self.client.set(key, chunk)
            stored = bytes(self.client.compare_set(self.key("fix", generation, "manifest"),
                                                   b"", raw))
            if stored != raw:
                for key in keys:
                    self.client.delete_key(key)
                raise jobfix.FixRefused(f"a fix for generation {generation} was posted already")
        return jobfix.open_manifest(raw, secret=secret, namespace=self.namespace,
                                    generation=generation)

    def read_fix(self, generation: int, secret: bytes) -> jobfix.Fix | None:
        """``generation``'s fix, verified; None while none is posted. Raises
        :class:`jobfix.FixRefused` for a fix that fails verification."""
        raw = self.read(self.key("fix", generation, "manifest"))
        if raw is None:
            return None
        manifest = jobfix.open_manifest(raw, secret=secret, namespace=self.namespace,
                                        generation=generation)
        chunks = [self.read(self.key("fix", generation, manifest.post, index))
                  for index in range(len(manifest.chunks))]
        return jobfix.assemble(manifest, chunks)

    def wait_fix(self, generation: int, secret: bytes,
                 timeout: datetime.timedelta) -> jobfix.Fix | None:
        """``generation``'s fix, verified, as soon as it is posted (the store wakes the
        waiter: no polling); None if none is posted within ``timeout``."""
        if not self.wait_for(self.key("fix", generation, "manifest"), timeout):
            return None
        return self.read_fix(generation, secret)

    # -- commands ------------------------------------------------------------------------

    def post_command(self, generation: int, raw: bytes) -> bytes:
        """Post ``raw`` as ``generation``'s command unless one is there; the one that stays.
        The owner's pod is woken too (``request/<generation>``)."""
        with self._using("post the job's command"):
            stored = bytes(self.client.compare_set(self.key("command", generation), b"", raw))
            self.client.set(self.key("request", generation), raw)
        return stored

    def request(self, generation: int, raw: bytes) -> None:
        """Wake the pod that owns ``generation``'s session (a resume asked elsewhere)."""
        with self._using("ask the session's pod"):
            self.client.set(self.key("request", generation), raw)

    def wait_for(self, key: str, timeout: datetime.timedelta) -> bool:
        """Block (on the second client) until ``key`` is set: True, or False after
        ``timeout``. The store wakes the waiter; nothing polls."""
        from torch.distributed import DistStoreError

        with self._using(f"wait for {key}", waiter=self.waiter is not None):
            try:
                (self.waiter or self.client).wait([key], timeout)
            except DistStoreError as exc:
                if "timeout" not in str(exc):
                    raise
                return False
        return True

    # -- liveness ------------------------------------------------------------------------------

    def beat(self) -> int:
        """Add 1 to this pod's liveness counter (and name the pod in ``pods`` after its
        first beat: a pod listed there always has a counter)."""
        with self._using("beat"):
            count = int(self.client.add(self.key("beat", self.pod), 1))
            if not self._registered:
                self.client.append(self.key("pods"), f"{self.pod}\n".encode())
                self._registered = True
            return count

    def beat_count(self, pod: str) -> int:
        """``pod``'s liveness counter (0 before its first beat)."""
        with self._using("read a beat"):
            return int(self.client.add(self.key("beat", pod), 0))

    def pods(self) -> list[str]:
        """The pods that have beaten, in the order they first did."""
        raw = self.read(self.key("pods")) or b""
        return list(dict.fromkeys(line for line in raw.decode().splitlines() if line))

    def beats(self) -> dict[str, int]:
        """Each pod's liveness counter now, in one request (``multi_get``: every listed
        pod has a counter, so it does not wait; a counter deleted by someone else makes
        it fail after the client's timeout)."""
        pods = self.pods()
        if not pods:
            return {}
        with self._using("read the beats"):
            values = self.client.multi_get([self.key("beat", pod) for pod in pods])
        return {pod: int(value) for pod, value in zip(pods, values, strict=True)}

    def beat_until(self, stop: threading.Event, interval: float = BEAT_SECONDS) -> None:
        """Beat every ``interval`` seconds until ``stop`` is set; a failed beat is logged,
        and the next one tried."""
        while not stop.is_set():
            try:
                self.beat()
            except JobStoreError as exc:
                log.warning("%s", exc)
            stop.wait(interval)


@dataclass(frozen=True)
class Seen:
    count: int
    since: float
    """When (the watcher's monotonic clock) the counter last moved."""


class Liveness:
    """Which pods are lost, from successive readings of their counters; pure (``now``
    is passed in)."""

    def __init__(self, lost_after: float = LOST_AFTER_SECONDS) -> None:
        self.lost_after = lost_after
        self.seen: dict[str, Seen] = {}

    def update(self, counts: Mapping[str, int], now: float) -> list[str]:
        """Record ``counts`` read at ``now``; the pods whose counter has not moved for
        ``lost_after`` seconds (a pod no longer listed counts as not moving)."""
        for pod, count in counts.items():
            earlier = self.seen.get(pod)
            if earlier is None or earlier.count != count:
                self.seen[pod] = Seen(count, now)
        return sorted(pod for pod, seen in self.seen.items()
                      if now - seen.since >= self.lost_after)
