from __future__ import annotations

import ast
import importlib
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.configure import TaskRef
from interactive.resume import _is_main_guard, changed_modules, find_task, reload_modules


def write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))
    stamp = time.time_ns() + 10_000_000
    os.utime(path, ns=(stamp, stamp))


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "ws"
    root.mkdir()
    write(root / "rz_helpers.py", "def scale(v):\n    return v * 2\n")
    write(
        root / "rz_task.py",
        """
        from rz_helpers import scale
        from interactive import vscode

        @vscode
        def run(v):
            return scale(v) + 1

        class Steps:
            @staticmethod
            def inner(v):
                return v
    """,
    )
    write(root / "rz_other.py", "VALUE = 1\n")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in ("rz_helpers", "rz_task", "rz_other"):
        sys.modules.pop(name, None)


def test_edited_helper_reaches_the_task_through_from_import(package: Path) -> None:
    task_module = importlib.import_module("rz_task")
    importlib.import_module("rz_other")
    write(package / "rz_helpers.py", "def scale(v):\n    return v * 10\n")
    modules = changed_modules([package / "rz_helpers.py"], "rz_task", package)
    assert [m.__name__ for m in modules] == [
        "rz_helpers",
        "rz_task",
    ]  # rz_other untouched, task last
    reload_modules(modules)
    fn = find_task(TaskRef("rz_task.run", "rz_task", "run", None), task_module.run)
    assert fn(3) == 31
    assert not hasattr(fn, "__podcode_task__")  # the raw function, not the decorated wrapper


def test_nothing_changed_reloads_nothing(package: Path) -> None:
    importlib.import_module("rz_task")
    assert changed_modules([package / "README.md"], "rz_task", package) == []


def test_nested_qualname_and_gone_function(package: Path) -> None:
    module = importlib.import_module("rz_task")
    assert find_task(TaskRef("rz_task.Steps.inner", "rz_task", "Steps.inner", None), len)(5) == 5
    assert find_task(TaskRef("rz_task.gone", "rz_task", "gone", None), len) is len
    assert find_task(TaskRef("x", "rz_task", "f.<locals>.g", None), module.run) is module.run


def test_a_module_that_no_longer_imports_raises(package: Path) -> None:
    importlib.import_module("rz_task")
    write(package / "rz_helpers.py", "def scale(v)\n    return v\n")
    with pytest.raises(SyntaxError):
        reload_modules(changed_modules([package / "rz_helpers.py"], "rz_task", package))


@pytest.mark.parametrize(
    ("source", "guard"),
    [
        ('if __name__ == "__main__":\n    main()', True),
        ("if '__main__' == __name__:\n    main()", True),
        ('if __name__ != "__main__":\n    main()', False),
        ('if name == "__main__":\n    main()', False),
        ('if __name__ == "__main__" and fast:\n    main()', False),
    ],
)
def test_only_the_main_guard_is_left_out_of_a_reloaded_script(source: str, guard: bool) -> None:
    assert _is_main_guard(ast.parse(source).body[0]) is guard
