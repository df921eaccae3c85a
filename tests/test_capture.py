from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from interactive.capture import argument_names, load_inputs, save_inputs
from interactive.errors import InputsError


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
