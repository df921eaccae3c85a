"""Per-task checkpoint folders (local and remote stores) and atomic writes."""

from __future__ import annotations

import collections.abc
import json
import uuid
from pathlib import Path

import fsspec
import pytest

from interactive.base.context import current_task
from interactive.storage import checkpoint
from interactive.storage.backends import open_store
from interactive.storage.checkpoint import (
    NoTaskError,
    atomic_path,
    atomic_write,
    checkpoint_dir,
    folder_name,
    sync_checkpoints,
)
from interactive.storage.store import PARTIAL_SUFFIX


@pytest.fixture(autouse=True)
def fresh_process_state() -> collections.abc.Iterator[None]:
    forget_synced()
    yield
    forget_synced()


def forget_synced() -> None:
    """As in a new pod: no folder fetched from the store in this process yet."""
    with checkpoint._lock:
        checkpoint._synced_down.clear()


def test_needs_a_task() -> None:
    with pytest.raises(NoTaskError, match="@vscode"):
        checkpoint_dir()


def test_current_task_folder_in_local_store(podcode_home: Path) -> None:
    token = current_task.set("pipeline.steps.train")
    try:
        folder = checkpoint_dir()
    finally:
        current_task.reset(token)
    assert folder == podcode_home / "store" / "checkpoints" / "pipeline.steps.train"
    assert folder.is_dir()


def test_explicit_task_and_custom_store(tmp_path: Path) -> None:
    folder = checkpoint_dir("m.evaluate", environ={"PODCODE_STORE": str(tmp_path / "s")})
    assert folder == tmp_path / "s" / "checkpoints" / "m.evaluate"


def test_folder_names_are_safe_and_distinct() -> None:
    assert folder_name("pkg.mod.train") == "pkg.mod.train"
    odd = folder_name("mod.outer.<locals>.train")
    assert "/" not in odd and "<" not in odd
    assert folder_name("a/b") != folder_name("a_b")
    assert folder_name("a/b") == folder_name("a/b")
    assert folder_name("..") not in ("..", ".", "")


def test_atomic_write_replaces_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "ck" / "state.json"
    with atomic_write(target, "w") as fh:
        json.dump({"step": 1}, fh)
    with pytest.raises(KeyboardInterrupt), atomic_write(target, "w") as fh:
        fh.write('{"step": 2, "weights": [')
        raise KeyboardInterrupt
    assert json.loads(target.read_text()) == {"step": 1}
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]


def test_atomic_path_for_libraries_that_want_a_file_name(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.endswith(PARTIAL_SUFFIX)
        assert list(tmp_path.glob("*.bin")) == []
        tmp.write_bytes(b"weights")
    assert target.read_bytes() == b"weights"
    with pytest.raises(ValueError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise ValueError("crash")
    assert target.read_bytes() == b"weights"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]


def test_sync_is_a_no_op_for_a_local_store() -> None:
    checkpoint_dir("m.train")
    assert sync_checkpoints("m.train") is False


def test_remote_store_mirror_round_trip(tmp_path: Path) -> None:
    """Pod 1 checkpoints into a remote store; pod 2 (new home, new process state) resumes."""
    url = f"memory://podcode-ck-{uuid.uuid4().hex}"
    pod1 = {"PODCODE_STORE": url, "PODCODE_HOME": str(tmp_path / "pod1")}
    folder = checkpoint_dir("m.train", environ=pod1)
    assert folder.is_relative_to(tmp_path / "pod1")
    with atomic_write(folder / "step-10.ckpt") as fh:
        fh.write(b"ten")
    assert sync_checkpoints("m.train", environ=pod1) is True
    fs = fsspec.filesystem("memory")
    assert fs.cat_file(f"{url}/checkpoints/m.train/step-10.ckpt") == b"ten"

    forget_synced()
    pod2 = {"PODCODE_STORE": url, "PODCODE_HOME": str(tmp_path / "pod2")}
    resumed = checkpoint_dir("m.train", environ=pod2)
    assert resumed != folder
    assert (resumed / "step-10.ckpt").read_bytes() == b"ten"


def test_remote_mirror_is_fetched_once_per_process(tmp_path: Path) -> None:
    url = f"memory://podcode-ck-{uuid.uuid4().hex}"
    env = {"PODCODE_STORE": url, "PODCODE_HOME": str(tmp_path / "h")}
    folder = checkpoint_dir("m.train", environ=env)
    (folder / "mine.ckpt").write_bytes(b"local progress")
    open_store(env).put_bytes("checkpoints/m.train/mine.ckpt", b"other writer")
    again = checkpoint_dir("m.train", environ=env)
    assert (again / "mine.ckpt").read_bytes() == b"local progress"


def test_sync_without_a_mirror_does_nothing(tmp_path: Path) -> None:
    env = {
        "PODCODE_STORE": f"memory://podcode-ck-{uuid.uuid4().hex}",
        "PODCODE_HOME": str(tmp_path),
    }
    assert sync_checkpoints("never.used", environ=env) is False


def test_sync_all_mirrors_uploads_every_fetched_folder(tmp_path: Path) -> None:
    url = f"memory://podcode-ck-{uuid.uuid4().hex}"
    env = {"PODCODE_STORE": url, "PODCODE_HOME": str(tmp_path)}
    for task in ("m.a", "m.b"):
        (checkpoint_dir(task, environ=env) / "x.ckpt").write_bytes(task.encode())
    checkpoint.sync_all_mirrors()
    fs = fsspec.filesystem("memory")
    assert fs.cat_file(f"{url}/checkpoints/m.a/x.ckpt") == b"m.a"
    assert fs.cat_file(f"{url}/checkpoints/m.b/x.ckpt") == b"m.b"
