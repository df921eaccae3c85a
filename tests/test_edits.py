"""A save of the edits is bounded: in bytes and files in all, in time (SIGTERM's grace) and
by a stop; what it leaves out is named, and the same changes are not written twice."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

from interactive.storage.backends import open_store
from interactive.storage.edits import SaveLimits, SaveLog, latest_patch, save_edits
from interactive.storage.workspace import Snapshot

NOW = 1_700_000_000.0


def later(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time_ns() + 10_000_000
    os.utime(path, ns=(stamp, stamp))


def edited(tmp_path: Path) -> Snapshot:
    """A workspace where the fix (small) and three generated files (larger) changed."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "train.py").write_text("lr = 0.1\n")
    snapshot = Snapshot.take(workspace)
    later(workspace / "train.py", b"lr = 0.01\n")
    for index, size in enumerate((3000, 2000, 1000)):
        later(workspace / "out" / f"gen{index}.bin", b"\1" * size)
    return snapshot


def manifest(store: Path, folder: str) -> dict[str, object]:
    return json.loads((store / folder / "manifest.json").read_text())  # type: ignore[no-any-return]


def test_a_save_copies_the_smallest_files_first_within_its_bytes_and_files(
    tmp_path: Path,
) -> None:
    snapshot, root = edited(tmp_path), tmp_path / "store"
    store = open_store({"PODCODE_STORE": str(root)})
    saved = save_edits(snapshot, store, "t", NOW, SaveLimits(max_bytes=3100, max_files=10))
    assert sorted(saved.left_out) == ["out/gen0.bin"]  # 10 + 1000 + 2000 fit, 3000 not
    assert "bytes one save copies" in saved.left_out["out/gen0.bin"]
    folder = Path(saved.url).relative_to(root).as_posix()
    shown = manifest(root, folder)
    assert shown["copied"] == ["out/gen1.bin", "out/gen2.bin", "train.py"]
    assert shown["left_out"] == saved.left_out
    assert not (root / folder / "files" / "out" / "gen0.bin").exists()
    assert "+lr = 0.01" in (root / latest_patch("t")).read_text()

    fewer = save_edits(snapshot, store, "t", NOW + 1, SaveLimits(max_files=2))
    assert sorted(fewer.left_out) == ["out/gen0.bin", "out/gen1.bin"]
    assert "2 files one save takes" in fewer.left_out["out/gen1.bin"]


def test_a_save_stops_between_files_at_its_deadline_and_keeps_the_last_whole_patch(
    tmp_path: Path,
) -> None:
    snapshot, root = edited(tmp_path), tmp_path / "store"
    store = open_store({"PODCODE_STORE": str(root)})
    save_edits(snapshot, store, "t", NOW)  # a whole save first
    whole = (root / latest_patch("t")).read_text()
    ticks = itertools.count()  # fake time: one second per look at the clock
    saved = save_edits(snapshot, store, "t", NOW + 60, SaveLimits(deadline=2.0),
                       clock=lambda: float(next(ticks)))
    assert len(saved.left_out) == 2  # two files copied (at 0 s and 1 s), then time was up
    assert set(saved.left_out.values()) == {"the save's time was up (the pod is going)"}
    assert (root / latest_patch("t")).read_text() == whole


def test_a_stop_ends_the_save_between_two_files(tmp_path: Path) -> None:
    snapshot = edited(tmp_path)
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 1

    saved = save_edits(snapshot, open_store(), "t", NOW, SaveLimits(stop=stop))
    assert len(asked) == 2 and len(saved.left_out) == 3
    assert set(saved.left_out.values()) == {"the session ended during the save"}


def test_the_same_changes_are_not_written_again_into_one_folder(tmp_path: Path) -> None:
    snapshot, root = edited(tmp_path), tmp_path / "store"
    store, log = open_store({"PODCODE_STORE": str(root)}), SaveLog()
    first = save_edits(snapshot, store, "t", NOW, log=log)
    copy = Path(first.url) / "files" / "train.py"
    copy.unlink()
    again = save_edits(snapshot, store, "t", NOW, log=log)
    assert first.written and not again.written and not copy.exists()
    later(snapshot.root / "train.py", b"lr = 0.02\n")
    assert save_edits(snapshot, store, "t", NOW, log=log).written
    assert copy.read_text() == "lr = 0.02\n"


def test_a_store_written_to_is_marked_as_podcodes(tmp_path: Path) -> None:
    from interactive.storage.local_store import STORE_MARKER

    store = open_store({"PODCODE_STORE": str(tmp_path / "s")})
    assert not (tmp_path / "s").exists()  # opening writes nothing
    store.put_bytes("cache/x", b"1")
    assert (tmp_path / "s" / STORE_MARKER).is_file()
