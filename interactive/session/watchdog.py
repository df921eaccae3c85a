"""Nothing of a session outlives its task process, however that process dies.

A session starts one small watchdog process (``python -m interactive.session.watchdog``,
in a session of its own). It waits for the task process to end: a pidfd where
the kernel has them, else a check of the pid and its start time every
``poll_seconds`` (a reused pid is never taken for the task). A clean close
tells it to stop through a pipe. When the task dies instead (SIGKILL, the OOM
killer), it ends every process of the same user that carries the session's
marker in its environment (code-server, its terminals, which run in sessions
of their own, the debug adapters and whatever was started from them), then
marks the session's records as left by a dead process and clears their secrets.

A parent-death signal would not do: grandchildren do not inherit it, and it
fires when the forking thread exits, not the process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from interactive.base import record
from interactive.base.files import temp_pattern
from interactive.base.identity import SESSION_VARIABLE, own_session_id, process_identity, same_start
from server_bootstrap.environ import without_secrets

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
PIDFD_POLL_SECONDS = 60.0
"""With a pidfd the kernel wakes the watchdog when the task ends; the pid is still checked
this often (each check costs about half a millisecond of CPU)."""
GRACE_SECONDS = 2.0
GUARD_SECONDS = 2.0
"""How often the session checks that its watchdog still runs where no pidfd wakes it."""
STOP = b"stop"
COMPANION_FILE = Path(".vscode") / "podcode-session.json"
OWN_COMPANIONS = Path(".vscode") / "podcode"
"""Where each session's own companion file is (``session-<id>.json``)."""


@dataclass(frozen=True)
class Orders:
    """What one watchdog watches, whom it ends, what it clears."""

    pid: int
    started: float | None
    marker: tuple[str, str]
    records: tuple[Path, ...]
    poll_seconds: float = POLL_SECONDS
    grace_seconds: float = GRACE_SECONDS


@dataclass(frozen=True)
class Seen:
    """One process as the watchdog sees it (``environ`` None: not readable)."""

    pid: int
    uid: int | None
    environ: Mapping[str, str] | None


# -- decisions (pure) -----------------------------------------------------------------------
def arguments(orders: Orders, control_fd: int) -> list[str]:
    """The watchdog's command line after ``python -m interactive.session.watchdog``."""
    argv = [
        "--pid", str(orders.pid),
        "--marker", f"{orders.marker[0]}={orders.marker[1]}",
        "--control-fd", str(control_fd),
        "--poll-seconds", str(orders.poll_seconds),
        "--grace-seconds", str(orders.grace_seconds),
    ]
    if orders.started is not None:
        argv += ["--started", repr(orders.started)]
    for path in orders.records:
        argv += ["--record", str(path)]
    return argv


def parse_arguments(argv: Sequence[str]) -> tuple[Orders, int | None]:
    parser = argparse.ArgumentParser(prog="python -m interactive.session.watchdog")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--started", type=float)
    parser.add_argument("--marker", required=True, help="NAME=VALUE")
    parser.add_argument("--record", type=Path, action="append", default=[])
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--poll-seconds", type=float, default=POLL_SECONDS)
    parser.add_argument("--grace-seconds", type=float, default=GRACE_SECONDS)
    ns = parser.parse_args(list(argv))
    name, sep, value = ns.marker.partition("=")
    if not (name and sep and value):
        parser.error("--marker takes NAME=VALUE")
    orders = Orders(ns.pid, ns.started, (name, value), tuple(ns.record),
                    max(0.05, ns.poll_seconds), max(0.0, ns.grace_seconds))
    return orders, ns.control_fd


def victims(
    seen: Iterable[Seen], marker: tuple[str, str], uid: int, exclude: Collection[int]
) -> list[int]:
    """The pids to end: the same user's processes whose environment carries ``marker``."""
    name, value = marker
    return sorted(
        proc.pid
        for proc in seen
        if proc.pid not in exclude
        and proc.uid == uid
        and proc.environ is not None
        and proc.environ.get(name) == value
    )


def companion_to_remove(session: Mapping[str, object], companion: Mapping[str, object]) -> bool:
    """Whether the workspace's companion file holds this session's token."""
    token = session.get("token")
    return bool(token) and companion.get("token") == token


# -- the task process -----------------------------------------------------------------------
def alive(pid: int, started: float | None) -> bool:
    """Whether the task still runs (a zombie has ended; a reused pid is another process)."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            return started is None or same_start(started, round(proc.create_time(), 2))
    except psutil.Error:
        return False


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


def wait_for_end(orders: Orders, control_fd: int | None) -> str:
    """Block until the task dies (``"died"``) or the session says stop (``"stop"``)."""
    pidfd = _pidfd(orders.pid)
    timeout = orders.poll_seconds if pidfd is None else max(orders.poll_seconds,
                                                             PIDFD_POLL_SECONDS)
    try:
        while alive(orders.pid, orders.started):
            watched = [fd for fd in (control_fd, pidfd) if fd is not None]
            ready = select.select(watched, [], [], timeout)[0] if watched else []
            if not watched:
                time.sleep(timeout)
            if control_fd is not None and control_fd in ready:
                data = os.read(control_fd, 64)
                if STOP in data:
                    return "stop"
                if not data:  # the pipe closed without a word: the pid decides
                    control_fd = None
        return "died"
    finally:
        if pidfd is not None:
            os.close(pidfd)


# -- ending the session ---------------------------------------------------------------------
def scan(uid: int) -> Iterator[Seen]:
    """Every process; the environment read only for the same user's."""
    for proc in psutil.process_iter():
        try:
            owner = proc.uids().real
            environ = proc.environ() if owner == uid else None
        except psutil.Error:
            continue
        yield Seen(proc.pid, owner, environ)


def end_processes(marker: tuple[str, str], grace_seconds: float, rounds: int = 3) -> int:
    """SIGTERM every process carrying ``marker``, SIGKILL what is left after the grace;
    how many there were."""
    uid, me = os.getuid(), {os.getpid()}
    ended: set[int] = set()
    for number in range(rounds):
        pids = victims(scan(uid), marker, uid, me)
        if not pids:
            break
        ended.update(pids)
        procs = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                proc.send_signal(signal.SIGTERM if number == 0 else signal.SIGKILL)
                procs.append(proc)
        _, left = psutil.wait_procs(procs, timeout=grace_seconds)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=grace_seconds)
    return len(ended)


def clear_records(orders: Orders, now: float) -> int:
    """Mark the session's records as left by a dead process, secrets cleared; the companion
    files (in the workspace, or the configurations' folder beside a read-only one) removed
    when they hold this session's token. How many records changed."""
    own = record.read_record(orders.records[0]) if orders.records else None
    root = (own or {}).get("config_root") or (own or {}).get("workspace")
    if own is not None and isinstance(root, str):
        remove_companions(Path(root), own)
    changed = 0
    for path in orders.records:
        for temp in path.parent.glob(temp_pattern(path, orders.pid)):
            temp.unlink(missing_ok=True)  # a record the task was writing as it died
        try:
            changed += record.mark_gone(path, orders.pid, orders.started, now)
        except OSError as exc:
            log.warning("could not clear %s: %s", path, exc)
    return changed


def remove_companions(root: Path, session: Mapping[str, object]) -> list[Path]:
    """Remove the companion files under ``root`` that hold ``session``'s token: the
    workspace's shared one and the session's own (``.vscode/podcode/session-<id>.json``)."""
    removed = []
    for path in [root / COMPANION_FILE, *sorted((root / OWN_COMPANIONS).glob("session-*.json"))]:
        companion = record.read_record(path)
        if companion is not None and companion_to_remove(session, companion):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="podcode: watchdog: %(message)s")
    orders, control_fd = parse_arguments(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C for the task is not for us
    if wait_for_end(orders, control_fd) == "stop":
        return 0
    ended = end_processes(orders.marker, orders.grace_seconds)
    cleared = clear_records(orders, time.time())
    log.warning(
        "the task process %d is gone: ended %d processes of its session, cleared its "
        "secrets in %d records", orders.pid, ended, cleared,
    )
    return 0


# -- the session's side ---------------------------------------------------------------------

async def until_ended(pid: int, poll_seconds: float) -> None:
    """Return when process ``pid`` may have ended: woken by its pidfd (Linux 5.3 and
    later) the moment it does, so that nothing wakes while it runs; elsewhere after
    ``poll_seconds``. The caller checks."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or it was already reaped
        await asyncio.sleep(poll_seconds)
        return
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ended.done():
            ended.set_result(None)

    try:
        loop.add_reader(fd, readable)
        try:
            await ended
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


class Watchdog:
    """The session's handle on its watchdog process, which it keeps alive: a watchdog
    killed first (by hand, by an OOM kill of the wrong process) is started again at once,
    so that code-server is never left without one."""

    def __init__(self, orders: Orders, proc: subprocess.Popen[bytes], control_fd: int) -> None:
        self.orders = orders
        self.proc = proc
        self._control: int | None = control_fd
        self._lock = threading.Lock()
        """Held to replace the watchdog or to stop it: never both at once."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def guard(self, poll_seconds: float = GUARD_SECONDS) -> None:
        """Until :meth:`stop`: start a new watchdog whenever the current one has died."""
        while self._control is not None:
            await until_ended(self.proc.pid, poll_seconds)
            with self._lock:
                if self._control is not None and self.proc.poll() is not None:
                    log.warning("the session's watchdog (pid %d) ended (%s): starting another",
                                self.proc.pid, self.proc.returncode)
                    self._replace()

    def _replace(self) -> None:
        try:
            proc, control = _spawn(self.orders)
        except OSError as exc:
            log.warning("no new watchdog (%s): if this process is killed, its IDE's "
                        "processes are left running", exc)
            return
        old, self._control = self._control, control
        if old is not None:
            os.close(old)
        self.proc = proc

    def stop(self, timeout: float = 5.0) -> None:
        """The session closes cleanly: the watchdog leaves without ending anything."""
        with self._lock:
            control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(OSError):
                os.write(control, STOP)
            os.close(control)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _spawn(orders: Orders) -> tuple[subprocess.Popen[bytes], int]:
    """A watchdog process for ``orders`` and the write end of its stop pipe."""
    read_fd, write_fd = os.pipe()
    env = without_secrets(os.environ)  # it sends no mail: no SMTP URL, nor any other secret
    env.pop(SESSION_VARIABLE, None)
    package_root = Path(__file__).resolve().parents[2]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "interactive.session.watchdog", *arguments(orders, read_fd)],
            cwd=package_root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            pass_fds=(read_fd,), start_new_session=True,
        )
    except OSError:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    log.debug("watchdog %d watches process %d", proc.pid, orders.pid)
    return proc, write_fd


def start_watchdog(
    records: Sequence[Path],
    *,
    marker: tuple[str, str] | None = None,
    poll_seconds: float = POLL_SECONDS,
    grace_seconds: float = GRACE_SECONDS,
) -> Watchdog | None:
    """Watch this process for the session whose records are ``records`` (its own first);
    ``marker`` defaults to the session's (:data:`SESSION_VARIABLE` = its id). None, with a
    warning, when the watchdog cannot be started: the session opens all the same."""
    me = process_identity()
    orders = Orders(
        me["pid"], me["started"], marker or (SESSION_VARIABLE, own_session_id()),
        tuple(records), poll_seconds, grace_seconds,
    )
    try:
        proc, control = _spawn(orders)
    except OSError as exc:
        log.warning("no watchdog for this session (%s): if this process is killed, its "
                    "IDE's processes are left running", exc)
        return None
    return Watchdog(orders, proc, control)


if __name__ == "__main__":
    raise SystemExit(main())
