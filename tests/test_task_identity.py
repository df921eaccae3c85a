"""A task is named by where it lives, and its cached outputs by that name and its code."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

from interactive.base.names import folder_name, task_name
from interactive.storage.hashing import code_fingerprint
from interactive.storage.local_store import LocalStore
from interactive.storage.outputs import TaskCache
from interactive.task.decorator import task_ref


def test_names_say_where_the_task_lives(tmp_path: Path) -> None:
    script = tmp_path / "jobs" / "train.py"
    assert task_name("pkg.steps", "fit", None, tmp_path) == "pkg.steps.fit"
    assert task_name("__main__", "train", str(script), tmp_path) == "jobs/train.py:train"
    assert task_name("__main__", "train", str(script), tmp_path / "other") == f"{script}:train"
    assert task_name("__main__", "f", str(script), tmp_path, "pkg.mod") == "pkg.mod.f"
    assert task_name("__main__", "f", None, tmp_path) == "__main__.f"


def test_a_script_name_is_one_safe_folder() -> None:
    folder = folder_name("jobs/train.py:train")
    assert "/" not in folder and ":" not in folder and folder.startswith("jobs_train.py_train-")
    assert folder != folder_name("jobs_train.py:train")


def test_a_nested_task_keeps_its_qualified_name(tmp_path: Path) -> None:
    def outer() -> object:
        def inner() -> None: ...

        return inner

    ref = task_ref(outer(), tmp_path)  # type: ignore[arg-type]
    assert ref.name == f"{__name__}.{ref.qualname}" and "<locals>.inner" in ref.name


def run(script: Path, cwd: Path, store: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args, str(script)] if args != ("-m",) else [sys.executable, *args],
        cwd=cwd, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PODCODE_ENABLE": "1", "PODCODE_IDE": "none",
             "PODCODE_STORE": str(store)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


TRAIN = """
from interactive import vscode

@vscode(cache=True)
def prepare(x):
    print("PREPARE RAN", flush=True)
    return x + 1

@vscode(cache=True)
def train(x):
    print("TRAIN RAN", flush=True)
    return {body}

print("NAME", train.__wrapped__.__module__, "RESULT", train(prepare(2)))
"""


def test_two_scripts_with_the_same_task_sharing_a_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for folder, body in (("alpha", "x * 10"), ("beta", "x * 100")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.py").write_text(TRAIN.format(body=body))
    assert "RESULT 30" in run(tmp_path / "alpha" / "train.py", tmp_path, store)
    assert "RESULT 300" in run(tmp_path / "beta" / "train.py", tmp_path, store)
    again = run(tmp_path / "alpha" / "train.py", tmp_path, store)
    assert "RESULT 30" in again and "TRAIN RAN" not in again
    folders = sorted(p.name for p in (store / "cache").iterdir())
    assert folders == sorted(folder_name(f"{f}/train.py:{t}")
                             for f in ("alpha", "beta") for t in ("prepare", "train"))


def test_editing_a_task_invalidates_its_own_entries_only(tmp_path: Path) -> None:
    store, script = tmp_path / "store", tmp_path / "train.py"
    script.write_text(TRAIN.format(body="x * 10"))
    first = run(script, tmp_path, store)
    assert "PREPARE RAN" in first and "RESULT 30" in first
    script.write_text(TRAIN.format(body="x * 10 + 1"))
    second = run(script, tmp_path, store)
    assert "RESULT 31" in second and "TRAIN RAN" in second
    assert "PREPARE RAN" not in second  # the upstream's code did not change: still a hit


def test_python_dash_m_is_named_by_its_module(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "job.py").write_text(textwrap.dedent("""
        from interactive.task.decorator import task_ref
        def step(): ...
        print("NAME", task_ref(step).name)
    """))
    out = run(Path("-m"), tmp_path, tmp_path / "store", "-m", "pkg.job")
    assert "NAME pkg.job.step" in out


def test_an_entry_from_the_earlier_key_format_is_a_miss(tmp_path: Path) -> None:
    def train(x: int) -> int:
        return x

    cache = TaskCache(LocalStore(tmp_path))
    inputs = cache.inputs_digest((1,), {}, func=train)
    old = hashlib.sha256(b"podcode-cache-key/2:" + b"podcode-hash/2-blake3")
    for part in ("m.train", "1", inputs):
        old.update(struct.pack("<Q", len(part.encode())) + part.encode())
    cache.put(f"{folder_name('m.train')}/{old.hexdigest()}", "stale")
    assert cache.get(cache.key("m.train", "1", (1,), {}, func=train)) == (False, None)


def test_the_code_fingerprint_follows_the_source(tmp_path: Path) -> None:
    module = tmp_path / "steps.py"
    module.write_text("def f(x):\n    return x\n")
    namespace: dict[str, object] = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    before = code_fingerprint(namespace["f"])  # type: ignore[arg-type]
    module.write_text("def f(x):\n    return x + 1\n")
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    assert code_fingerprint(namespace["f"]) != before  # type: ignore[arg-type]
