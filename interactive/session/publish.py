"""Say where a session stands: its records, the pod's label and annotations, the other ranks.

The :class:`Publisher` is the one place a session's phase leaves the process:

- ``session.json`` (the session's own, its rank's, the home's while it holds it),
  written at once on the calling thread, one writer at a time, so a reader never
  sees an older phase after a newer one;
- the pod: marked as a session once (labels, annotations, the ``PodcodeWaiting``
  event), then its ``podcode.io/state`` label at each phase, in the order the
  phases came;
- the other local ranks, told of a resume or an abort.

The pod and the ranks are told in the background, on the session's loop, and the
publisher tracks every piece of that work: :meth:`Publisher.close` waits for it (within
a bound) and cancels what is left, so nothing it started runs on after the session.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Protocol

from interactive.base import record
from interactive.base.identity import own_session_id, pod_shared
from interactive.base.loop import LoopThread
from interactive.base.phases import CommandKind, Phase
from interactive.base.record import SessionRecord
from interactive.base.sessionfile import find_local
from interactive.distributed.peers import Peers
from interactive.kube.labels import JobMark

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_SECONDS = 10.0
"""How long closing waits for the pod and the ranks to be told; then the rest is cancelled."""


class MarkedPod(Protocol):
    """What the publisher asks of the pod (:class:`interactive.kube.pod.PodClient`)."""

    problems: list[str]

    def mark_session(
        self, *, task: str, state: str, owner: str | None, ports: Mapping[str, int], home: str,
        session: str | None = None, job: JobMark | None = None,
    ) -> None: ...

    def set_state(self, state: str) -> Any: ...

    def end_session(self, session: str, state: str) -> Any: ...


PRECEDENCE = (Phase.WAITING, Phase.WARNED, Phase.REAPING, Phase.RESUMING, Phase.RUNNING,
              Phase.FAILED, Phase.DONE)
"""Several sessions of one process label one pod: with the phase that most asks for a
person (a session that waits stays findable by ``podcode list`` while another one runs
or has ended)."""
_phases: weakref.WeakKeyDictionary[Publisher, str] = weakref.WeakKeyDictionary()
"""The phase of each open session of this process: what the pod's label sums up."""
_phases_lock = threading.Lock()


def pod_phase(phases: list[str]) -> str:
    """The pod's label for the phases of its process's open sessions (never empty)."""
    rank = {str(phase): i for i, phase in enumerate(PRECEDENCE)}
    return min(phases, key=lambda phase: rank.get(phase, len(rank)))


def _label_for(session: Publisher, phase: str | None) -> str | None:
    """Record ``session``'s phase (None: it ended) and return the pod's label: the sum of
    the open sessions' phases, this process's and (see :func:`_other_processes`) the
    other workers' of a shared pod, or None when none is left open."""
    others = _other_processes(session.base_home)
    with _phases_lock:
        if phase is None:
            _phases.pop(session, None)
        else:
            _phases[session] = phase
        phases = [*_phases.values(), *others]
        return pod_phase(phases) if phases else None


def _other_processes(base_home: Path) -> list[str]:
    """The phases of the sessions open in other processes of this pod, from their records
    in ``base_home``: on a pod that serves other workers (a Ray node runs many, each of
    which may hold a session), a session that resumes or ends must not mark the pod ended
    while another worker's session still waits there. Nothing is read on a pod of one's
    own."""
    if not pod_shared():
        return []
    return [found.state for found in find_local(base_home)
            if found.open and found.pid != os.getpid()]


class Publisher:
    """Publishes one session; built when it opens, closed when it closes."""

    def __init__(
        self,
        loop: LoopThread,
        *,
        home: Path,
        base_home: Path,
        leader: bool,
        peers: Peers | None = None,
        session: str | None = None,
    ) -> None:
        self.home = home
        self.session = session
        """The session's name (:func:`interactive.base.identity.claim_session_id`)."""
        self.base_home = base_home
        self.leader = leader
        """Claims the home's ``session.json`` and speaks for the pod."""
        self.peers = peers
        self.pod: MarkedPod | None = None
        self.phase: str = Phase.RUNNING
        """The phase last published (what the pod is marked with when it is found)."""
        self.recorded = False
        """Whether a record was written (then closing writes the final one)."""
        self._loop = loop
        self._write_lock = threading.Lock()
        self._pod_lock = asyncio.Lock()
        self._pending: dict[concurrent.futures.Future[None], str] = {}
        self._pending_lock = threading.Lock()
        self._closed = False

    # -- what the session calls ------------------------------------------------------------
    def publish(self, build: Callable[[], SessionRecord]) -> None:
        """Write the record ``build()`` makes now, and label the pod with its phase.

        ``build`` runs under the writers' lock: the last record written is the newest."""
        with self._write_lock:
            current = build()
            self._write(current)
            self.phase = current.state
            label = _label_for(self, str(current.state))
            if self.pod is not None and label is not None:
                self._spawn(self._set_state(label), f"label the pod {label}")

    async def mark_pod(
        self, pod: MarkedPod, *, task: str, owner: str | None, ports: Mapping[str, int],
        job: JobMark | None = None,
    ) -> None:
        """Mark ``pod`` as this session's (labels with the phase, annotations, event; ``job``:
        the job over several pods the session is part of); from now on its label follows
        each phase published, in order."""
        in_job: dict[str, Any] = {} if job is None else {"job": job}  # else marked as before
        async with self._pod_lock:
            self.pod = pod  # a phase published from now on is labelled after this mark
            state = _label_for(self, str(self.phase)) or str(self.phase)
            await asyncio.to_thread(
                lambda: pod.mark_session(
                    task=task, state=state, owner=owner, ports=ports, home=str(self.home),
                    session=self._name(), **in_job,
                )
            )

    def labelling(self, pod: Any) -> Any:
        """``pod`` as the idle monitor is handed it: the state it labels the pod with
        (``warned``, ``reaping``, back to ``waiting``) is this session's phase, summed up with
        the others' like every label published here, so one session's warning or cleanup
        never hides another that waits in the same pod."""
        return _Labelled(self, pod)

    def tell_peers(self, command: CommandKind) -> None:
        """Forward ``command`` to the other local ranks in a session (in the background)."""
        peers = self.peers
        if peers is not None:
            self._spawn(asyncio.to_thread(peers.forward, command), f"tell the ranks {command}")

    def pending(self) -> list[str]:
        """The background work still tracked, each named (for tests and logs)."""
        with self._pending_lock:
            return list(self._pending.values())

    def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> None:
        """Take no more background work; wait for what is pending, at most ``timeout``
        seconds, then cancel the rest. Call it before the loop stops."""
        with self._pending_lock:
            self._closed = True
            pending = dict(self._pending)
        _, late = concurrent.futures.wait(pending, timeout)
        for future in late:
            log.warning("publishing the session: gave up waiting to %s", pending[future])
            future.cancel()

    def finish(self, final: SessionRecord) -> None:
        """After :meth:`close`: the pod's label and (if one was written) the record say the
        session ended. Runs here, synchronously."""
        with self._write_lock:
            self.phase = final.state
            label = _label_for(self, None) or str(final.state)  # the others', if open
            if self.pod is not None:
                try:
                    self.pod.end_session(self._name(), label)
                except Exception:
                    log.exception("publishing the session: could not label the pod %s", label)
            if self.recorded:
                self._write(final)

    # -- plumbing --------------------------------------------------------------------------
    def _name(self) -> str:
        """The session's id, as its records and the pod's annotation name it."""
        return self.session or own_session_id()

    def _write(self, current: SessionRecord) -> None:
        self.recorded = True
        first = self.session in (None, own_session_id())  # others are listed, not claimed
        record.write_records(
            current, self.home, self.base_home, claim=self.leader and first, session=self.session
        )

    async def _set_state(self, state: str) -> None:
        async with self._pod_lock:
            pod = self.pod
            if pod is not None:
                await asyncio.to_thread(pod.set_state, state)

    def _spawn(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        with self._pending_lock:
            if self._closed:
                work.close()
                log.debug("publishing the session: closed, not started: %s", what)
                return
            future = self._loop.submit(_guarded(work, what))
            self._pending[future] = what
        future.add_done_callback(self._forget)

    def _forget(self, future: concurrent.futures.Future[None]) -> None:
        with self._pending_lock:
            self._pending.pop(future, None)


async def _guarded(work: Coroutine[Any, Any, Any], what: str) -> None:
    """``work``, its failure logged (publishing never stops the session)."""
    try:
        await work
    except Exception:
        log.exception("publishing the session: could not %s", what)


class _Labelled:
    """A pod whose ``set_state`` goes through :func:`_label_for` (see
    :meth:`Publisher.labelling`); everything else is the pod's own."""

    def __init__(self, publisher: Publisher, pod: Any) -> None:
        self._publisher = publisher
        self._pod = pod

    def set_state(self, state: str) -> Any:
        return self._pod.set_state(_label_for(self._publisher, state) or state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pod, name)
