"""Each pod's beat in the job's store, and the watch on the pods its session needs.

Each pod's leading rank adds to its counter every :data:`jobstore.BEAT_SECONDS` (in a
job of more than 64 pods, the pods that do not serve the session less often:
:func:`spacing`, so that the store's host pays for at most :data:`BEATS_PER_SECOND`);
the pod serving the job's session reads every pod's counter, and the first
:data:`WARDENS` other pods read the serving pod's (two reads a beat for the store's
host, not one per pod). A counter that has not moved for three beats
(:data:`jobstore.LOST_AFTER_SECONDS` at 4 s), or a store that stops answering as long,
is why the job cannot go on (:meth:`Beats.tick`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from interactive.base.threads import start_thread
from interactive.distributed.jobstore import (
    BEAT_SECONDS,
    LOST_AFTER_SECONDS,
    JobStore,
    JobStoreError,
    Liveness,
)

if TYPE_CHECKING:
    from interactive.distributed.jobsession import JobSession

log = logging.getLogger(__name__)
_lock = threading.Lock()

WARDENS = 2
"""How many of the other pods watch the serving pod's beat (the first to beat): enough
that one lost with it still leaves one, few enough that the store's host does not pay
for a read per pod and beat."""


BEATS_PER_SECOND = 16.0
"""The most beats a second the pods not serving the session give the store's host
together (about 0.03 CPU-seconds a minute): past 64 pods each beats less often."""


def spacing(pods: int, interval: float = BEAT_SECONDS) -> float:
    """How often one of ``pods`` pods that does not serve the session beats: ``interval``,
    or less often in a job so large that their beats together would pass
    :data:`BEATS_PER_SECOND`."""
    return max(interval, pods / BEATS_PER_SECOND)


def wardens(pods: list[str], serving: str, count: int = WARDENS) -> list[str]:
    """The pods that watch the serving pod: the first ``count`` others to have beaten."""
    return [pod for pod in pods if pod != serving][:count]


class Beats:
    """This pod's beat, and the watch on the pods the job's session needs: the serving
    pod watches every pod, the first :data:`WARDENS` other pods watch the serving pod's.
    One per process, started by the first session that leads its pod; it beats until
    the process ends."""

    def __init__(self, store: JobStore, interval: float = BEAT_SECONDS,
                 lost_after: float = LOST_AFTER_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.interval = interval
        self.lost_after = lost_after
        self.clock = clock
        self.watching: tuple[JobSession, Callable[[str], None]] | None = None
        """The open session and what to call with the reason when the job cannot go on."""
        self.pace = interval
        """How often this pod beats (:meth:`watch` sets it)."""
        self._liveness = Liveness(lost_after)
        self._warden = False
        """Whether this pod, not the serving one, watches the serving pod's beat."""
        self._failing_since: float | None = None
        self._lock = threading.Lock()

    def watch(self, job: JobSession | None, lost: Callable[[str], None] | None = None,
              pods: int = 1) -> None:
        """Watch for ``job`` (None: stop watching) in a job of ``pods`` pods: this pod beats
        every :attr:`interval` if it serves the session, else every :func:`spacing`, and
        the serving pod gives the others three of their beats before it counts one lost."""
        pace = spacing(pods, self.interval)
        warden = False
        if job is not None and not job.owner:
            try:
                self.store.beat()  # listed before the others choose their wardens
                warden = self.store.pod in wardens(self.store.pods(), job.serving)
            except JobStoreError:
                warden = True  # the list cannot be read: watch rather than not
        serving = job is not None and job.owner
        with self._lock:
            self.watching = None if job is None or lost is None else (job, lost)
            self._liveness = Liveness(self.lost_after * pace / self.interval if serving
                                      else self.lost_after)
            self._warden = warden
            if job is not None:  # the pace stays for the process's life: a pod may watch again
                self.pace = self.interval if serving else pace

    def tick(self) -> str | None:
        """One beat, and one look at the watched pods; why the job cannot go on, if so."""
        now = self.clock()
        try:
            self.store.beat()
            with self._lock:
                watching, liveness, warden = self.watching, self._liveness, self._warden
            if watching is None:
                self._failing_since = None
                return None
            job = watching[0]
            if job.owner:
                counts = self.store.beats()
            elif warden:
                counts = {job.serving: self.store.beat_count(job.serving)}
            else:
                counts = {}
            self._failing_since = None
        except JobStoreError as exc:
            if self._failing_since is None:
                self._failing_since = now
            if now - self._failing_since >= self.lost_after and self.watching is not None:
                return f"the job's store stopped answering ({exc})"
            return None
        counts.pop(self.store.pod, None)
        lost = liveness.update(counts, now)
        if not lost:
            return None
        names = ", ".join(lost)
        return (f"pod {names} of the job stopped answering for "
                f"{liveness.lost_after:.0f} s (lost: preempted, or its node failed)")

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            why = self.tick()
            watching = self.watching
            if why is not None and watching is not None:
                self.watch(None)
                try:
                    watching[1](why)
                except Exception:
                    log.exception("could not end the job's session after: %s", why)
            stop.wait(self.pace)


_beats: Beats | None = None


def beats(store: JobStore) -> Beats:
    """The process's :class:`Beats`, started at the first call."""
    global _beats
    with _lock:
        if _beats is None:
            _beats = Beats(store)
            start_thread(_beats.run, "job-beat", threading.Event())
        return _beats
