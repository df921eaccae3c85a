"""A full disk under $PODCODE_HOME (a real 1 MiB tmpfs, filled): the capture and atomic
writes leave no staging behind, the error names the path, and the next run works."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from interactive.base.files import atomic_open
from interactive.inputs.capture import load_inputs, save_inputs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def everything_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_capture_on_a_full_disk_leaves_nothing_and_names_the_folder(small_disk: Path) -> None:
    def task(data: np.ndarray) -> None: ...

    with pytest.raises(OSError) as raised:
        save_inputs("jobs/train.py:train", task, (np.ones(1 << 18),), {}, small_disk)
    assert raised.value.errno == errno.ENOSPC
    assert str(small_disk) in str(raised.value)
    assert [p for p in everything_in(small_disk) if p.endswith(".tmp") or "/." in p] == []
    save_inputs("jobs/train.py:train", task, (np.ones(16),), {}, small_disk)  # the next run
    assert load_inputs("jobs/train.py:train", small_disk)[0][0].tolist() == [1.0] * 16


def test_an_atomic_write_on_a_full_disk_names_the_file(small_disk: Path) -> None:
    target = small_disk / "session.json"
    with pytest.raises(OSError) as raised, atomic_open(target) as handle:
        handle.write(b"x" * (2 << 20))
    assert raised.value.errno == errno.ENOSPC and str(target) in str(raised.value)
    assert everything_in(small_disk) == []
