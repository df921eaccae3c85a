"""Call a task again with its captured inputs, as its framework would call it: "debug again".

- a plain function: called (its podcode wrapper, if it is the decorated object, is looked
  through: the re-run is not a session of its own);
- an ``async def`` task: its coroutine is run to the end on a new event loop;
- a Flyte 2 task (``@env.task``, in either decorator order): run once in Flyte's local
  mode, in a Flyte context of its own, since its ``File``, ``Dir`` and ``DataFrame``
  inputs read and write through that context (outside one, ``DataFrame.open()`` fails
  with "Raw data path has not been set in the context").
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable
from typing import Any

from interactive.base.names import RAW_ATTRIBUTE


def call_again(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The value of ``target(*args, **kwargs)``, awaited when it is a coroutine."""
    if _is_flyte2_task(target):
        return _run_flyte2_locally(target, args, kwargs)
    result = getattr(target, RAW_ATTRIBUTE, target)(*args, **kwargs)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _is_flyte2_task(target: Any) -> bool:
    flyte = sys.modules.get("flyte")  # the task's module imported it, if it is one
    template = getattr(flyte, "TaskTemplate", None)
    return isinstance(template, type) and isinstance(target, template)


def _run_flyte2_locally(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import flyte

    flyte.init()
    outputs = tuple(flyte.with_runcontext(mode="local").run(task, *args, **kwargs).outputs())
    if len(outputs) == 1:
        return outputs[0]
    return outputs or None  # a tuple for several outputs, None for none
