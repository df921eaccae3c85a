"""One driver for plain functions and coroutines: a call's steps, and their executor on
the calling thread.

A decorated call goes through the same steps whether the task is a plain function or
an ``async def``: call it; when it fails, open a session (or wait on the Ray job's bug
board), wait for a command, patch, call again, deliver the fix, close. Those steps are
written once (:mod:`interactive.task.runner`), as a generator that yields each thing to
be done and receives its result, or its exception. An executor does the things:

- :func:`run` on the calling thread, for a plain function;
- :func:`interactive.task.aio.run` on the event loop, for a coroutine: blocking work on
  a thread of its own, the task's call awaited, the wait for a command off the loop.

So the board, ``on_open``, the interrupt handling and every later change reach both.
"""

from __future__ import annotations

from typing import Any

from interactive.base.steps import Blocking, Leave, Step, Steps, TaskCall, Wait
from interactive.task import preempt


def run(steps: Steps) -> Any:
    """Run ``steps`` on the calling thread; their value (or their exception)."""
    outcome: Outcome = (None, None)
    while True:
        step = advance(steps, outcome)
        if isinstance(step, Done):
            return step.value
        try:
            outcome = (_do(step), None)
        except BaseException as exc:  # noqa: BLE001 - the steps decide what it means
            outcome = (None, exc)


Outcome = tuple[Any, BaseException | None]
"""What the last step gave: its result, or the exception it raised."""


class Done:
    """The steps have ended with ``value``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def advance(steps: Steps, outcome: Outcome) -> Step | Done:
    """Hand the last step's outcome to ``steps``: the next step, or :class:`Done`."""
    result, error = outcome
    try:
        return steps.send(result) if error is None else steps.throw(error)
    except StopIteration as stop:
        return Done(stop.value)


def _do(step: Step) -> Any:
    match step:
        case Blocking(fn, args):
            return fn(*args)
        case TaskCall(fn, args, kwargs, retries):
            if retries:
                from interactive.task.retry import call_with_retries

                return call_with_retries(fn, args, kwargs, retries)
            return fn(*args, **kwargs)
        case Wait(session):
            return session.wait()
        case Leave():
            preempt.end_process()  # after SIGTERM, the session closed: exit 143
            return None
    raise AssertionError(f"unknown step {step!r}")
