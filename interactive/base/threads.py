"""podcode's threads: started, named and marked in one place.

Every thread podcode starts is a daemon (it never holds up the end of the process), is
named ``podcode-<what>``, and is *registered* as podcode's own: the CPU sampler leaves
its time out of the user's activity (:func:`own_native_ids`), whatever its name. Unless told
otherwise it is also a *service* thread: the debugger neither lists, traces nor suspends
it, so the control API, the monitor and mail go on while the engineer sits in the
post-mortem with "all threads" suspended.

Work that must finish within a bound but may hang (a user's hook, an SMTP server that
does not answer) runs through :func:`run_in_thread` / :func:`in_thread`: the caller gets
a future, and a call left behind at the bound cannot keep the process alive.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import queue
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from interactive.base import pydevd

T = TypeVar("T")

PREFIX = "podcode-"
_OWN: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_OWN_LOCK = threading.Lock()


def mark_service_thread(thread: threading.Thread | None = None) -> None:
    """Register ``thread`` (default: the calling one) as podcode's and keep it out of the
    debugger: never traced, never suspended, not listed."""
    current = thread is None or thread is threading.current_thread()
    thread = thread or threading.current_thread()
    _register(thread)
    pydevd.hide(thread)
    if current:
        # A pool's worker is marked from inside (its initializer), after the debugger
        # started tracing it at birth; traced, every line it runs (the monitor's samplers,
        # each poll) costs several times its bare price.
        pydevd.stop_tracing_here()


def _register(thread: threading.Thread) -> None:
    with _OWN_LOCK:
        _OWN.add(thread)


def own_native_ids() -> set[int]:
    """The kernel thread ids of podcode's live threads (for the CPU sampler)."""
    with _OWN_LOCK:
        threads = list(_OWN)
    return {t.native_id for t in threads if t.native_id is not None and t.is_alive()}


def start_thread(
    target: Callable[..., object],
    name: str,
    *args: Any,
    service: bool = True,
    context: contextvars.Context | None = None,
    exact_name: bool = False,
    attributes: Mapping[str, object] | None = None,
) -> threading.Thread:
    """Start ``target(*args)`` on a daemon thread named ``podcode-<name>``.

    ``service=False`` leaves it visible to the debugger (a user's hook; the post-mortem's
    thread, which carries the stop the engineer looks at); it is still podcode's for the
    samplers. ``context``: run in that copy of the caller's context variables (the current
    task). ``exact_name``: the name as given (the debugger lists the post-mortem's stop
    under the task's name). ``attributes`` are set on the thread before it starts.
    """
    full = name if exact_name or name.startswith(PREFIX) else f"{PREFIX}{name}"
    if context is not None:
        target, args = context.run, (target, *args)
    thread = threading.Thread(target=target, args=args, name=full, daemon=True)
    for key, value in (attributes or {}).items():
        setattr(thread, key, value)
    if service:
        mark_service_thread(thread)
    else:
        _register(thread)
    thread.start()
    return thread


def run_in_thread(
    call: Callable[[], T],
    name: str,
    *,
    service: bool = True,
    context: contextvars.Context | None = None,
) -> concurrent.futures.Future[T]:
    """``call()`` on a thread of its own; its result or exception in the returned future.

    Wait on it with a timeout: at the bound, the call is left behind on its daemon thread.
    """
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = call()
        except BaseException as exc:  # the waiter re-raises it
            future.set_exception(exc)
        else:
            future.set_result(result)

    start_thread(work, name, service=service, context=context)
    return future


def in_thread(
    call: Callable[[], T],
    name: str,
    *,
    service: bool = True,
    context: contextvars.Context | None = None,
) -> asyncio.Future[T]:
    """``call()`` on a thread of its own, as a future of the running loop to await (not
    the loop's shared pool, which a hung call would occupy for good). A wait that gives up
    (``asyncio.wait_for(asyncio.shield(...))``) leaves the call behind."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(future: concurrent.futures.Future[T]) -> None:
        if done.done():
            return
        exc = future.exception()
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(future.result())

    def relay(future: concurrent.futures.Future[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, future)

    run_in_thread(call, name, service=service, context=context).add_done_callback(relay)
    return done


def service_executor(name: str, workers: int = 4) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool whose workers are podcode's service threads (``podcode-<name>_N``)."""
    prefix = name if name.startswith(PREFIX) else f"{PREFIX}{name}"
    return concurrent.futures.ThreadPoolExecutor(
        workers, thread_name_prefix=prefix, initializer=mark_service_thread
    )


INTERRUPTIBLE_SECONDS = 5.0
"""How long a blocking wait sleeps at a time, so that an exception raised into its thread
from outside (``ray.cancel`` raises KeyboardInterrupt in a task's thread so) is seen within
that; a signal (SIGTERM) interrupts the wait at once."""


def get_interruptibly(source: queue.SimpleQueue[T]) -> T:
    """``source.get()``, woken every :data:`INTERRUPTIBLE_SECONDS`: a thread blocked in a
    lock never sees an asynchronous exception; this one does within that time."""
    while True:
        try:
            return source.get(timeout=INTERRUPTIBLE_SECONDS)
        except queue.Empty:
            continue
