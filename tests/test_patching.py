"""In-place patching of edited definitions, on real modules loaded from files."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from interactive.resume.patching import Unpatchable, plan

BEFORE = """
import functools

CALLS = []
CALLS.append("top level ran")


def scale(v):
    return v * 2


def traced(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


@traced
def wrapped(v):
    return v + 1


def with_default(v, k=1):
    return v * k


class Base:
    def hello(self):
        return "base"


class Scaler(Base):
    factor = 3

    def apply(self, v):
        return v / 0

    @property
    def name(self):
        return "old"

    @staticmethod
    def static(v):
        return v

    @classmethod
    def make(cls):
        return "old"


def outer():
    def inner(v):
        return v + 1
    return inner
"""


@pytest.fixture
def module(tmp_path: Path) -> Iterator[ModuleType]:
    (tmp_path / "pt_mod.py").write_text(textwrap.dedent(BEFORE))
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("pt_mod")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("pt_mod", None)


def edit(module: ModuleType, *replacements: tuple[str, str], append: str = "") -> list[str]:
    """Edit the module's file, plan and apply the patch; the patched names."""
    path = Path(module.__file__ or "")
    old = path.read_text()
    new = old
    for before, after in replacements:
        assert before in new, before
        new = new.replace(before, after)
    new += textwrap.dedent(append)
    path.write_text(new)
    patch = plan([(path, old, new)])
    patch.apply()
    return patch.patched


def test_a_function_keeps_its_identity_and_gets_the_new_code(module: ModuleType) -> None:
    scale = module.scale  # as `from pt_mod import scale` would hold it
    patched = edit(module, ("return v * 2", "return v * 20"))
    assert scale(3) == 60 and module.scale is scale
    assert patched == ["pt_mod.scale"]


def test_an_instance_made_before_the_edit_runs_the_new_method(module: ModuleType) -> None:
    scaler = module.Scaler()
    edit(module, ("return v / 0", "return v * self.factor"))
    assert scaler.apply(2) == 6


def test_properties_static_and_class_methods(module: ModuleType) -> None:
    scaler = module.Scaler()
    edit(
        module,
        ('return "old"\n\n    @staticmethod', 'return "new"\n\n    @staticmethod'),
        ("return v\n\n    @classmethod", "return -v\n\n    @classmethod"),
        ('return "old"\n\n\ndef outer', 'return "made"\n\n\ndef outer'),
    )
    assert (scaler.name, module.Scaler.static(2), module.Scaler.make()) == ("new", -2, "made")


def test_a_decorated_function_is_patched_under_its_wrapper(module: ModuleType) -> None:
    wrapper = module.wrapped
    edit(module, ("return v + 1\n\n\ndef with_default", "return v + 100\n\n\ndef with_default"))
    assert wrapper(1) == 101


def test_new_default_values_are_evaluated(module: ModuleType) -> None:
    edit(module, ("def with_default(v, k=1)", "def with_default(v, k=len(CALLS) * 5)"))
    assert module.with_default(2) == 10


def test_top_level_statements_do_not_run_but_new_imports_do(module: ModuleType) -> None:
    path = Path(module.__file__ or "")
    old = path.read_text()
    new = old.replace('CALLS.append("top level ran")', 'CALLS.append("again")')
    new += "\nimport json\nprint('pipeline')\nRATE: float = 0.5 * 2\nDATA = load()\n"
    patch = plan([(path, old, new)])
    patch.apply()
    assert module.CALLS == ["top level ran"] and module.RATE == 1.0
    assert not hasattr(module, "DATA") and patch.patched == ["pt_mod.RATE"]
    assert module.json is importlib.import_module("json")
    assert [line.split(": ", 1)[1] for line in patch.not_executed] == [
        "CALLS.append('again')",
        "print('pipeline')",
        "DATA = load()",
    ]


def test_a_new_method_using_super_and_a_new_function(module: ModuleType) -> None:
    scaler = module.Scaler()
    edit(
        module,
        ("    @property", "    def hello(self):\n        return super().hello() + '!'\n\n    @property"),  # noqa: E501
        append="\n\ndef added(v):\n    return -v\n",
    )
    assert scaler.hello() == "base!"
    assert module.added(4) == -4


def test_a_live_nested_function_is_patched(module: ModuleType) -> None:
    inner = module.outer()
    edit(module, ("return v + 1\n    return inner", "return v + 7\n    return inner"))
    assert inner(1) == 8 and module.outer()(1) == 8


@pytest.mark.parametrize(
    ("replacement", "reason"),
    [
        (("    factor = 3", "    factor = 4"), "Scaler cannot be patched in place: its bases"),
        (("class Scaler(Base):", "class Scaler:"), "its bases, decorators or class attributes"),
        (("@traced\ndef wrapped", "def wrapped"), "wrapped cannot be patched in place: its deco"),
        (("def scale(v):\n    return v * 2", "def scale(v):\n    return v *"), "syntax error"),
        (
            ("def inner(v):\n        return v + 1", "def inner(v):\n        return v + fn"),
            "",
        ),
    ],
)
def test_what_cannot_be_patched_is_refused_by_name(
    module: ModuleType, replacement: tuple[str, str], reason: str
) -> None:
    path = Path(module.__file__ or "")
    old = path.read_text()
    new = old.replace(*replacement)
    assert new != old
    if not reason:  # a closure that reads a new global is fine: not a free variable
        plan([(path, old, new)])
        return
    with pytest.raises(Unpatchable, match=reason):
        plan([(path, old, new)])
    assert module.Scaler.factor == 3  # nothing applied


def test_changed_closure_variables_are_refused(module: ModuleType) -> None:
    path = Path(module.__file__ or "")
    old = path.read_text()
    new = old.replace(
        "def outer():\n    def inner(v):\n        return v + 1",
        "def outer():\n    k = 2\n    def inner(v):\n        return v + k",
    )
    module.outer()  # no live inner kept: only outer is patched, its closure is new code
    patch = plan([(path, old, new)])
    patch.apply()
    assert module.outer()(1) == 3
    kept = module.outer()
    newer = new.replace("return v + k", "return v + k + other")
    newer = newer.replace("    k = 2\n", "    k = 2\n    other = 1\n")
    with pytest.raises(Unpatchable, match="enclosing scopes changed"):
        plan([(path, new, newer)])
    assert kept(1) == 3


def test_a_file_no_module_was_loaded_from_plans_nothing(tmp_path: Path) -> None:
    path = tmp_path / "never_imported.py"
    path.write_text("x = 1\n")
    patch = plan([(path, "x = 1\n", "x = 2\n")])
    assert patch.changes == [] and patch.not_loaded == ["never_imported.py"]
    assert patch.summary() == "nothing patched; not loaded in this process: never_imported.py"


def shipped_by_value(module: ModuleType, name: str) -> object:
    """``module.name`` as another process gets it from cloudpickle (Ray ships a driver's
    tasks so): a copy with globals of its own, which no module holds."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    try:
        payload = cloudpickle.dumps(getattr(module, name))
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    return cloudpickle.loads(payload)


def test_a_task_shipped_by_value_is_patched_with_its_helpers(module: ModuleType) -> None:
    module.uses_scale = None
    path = Path(module.__file__ or "")
    old = path.read_text()
    path.write_text(old + "\n\ndef task(v):\n    return scale(v) + 1\n")
    importlib.reload(module)
    copy = shipped_by_value(module, "task")
    assert copy.__globals__ is not vars(module) and copy(1) == 3
    before = path.read_text()
    after = before.replace("return v * 2", "return v * 10").replace(
        "return scale(v) + 1", "return scale(v) + 5")
    path.write_text(after)

    missed = plan([(path, before, after)])  # the module alone: the copy is not found
    missed.apply()
    assert copy(1) == 3

    patch = plan([(path, before, after)], [copy])
    patch.apply()
    assert copy(1) == 15, "the copy and the helper it carries get the new code"
    assert "pt_mod.task" in patch.patched and patch.not_loaded == []


def test_a_definition_patched_twice_is_named_once() -> None:
    from interactive.resume.patching import Plan

    result = Plan()
    for name in ("m.f", "m.g", "m.f"):
        result.add_patched(name)
    assert result.patched == ["m.f", "m.g"]
    assert result.summary() == "patched m.f, m.g"


def test_a_task_shipped_by_value_runs_the_saved_text_of_a_stale_copy(module: ModuleType) -> None:
    """A Ray node reuses its working_dir copy for a later job with the same files, edits of
    an earlier session included: the task runs the code its driver shipped (the bug), the
    copy already reads as fixed, and the engineer's save changes no text. Saving makes the
    text what runs: the definitions whose running code differs are patched."""
    path = Path(module.__file__ or "")
    path.write_text(path.read_text() + "\n\ndef task(v):\n    return scale(v) / 0\n")
    importlib.reload(module)
    copy: Any = shipped_by_value(module, "task")
    fixed = path.read_text().replace("return scale(v) / 0", "return scale(v) / 2")
    path.write_text(fixed)  # the copy, fixed by the earlier job's session
    patch = plan([(path, fixed, fixed)], [copy])  # saved again, as it reads
    patch.apply()
    assert copy(3) == 3.0
    assert patch.patched == ["pt_mod.task"], "only what ran other code than its text"


def test_an_unedited_file_that_matches_what_runs_patches_nothing(module: ModuleType) -> None:
    """Saving a file without a change, whose text is what runs, patches nothing (every
    definition, nested and decorated ones included, compares equal to its running code)."""
    path = Path(module.__file__ or "")
    text = path.read_text()
    patch = plan([(path, text, text)])
    assert patch.patched == [] and patch.summary().startswith("nothing patched")


def test_a_fix_shipped_by_value_gets_the_module_globals_it_now_reads(module: ModuleType) -> None:
    """cloudpickle ships only the globals a function reads: a fix that reads another one
    (a module constant, an import) gets it bound in the copy's globals, from the file's
    unchanged statement, so the fixed task does not fail with a NameError."""
    path = Path(module.__file__ or "")
    path.write_text(path.read_text() + "\n\nOFFSET = 100\n\n\ndef task(v):\n    return v[0]\n")
    importlib.reload(module)
    copy: Any = shipped_by_value(module, "task")
    assert "OFFSET" not in copy.__globals__ and "functools" not in copy.__globals__
    before = path.read_text()
    after = before.replace("return v[0]\n", "return functools.reduce(max, [v, OFFSET])\n")
    path.write_text(after)
    patch = plan([(path, before, after)], [copy])
    patch.apply()
    assert copy(3) == 100
    assert patch.patched == ["pt_mod.task"] and patch.not_executed == []
    assert "CALLS" not in copy.__globals__, "what the fix does not read is not bound"
