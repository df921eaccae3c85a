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


def _refers_to(module: types.ModuleType, names: set[str]) -> bool:
    """Whether ``module`` holds a module or an object defined in one of ``names``."""
    for value in list(vars(module).values()):
        if isinstance(value, types.ModuleType):
            if value.__name__ in names:
                return True
        elif getattr(value, "__module__", None) in names:
            return True
    return False


def changed_modules(
    changed: Iterable[Path], task_module: str, workspace: Path | None = None
) -> list[types.ModuleType]:
    """Modules to re-execute: those whose file changed, then the workspace modules that
    imported names from them (``from helpers import scale`` keeps the old function
    otherwise), the task's own module last. Nothing changed: nothing to reload."""
    wanted = {path.resolve() for path in changed if path.suffix == ".py"}
    loaded = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]
    found = [m for m in loaded if _module_file(m) in wanted]
    if not found:
        return []
    root = workspace.resolve() if workspace else None
    local = [
        m
        for m in loaded
        if root and (f := _module_file(m)) and f.is_relative_to(root) and m not in found
    ]
    names = {m.__name__ for m in found}
    grew = True
    while grew:
        grew = False
        for module in local:
            if module not in found and (
                module.__name__ == task_module or _refers_to(module, names)
            ):
                found.append(module)
                names.add(module.__name__)
                grew = True
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
