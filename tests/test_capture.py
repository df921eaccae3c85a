from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from interactive.base import record
from interactive.base.errors import InputsError
from interactive.base.identity import SESSION_VARIABLE, own_session_id, process_started
from interactive.inputs.capture import argument_names, load_inputs, save_inputs, save_session_inputs


def task(data, scale: float = 1.0, *rest, flag=False, **extra):  # noqa: ANN001, ANN002, ANN003
    return data


def test_round_trip_in_a_fresh_process(podcode_home: Path) -> None:
    array = np.arange(3 * 1024 * 1024, dtype=np.float32).reshape(1024, -1)
    blob = bytes(range(256)) * 8192
    save_inputs(
        "pkg.task", task, ({"x": array, "blob": blob}, 2.5, "extra"), {"flag": True}, podcode_home
    )
    script = (
        "import numpy as np, pickle, sys;"
        "from interactive import load_inputs;"
        "args, kwargs = load_inputs('pkg.task');"
        "sys.stdout.buffer.write(pickle.dumps((args, kwargs)))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True).stdout
    import pickle

    args, kwargs = pickle.loads(out)
    assert np.array_equal(args[0]["x"], array) and args[0]["x"].dtype == np.float32
    assert args[0]["blob"] == blob
    assert args[1:] == (2.5, "extra") and kwargs == {"flag": True}


def test_large_buffers_go_out_of_band(podcode_home: Path) -> None:
    array = np.ones(4 * 1024 * 1024, dtype=np.uint8)
    report = save_inputs("t", task, (array,), {}, podcode_home)
    assert (report.folder / "data.bin").stat().st_size < 4096
    assert (report.folder / "buffers.bin").stat().st_size >= array.nbytes
    loaded = load_inputs("t", podcode_home)[0][0]
    assert loaded.flags.writeable and np.array_equal(loaded, array)


def test_unpicklable_argument_is_named_and_others_are_kept(
    podcode_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    report = save_inputs("t", task, ([1, 2],), {"flag": threading.Lock()}, podcode_home)
    assert report.saved == ["data"] and "flag" in report.failed
    assert "input 'flag' of task t cannot be saved" in caplog.text
    manifest = json.loads((report.folder / "manifest.json").read_text())
    assert [a["name"] for a in manifest["arguments"]] == ["data", "flag"]
    with pytest.raises(InputsError, match="'flag'"):
        load_inputs("t", podcode_home)


def test_no_capture_is_a_clear_error(podcode_home: Path) -> None:
    with pytest.raises(InputsError, match="no captured inputs"):
        load_inputs("missing.task", podcode_home)


def test_default_task_comes_from_the_session(podcode_home: Path) -> None:
    save_inputs("a.b", task, (1,), {}, podcode_home)
    save_inputs("c.d", task, (2,), {}, podcode_home)
    with pytest.raises(InputsError, match="which task"):
        load_inputs(home=podcode_home)
    (podcode_home / "session.json").write_text(json.dumps({"task": "c.d"}))
    assert load_inputs(home=podcode_home) == ((2,), {})


def test_recapture_replaces_the_old_inputs(podcode_home: Path) -> None:
    save_inputs("t", task, (1,), {}, podcode_home)
    save_inputs("t", task, (2,), {"flag": 3}, podcode_home)
    assert load_inputs("t", podcode_home) == ((2,), {"flag": 3})
    assert sorted(p.name for p in (podcode_home / "inputs").iterdir()) == ["t"]


def test_argument_names_follow_the_signature() -> None:
    assert argument_names(task, (1, 2, 3, 4), {"flag": 1}) == [
        "data",
        "scale",
        "rest[0]",
        "rest[1]",
    ]
    assert argument_names(len, (1, 2), {}) == ["args[0]", "args[1]"]


def test_inputs_over_max_capture_bytes_are_named_and_not_written(
    podcode_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    big = np.ones(2_000_000, dtype=np.uint8)
    report = save_inputs("t", task, (b"small", big), {}, podcode_home, max_bytes=1_000_000)
    assert report.saved == ["data"] and "too large" in report.failed["scale"]
    assert "max_capture_bytes (1.0 MB; raise it with PODCODE_MAX_CAPTURE_BYTES)" in caplog.text
    assert (report.folder / "buffers.bin").stat().st_size == 0
    with pytest.raises(InputsError, match="'scale'"):
        load_inputs("t", podcode_home)
    assert save_inputs("t", task, (big,), {}, podcode_home, max_bytes=0).failed


def _capture_in(home: Path, session: str, value: int, task_name: str = "t") -> Path:
    return save_inputs(task_name, task, (value,), {}, record.session_dir(home, session)).folder


def test_load_inputs_prefers_its_own_session_then_its_ide_then_the_newest(
    podcode_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SESSION_VARIABLE, raising=False)
    save_inputs("t", task, (0,), {}, podcode_home)  # an older podcode's layout
    assert load_inputs("t", podcode_home) == ((0,), {})
    _capture_in(podcode_home, "11-1", 1)
    _capture_in(podcode_home, "22-2", 2)
    assert load_inputs("t", podcode_home) == ((2,), {})  # the newest
    monkeypatch.setenv(SESSION_VARIABLE, "11-1")  # started from that session's VS Code
    assert load_inputs("t", podcode_home) == ((1,), {})
    _capture_in(podcode_home, own_session_id(), 3)
    assert load_inputs("t", podcode_home) == ((3,), {})  # this process's own session


def test_the_default_task_is_the_own_session_s(podcode_home: Path) -> None:
    _capture_in(podcode_home, "11-1", 1, "a.b")
    own = _capture_in(podcode_home, own_session_id(), 2, "c.d")
    with pytest.raises(InputsError, match="which task.*a.b, c.d"):
        load_inputs(home=podcode_home)
    record.write_session(own.parents[1], {"task": "c.d"})
    assert load_inputs(home=podcode_home) == ((2,), {})


def test_a_new_capture_replaces_those_of_processes_gone(podcode_home: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = f"{dead.pid}-1"
    legacy = save_inputs("t", task, (0,), {}, podcode_home).folder
    _capture_in(podcode_home, gone, 1)
    other_task = _capture_in(podcode_home, f"{dead.pid}-2", 2)
    _capture_in(podcode_home, f"{dead.pid}-2", 2, "other.task")
    live = _capture_in(podcode_home, f"{os.getppid()}-3", 3)  # a live process (no record)
    record.write_session(live.parents[1], {"pid": os.getppid(),
                                           "started": process_started(os.getppid())})
    report = save_session_inputs("t", task, (4,), {}, podcode_home)
    assert report.folder == record.session_dir(podcode_home) / "inputs" / "t"
    assert not legacy.exists() and not (podcode_home / "sessions" / gone).exists()
    assert not other_task.exists() and other_task.parent.joinpath("other.task").exists()
    assert live.exists()
    assert load_inputs("t", podcode_home) == ((4,), {})


def test_a_rank_s_capture_is_found_from_the_pod_s_home(
    podcode_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SESSION_VARIABLE, raising=False)
    _capture_in(podcode_home / "rank-0", "11-1", 1)
    _capture_in(podcode_home / "rank-1", "22-2", 2)
    assert load_inputs("t", podcode_home) == ((2,), {})
    monkeypatch.setenv(SESSION_VARIABLE, "11-1")  # a terminal of rank 0's VS Code
    assert load_inputs("t", podcode_home) == ((1,), {})


def test_loaded_arrays_map_the_capture_and_stay_private(podcode_home: Path) -> None:
    array = np.arange(2 * 1024 * 1024, dtype=np.float64)
    report = save_inputs("t", task, (array,), {}, podcode_home)
    first = load_inputs("t", podcode_home)[0][0]
    first[0] = -1.0  # copy-on-write: neither the file nor another load sees it
    again = load_inputs("t", podcode_home)[0][0]
    assert again[0] == 0.0 and np.array_equal(again, array)
    import shutil

    shutil.rmtree(report.folder)  # a session that ends removes its capture
    assert first[-1] == array[-1]  # what was loaded stays readable


def test_a_capture_that_cannot_be_mapped_is_read(
    podcode_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mmap

    array = np.arange(100_000, dtype=np.int32)
    save_inputs("t", task, (array,), {}, podcode_home)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("this filesystem cannot map files")

    monkeypatch.setattr(mmap, "mmap", refuse)
    loaded = load_inputs("t", podcode_home)[0][0]
    assert loaded.flags.writeable and np.array_equal(loaded, array)


def test_a_truncated_buffer_file_is_a_clear_error(podcode_home: Path) -> None:
    report = save_inputs("t", task, (np.ones(4 * 1024 * 1024, dtype=np.uint8),), {},
                         podcode_home)
    with open(report.folder / "buffers.bin", "r+b") as handle:
        handle.truncate(1024)
    with pytest.raises(InputsError, match="shorter than its manifest"):
        load_inputs("t", podcode_home)


def test_a_task_is_named_as_the_cli_names_it(podcode_home: Path) -> None:
    """``load_inputs("normalize")`` finds ``features.normalize``, as ``--task normalize``
    does; a name that fits several captured tasks, or none, says which there are."""
    save_inputs("features.normalize", task, (1,), {}, podcode_home)
    save_inputs("jobs/run.py:train", task, (2,), {}, podcode_home)
    save_inputs("other.train", task, (3,), {}, podcode_home)
    assert load_inputs("normalize", podcode_home) == ((1,), {})
    assert load_inputs("features.normalize", podcode_home) == ((1,), {})
    assert load_inputs("jobs/run.py:train", podcode_home) == ((2,), {})
    with pytest.raises(InputsError, match="names several captured tasks .*: "
                                          "jobs/run.py:train, other.train; name one in full"):
        load_inputs("train", podcode_home)
    with pytest.raises(InputsError, match=r"no captured inputs of a task 'rmalize' .*captured "
                                          r"there: features.normalize, jobs/run.py:train"):
        load_inputs("rmalize", podcode_home)
