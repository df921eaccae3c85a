"""Reload the workspace modules the engineer edited, and find the task again.

Modules whose source file changed since the session opened are re-executed in
their own namespace (like :func:`importlib.reload`); the task's own module goes
last so that it picks up edited helpers. A task defined in the script run as
``__main__`` is handled the same way, with ``__name__`` set aside so that the
script's ``if __name__ == "__main__":`` block does not run again.
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from interactive.configure import TaskRef

log = logging.getLogger(__name__)

RAW_ATTRIBUTE = "__podcode_task__"
"""The decorator stores the undecorated function under this attribute."""


def _module_file(module: types.ModuleType) -> Path | None:
    filename = getattr(module, "__file__", None)
    if not filename:
        return None
    try:
        return Path(filename).resolve()
    except OSError:
        return None


def changed_modules(changed: Iterable[Path], task_module: str) -> list[types.ModuleType]:
    """Loaded modules whose file is among ``changed``, the task's module last."""
    wanted = {path.resolve() for path in changed if path.suffix == ".py"}
    found = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType) and _module_file(m) in wanted]
    return sorted(found, key=lambda module: module.__name__ == task_module)


def _reexec_main(module: types.ModuleType) -> None:
    path = _module_file(module)
    assert path is not None
    code = compile(path.read_bytes(), str(path), "exec")
    namespace = module.__dict__
    namespace["__name__"] = "__podcode_reload__"
    try:
        exec(code, namespace)  # noqa: S102 - the engineer's own edited script
    finally:
        namespace["__name__"] = "__main__"


def reload_modules(modules: Iterable[types.ModuleType]) -> list[str]:
    """Re-execute each module; a module that fails to load raises (the session shows it)."""
    reloaded = []
    for module in modules:
        if module.__name__ == "__main__":
            _reexec_main(module)
        else:
            importlib.reload(module)
        reloaded.append(module.__name__)
    if reloaded:
        log.info("reloaded edited modules: %s", ", ".join(reloaded))
    return reloaded


def find_task(task: TaskRef, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The (undecorated) task function from its current module, by qualified name."""
    if "<locals>" in task.qualname:
        log.warning("%s is a nested function; it cannot be reloaded, the old code runs", task.name)
        return fallback
    target: Any = sys.modules.get(task.module)
    for part in task.qualname.split("."):
        target = getattr(target, part, None)
    if target is None or not callable(target):
        log.warning("%s is gone from its module after the edit; the old code runs", task.name)
        return fallback
    raw: Callable[..., Any] = getattr(target, RAW_ATTRIBUTE, target)
    return raw
