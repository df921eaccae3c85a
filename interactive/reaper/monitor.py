"""The idle monitor: sample activity, decide, warn, cancel, and hand over to cleanup.

:func:`run_monitor` runs on the session's event loop. Every
``poll_seconds`` (or sooner, when a deadline comes first) it reads the
samplers on its own thread (``podcode-monitor``), folds their answers into
the session's last activity, asks :func:`interactive.reaper.idle.decide` what to do
and does it:

- warn: phase ``warned`` with ``reap_at``, the pod's ``podcode.io/reap-at``
  annotation and state label, a ``PodcodeIdleWarning`` event, the email;
- cancel (activity or a keep-alive after the warning): back to the previous
  state, annotation cleared;
- reap: phase ``reaping``, then ``await on_reap()`` and return.

Each phase is a :class:`~interactive.base.phases.Phase` entered through
:meth:`SessionState.move`, only from the phases the decision was made in: a session
resumed meanwhile is neither warned nor reaped.

While the task itself runs (state ``running`` or ``resuming``) the session
counts as active. One failing sampler or action is logged and never stops
the loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from interactive.base import identity
from interactive.base.phases import BUSY, ENDED, RESUMABLE, Phase
from interactive.base.settings import IdleSettings, MailSettings
from interactive.base.state import SessionState
from interactive.base.threads import service_executor
from interactive.base.types import Environ
from interactive.kube.labels import PodHandle, describe_pod, keepalive_command
from interactive.reaper.activity import CpuSampler, FileSampler, GpuSampler, Sampler, own_writes
from interactive.reaper.idle import (
    Activity,
    IdleWarning,
    Kind,
    Limits,
    Sample,
    decide,
    next_check,
    projected_reap_at,
)
from interactive.reaper.notify import Notifier, build_notifier
from vscode_config.mail import WarningMail, utc

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT_SECONDS = 5.0

T = TypeVar("T")


@dataclass
class MonitorDeps:
    """Everything the monitor does I/O with; tests swap each one."""

    samplers: Sequence[Sampler]
    clock: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    notifier: Notifier | None
    pod: PodHandle | None
    hostname: str = field(default_factory=socket.gethostname)
    labels_pod: bool = True
    """Whether the monitor labels the pod with the phases it enters (``warned``,
    ``reaping``, back to ``waiting``); False where a listener of the state's phases
    (:meth:`SessionState.on_phase`) publishes every phase, as a session does."""


def default_deps(
    idle: IdleSettings,
    state: SessionState,
    *,
    mail: MailSettings,
    workspace: Path,
    pod: PodHandle | None,
    ide_pids: Callable[[], Sequence[int]],
    environ: Environ | None = None,
) -> MonitorDeps:
    """Real samplers (files, CPU, GPU), the SMTP notifier and the real clock.

    In a pod (``KUBERNETES_SERVICE_HOST`` set) every process of this user
    counts; elsewhere, and in a pod shared with other work (a Ray node: its raylet and
    other workers), only this process and its descendants do.
    """
    environ = dict(os.environ) if environ is None else environ
    own_pod = environ.get("KUBERNETES_SERVICE_HOST") and not identity.pod_shared()
    scope = "user" if own_pod else "tree"
    samplers: list[Sampler] = [
        FileSampler(Path(workspace), exclude=functools.partial(own_writes, environ)),
        CpuSampler(idle.cpu_idle_percent, ide_pids=ide_pids, scope=scope),
        GpuSampler(idle.gpu_idle_percent, environ=environ, dcgm_url=idle.dcgm_url,
                   note=state.note),
    ]
    notifier = build_notifier(
        mail.owner, state, environ=environ,
        owner_annotation=pod.owner_annotation if pod is not None else None,
    )
    return MonitorDeps(samplers, state.clock, asyncio.sleep, notifier, pod)


def keepalive(
    state: SessionState, idle: IdleSettings, seconds: float, now: float | None = None
) -> float:
    """Postpone the warning to at least ``now + seconds``; returns the new ``reap_at``.

    For ``POST /api/keepalive``. A warning already sent is cancelled by the
    monitor at its next check.
    """
    now = state.clock() if now is None else now
    state.set(keepalive_until=max(state.keepalive_until, now + seconds))
    state.touch(now)
    activity = Activity(state.last_activity, state.keepalive_until)
    return projected_reap_at(activity, Limits.from_settings(idle))


async def run_monitor(
    state: SessionState,
    idle: IdleSettings,
    deps: MonitorDeps,
    *,
    on_reap: Callable[[], Awaitable[None]],
) -> None:
    """Watch the session until it is reaped (after ``on_reap``) or over; cancel to stop."""
    executor = service_executor("podcode-monitor", workers=1)
    monitor = _Monitor(state, idle, deps, executor)
    try:
        while state.state not in ENDED:
            now = deps.clock()
            try:
                reap = await monitor.check(now)
            except Exception:
                logger.exception("idle monitor: a check failed; trying again at the next poll")
                reap = False
            if reap:
                await _reap(on_reap)
                return
            await deps.sleep(monitor.wait_seconds(now))
    finally:
        await monitor.close()
        executor.shutdown(wait=False, cancel_futures=True)


async def _reap(on_reap: Callable[[], Awaitable[None]]) -> None:
    try:
        await on_reap()
    except Exception:
        logger.exception("idle monitor: cleanup failed")


class _Monitor:
    """The loop's memory: the warning in force and the state it replaced."""

    def __init__(
        self,
        state: SessionState,
        idle: IdleSettings,
        deps: MonitorDeps,
        executor: ThreadPoolExecutor,
    ) -> None:
        self.state = state
        self.deps = deps
        self.limits = Limits.from_settings(idle)
        self.poll_seconds = float(idle.poll_seconds)
        self.executor = executor
        self.warning: IdleWarning | None = None
        self.before_warning = Phase.WAITING
        self.mails: set[asyncio.Task[bool]] = set()
        self.failing: set[str] = set()

    def activity(self) -> Activity:
        return Activity(self.state.last_activity, self.state.keepalive_until, self.warning)

    def wait_seconds(self, now: float) -> float:
        return next_check(self.activity(), now, self.limits, self.poll_seconds)

    async def check(self, now: float) -> bool:
        """One round; True when it is time to reap."""
        samples = await self.blocking(self.sample_all, now)
        self.observe(samples, now)
        action = decide(self.activity(), now, self.limits)
        if action.kind is Kind.WARN and action.warning is not None:
            await self.warn(action.warning, now)
        elif action.kind is Kind.CANCEL:
            await self.cancel()
        elif action.kind is Kind.REAP:
            logger.warning("session %s idle since %s: cleaning up", self.state.task,
                           utc(self.state.last_activity))
            if not await self.move(Phase.REAPING):
                return False  # resumed (or closed) since the decision: nothing to clean up
            await self.label(Phase.REAPING)
            return True
        return False

    def sample_all(self, now: float) -> list[Sample]:
        samples = []
        for sampler in self.deps.samplers:
            name = type(sampler).__name__
            try:
                samples.append(sampler.sample(now))
                self.failing.discard(name)
            except Exception:
                if name not in self.failing:
                    logger.exception("idle monitor: %s failed; it is skipped until it works", name)
                self.failing.add(name)
        return samples

    def observe(self, samples: Sequence[Sample], now: float) -> None:
        for sample in samples:
            if sample.source == "gpu":
                self.state.set(gpu_utilization=sample.value)
        busy = [sample.detail or sample.source for sample in samples if sample.active]
        if self.state.state in BUSY:  # the task itself runs: the session is not idle
            busy.append(f"task {self.state.state}")
        if busy:
            logger.debug("activity: %s", ", ".join(busy))
            self.state.touch(now)

    async def warn(self, warning: IdleWarning, now: float) -> None:
        state, pod = self.state, self.deps.pod
        logger.warning("session %s idle since %s: cleanup at %s unless it is kept (%s)",
                       state.task, utc(warning.idle_since), utc(warning.reap_at),
                       keepalive_command(pod))
        before = state.state
        if not await self.move(Phase.WARNED, reap_at=warning.reap_at):
            return  # resumed (or closed) since the decision: not idle
        self.warning = warning
        if before != Phase.WARNED:
            self.before_warning = before
        await self.pod_call("set_idle", warning.idle_since, warning.reap_at)
        await self.label(Phase.WARNED)
        await self.pod_call(
            "event", "PodcodeIdleWarning",
            f"idle since {utc(warning.idle_since)}; cleanup at {utc(warning.reap_at)} "
            f"unless kept: {keepalive_command(pod)}",
        )
        if self.deps.notifier is not None:
            mail = WarningMail(
                pod=describe_pod(pod, self.deps.hostname), task=state.task,
                idle_since=warning.idle_since, sent_at=now, reap_at=warning.reap_at,
                keepalive_command=keepalive_command(pod), notes=list(state.notes),
            )
            task = asyncio.create_task(self.deps.notifier.send_warning(mail))
            self.mails.add(task)
            task.add_done_callback(self.mails.discard)

    async def cancel(self) -> None:
        logger.info("session %s is active again: the idle warning is cancelled", self.state.task)
        self.warning = None
        await self.move(self.before_warning, only_from={Phase.WARNED}, reap_at=None)
        self.state.set(reap_at=None)
        await self.pod_call("set_idle", None, None)
        await self.label(self.state.state)

    async def move(
        self, phase: Phase, only_from: frozenset[Phase] | set[Phase] = RESUMABLE, **changes: Any
    ) -> bool:
        """Enter ``phase`` if the session is still in ``only_from`` (see
        :meth:`SessionState.move`), on the monitor's thread: whoever listens to the phases
        (a session writes its record) does not write on the loop."""
        move = functools.partial(self.state.move, phase, only_from=only_from, **changes)
        return await self.blocking(move)

    async def label(self, phase: Phase) -> None:
        """Label the pod with ``phase``, unless whoever listens to the state's phases
        publishes it (a session's publisher: its record and the label, together)."""
        if self.deps.labels_pod:
            await self.pod_call("set_state", phase)

    async def pod_call(self, method: str, *args: Any) -> None:
        pod = self.deps.pod
        if pod is None:
            return
        try:
            await self.blocking(getattr(pod, method), *args)
        except Exception:
            logger.exception("idle monitor: pod.%s failed", method)

    async def blocking(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, call, *args)

    async def close(self) -> None:
        if self.mails:
            await asyncio.wait(set(self.mails), timeout=1.0)
        for task in set(self.mails):
            task.cancel()
        closing = asyncio.wrap_future(self.executor.submit(self.close_samplers))
        done, _ = await asyncio.wait({closing}, timeout=CLOSE_TIMEOUT_SECONDS)
        if not done:
            logger.warning("idle monitor: the samplers did not close within %g s",
                           CLOSE_TIMEOUT_SECONDS)

    def close_samplers(self) -> None:
        """Runs on the monitor's thread, after any sampling in progress."""
        for sampler in self.deps.samplers:
            close = getattr(sampler, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    logger.exception("idle monitor: closing %s failed", type(sampler).__name__)
