"""Reload the workspace modules the engineer edited, and find the task again.

Modules whose source file changed since the session opened are re-executed in
their own namespace (like :func:`importlib.reload`); the task's own module goes
last so that it picks up edited helpers. A task defined in the script run as
``__main__`` is handled the same way, without its top-level
``if __name__ == "__main__":`` blocks, so that the workflow does not start again
while everything else (and ``__name__``) is as in the first run.
"""

from __future__ import annotations

import ast
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


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]


def _reexec_main(module: types.ModuleType) -> None:
    """Run the edited script again in its namespace, minus its ``__main__`` blocks.

    Frameworks that look functions up by module (flytekit does) see the same
    ``__main__`` as in the first run."""
    path = _module_file(module)
    assert path is not None
    tree = ast.parse(path.read_bytes(), str(path))
    tree.body = [node for node in tree.body if not _is_main_guard(node)]
    code = compile(tree, str(path), "exec")
    exec(code, module.__dict__)  # noqa: S102 - the engineer's own edited script


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
    raw = _undecorated(target)
    return raw if raw is not None else target  # @vscode removed in the edit: call it plainly


def _undecorated(target: Any, depth: int = 8) -> Callable[..., Any] | None:
    """The function under ``@vscode``, through decorators stacked on top of it
    (``functools.wraps`` ones, and flytekit's ``@task``, which keeps it as ``task_function``)."""
    for _ in range(depth):
        raw = getattr(target, RAW_ATTRIBUTE, None)
        if raw is not None:
            return raw  # type: ignore[no-any-return]
        target = getattr(target, "__wrapped__", None) or getattr(target, "task_function", None)
        if target is None:
            return None
    return None
