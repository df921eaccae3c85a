"""Inputs as they were at the call: tasks that change their arguments in place, then
fail, resume and "debug again" on the arguments they were called with."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from interactive.inputs import snapshot
from interactive.inputs.capture import load_inputs, save_inputs
from tests.session_fixture import Job

OFF = 'ide="none", port=0, control_port=0, debug_port=0'


def test_immutable_arguments_need_no_snapshot() -> None:
    assert snapshot.take((1, "a", b"b", (2.0, None)), {"k": frozenset({1})}, 1 << 20) is None


def test_a_list_snapshot_is_a_copy_of_the_call() -> None:
    values = [3, 1, 2]
    taken = snapshot.take((values,), {}, 1 << 20)
    values.clear()
    assert taken is not None and taken.arguments[0].blob is not None
    assert pickle.loads(taken.arguments[0].blob) == [3, 1, 2]


def test_writable_buffers_are_copied_and_read_only_ones_kept() -> None:
    array = np.arange(1 << 18, dtype=np.float64)  # 2 MiB, out of band
    frozen = b"x" * (2 << 20)
    taken = snapshot.take((array, frozen), {}, 3 << 20)
    assert taken is not None
    array[:] = -1
    [copy] = taken.arguments[0].buffers
    assert np.frombuffer(copy.raw(), dtype=np.float64)[5] == 5.0
    assert taken.arguments[1] is snapshot.UNCHANGEABLE  # bytes cannot change: nothing kept


def test_over_the_budget_nothing_is_kept_and_the_reason_says_how_much() -> None:
    array = np.ones(1 << 18)
    taken = snapshot.take((array,), {}, 1 << 10)
    assert taken is not None
    [argument] = taken.arguments
    assert argument.blob is None and not argument.buffers
    assert argument.not_kept and "2.0 MiB, over max_snapshot_bytes" in argument.not_kept


def test_an_argument_podcode_does_not_copy_says_why() -> None:
    taken = snapshot.take((threading.Lock(), [1]), {}, 1 << 20)
    assert taken is not None
    assert taken.arguments[0].not_kept and "it is a _thread.lock" in taken.arguments[0].not_kept
    assert taken.arguments[1].blob is not None


@pytest.mark.parametrize(
    ("live", "saved"),
    [([1], [1, 2, 3]), ({"a": 1}, {"a": 0, "b": 2}), ({1}, {1, 2}),
     (bytearray(b"ab"), bytearray(b"xyz"))],
)
def test_restore_keeps_the_callers_object(live: object, saved: object) -> None:
    assert snapshot.restore(live, saved) is live
    assert live == saved


def test_restore_an_array_in_place_or_give_the_copy() -> None:
    live, saved = np.zeros(4), np.arange(4.0)
    assert snapshot.restore(live, saved) is live and live.tolist() == [0, 1, 2, 3]
    other = np.zeros(5)
    assert snapshot.restore(other, saved) is saved  # the shape changed: the copy
    assert snapshot.restore("a", "b") == "b"


def test_capture_writes_the_call_state(tmp_path: Path) -> None:
    def task(values: list[int], table: dict[str, int], array: np.ndarray) -> None: ...

    values, table, array = [4, 2], {"a": 1}, np.arange(3.0)
    taken = snapshot.take((values, table), {"array": array}, 1 << 20)
    values.pop(), table.update(b=2), array.fill(9)
    report = save_inputs("t", task, (values, table), {"array": array}, tmp_path,
                         snapshot=taken)
    assert report.at_failure == {} and report.failed == {}
    args, kwargs = load_inputs("t", tmp_path)
    assert args == ([4, 2], {"a": 1}) and kwargs["array"].tolist() == [0.0, 1.0, 2.0]


def test_capture_names_each_argument_not_kept_at_the_call(tmp_path: Path) -> None:
    def task(array: np.ndarray, small: list[int]) -> None: ...

    array, small = np.zeros(1 << 16), [1]
    taken = snapshot.take((array, small), {}, 1 << 10)
    array[0] = 1
    report = save_inputs("t", task, (array, small), {}, tmp_path, snapshot=taken)
    assert list(report.at_failure) == ["array"]
    [note] = report.notes()
    assert "'array' was not copied at the call (it is 0.5 MiB" in note
    assert "PODCODE_MAX_SNAPSHOT_BYTES" in note


MERGE_SORT = """
    from interactive import vscode

    def merge(left, right):
        out = []
        while left and right:
            out.append((left if left[0] <= right[0] else right).pop(0))
        return out + left + right

    @vscode({off})
    def merge_sorted(left, right, seen):
        seen["calls"] = seen.get("calls", 0) + 1
        merged = merge(left, right)
        return merged[len(merged)]  # the bug: should be `return merged`

    left, right, seen = [1, 3, 9, 12], [2, 4, 10], {{}}
    print("RESULT", merge_sorted(left, right, seen), "SEEN", seen, flush=True)
"""


def test_a_task_that_consumes_its_inputs_resumes_on_them(job: Job) -> None:
    """The merge sort pops from its inputs before it fails; after the fix, the resumed
    call sees them as they were at the call, and the caller's own objects are used."""
    job.write("sort.py", MERGE_SORT.format(off=OFF))
    job.start("sort.py").wait_state("waiting")
    job.write("sort.py", (job.workspace / "sort.py").read_text().replace(
        "return merged[len(merged)]", "return merged"))
    status, body = job.api("POST", "/api/resume")
    assert status == 202, body
    assert job.wait_exit() == 0, job.output()
    assert "RESULT [1, 2, 3, 4, 9, 10, 12] SEEN {'calls': 1}" in job.output()


def test_debug_again_loads_the_inputs_as_at_the_call(job: Job) -> None:
    job.write("sort.py", MERGE_SORT.format(off=OFF))
    job.start("sort.py").wait_state("waiting")
    rerun = subprocess.run(
        [sys.executable, "-c", "import interactive, json; a, k = interactive.load_inputs();"
         " print(json.dumps(a))"],
        capture_output=True, text=True, check=True, cwd=job.workspace,
        env={**os.environ, "PODCODE_HOME": str(job.home)},
    )
    assert json.loads(rerun.stdout) == [[1, 3, 9, 12], [2, 4, 10], {}]
    job.api("POST", "/api/abort")
    assert job.wait_exit() != 0


def test_snapshot_inputs_failure_keeps_the_old_behaviour(job: Job) -> None:
    job.write("sort.py", MERGE_SORT.format(off=OFF + ', snapshot_inputs="failure"'))
    job.start("sort.py").wait_state("waiting")
    job.write("sort.py", (job.workspace / "sort.py").read_text().replace(
        "return merged[len(merged)]", "return merged"))
    job.api("POST", "/api/resume")
    assert job.wait_exit() == 0, job.output()
    assert "RESULT [12]" in job.output()  # the leftovers, as asked


def test_a_changed_large_array_is_said_in_the_status(job: Job) -> None:
    job.write("norm.py", textwrap.dedent(f"""
        import numpy as np
        from interactive import vscode

        @vscode({OFF}, max_snapshot_bytes=1024)
        def normalise(data):
            data -= data.mean()
            return data / 0 if data.std() == 0 else data / data.std()[None][5]

        print("RESULT", normalise(np.arange(4096.0)).sum())
    """))
    job.start("norm.py").wait_state("waiting")
    status, body = job.api("GET", "/api/status")
    assert status == 200
    assert any("'data' was not copied at the call" in note for note in body["notes"]), body
    assert "'data' was not copied at the call" in job.output()
    job.api("POST", "/api/abort")
    job.wait_exit()


def test_the_owner_is_told_in_the_emails() -> None:
    from vscode_config.mail import FinalMail, WarningMail, render_final, render_warning

    note = "input 'data' was changed by the task before it failed <b>"
    warning = render_warning(WarningMail(pod="ml/p", task="t", idle_since=0, sent_at=60,
                                         reap_at=660, keepalive_command="podcode keepalive p",
                                         notes=[note]))
    final = render_final(FinalMail(pod="ml/p", task="t", idle_since=0, reaped_at=60,
                                   edits_url=None, notes=[note]))
    for rendered in (warning, final):
        assert note in rendered.text
        assert "was changed by the task before it failed &lt;b&gt;" in rendered.html
    assert "Notes" not in render_warning(WarningMail(
        pod="ml/p", task="t", idle_since=0, sent_at=60, reap_at=660,
        keepalive_command="k")).text


DYNAMIC_MERGE_SORT = '''
import typing

from flytekit import conditional, dynamic, task, workflow

from interactive import vscode


@task
def halves(numbers: typing.List[int]) -> typing.Tuple[typing.List[int], typing.List[int], int, int]:
    middle = len(numbers) // 2
    return numbers[:middle], numbers[middle:], middle, len(numbers) - middle


@task
@vscode(ide="none", port=0, control_port=0, debug_port=0)
def merge(first: typing.List[int], second: typing.List[int]) -> typing.List[int]:
    merged = []
    while first and second:  # consumes its inputs, as merge steps often do
        merged.append((first if first[0] < second[0] else second).pop(0))
    merged.extend(first)
    merged.extend(second)
    return merged[len(merged)]  # the bug


@task
def sort_here(numbers: typing.List[int]) -> typing.List[int]:
    return sorted(numbers)


@dynamic
def sort_in_steps(numbers: typing.List[int], local_below: int) -> typing.List[int]:
    left, right, left_count, right_count = halves(numbers=numbers)
    return merge(first=merge_sort(numbers=left, count=left_count, local_below=local_below),
                 second=merge_sort(numbers=right, count=right_count, local_below=local_below))


@workflow
def merge_sort(numbers: typing.List[int], count: int, local_below: int = 10) -> typing.List[int]:
    return (
        conditional("small")
        .if_(count <= local_below)
        .then(sort_here(numbers=numbers))
        .else_()
        .then(sort_in_steps(numbers=numbers, local_below=local_below))
    )
'''


@pytest.mark.slow
def test_a_flyte_dynamic_merge_sort_resumes_to_the_sorted_list(job: Job, tmp_path: Path) -> None:
    """A dynamic workflow whose merge step pops from its inputs, run as Flyte users run it
    (``pyflyte run``): after the one-line fix the workflow returns the whole sorted list."""
    pytest.importorskip("flytekit")
    job.write("sort.py", DYNAMIC_MERGE_SORT)
    pyflyte = Path(sys.executable).with_name("pyflyte")
    job.start(str(pyflyte), env={"HOME": str(tmp_path)}, args=[
        "run", "sort.py", "merge_sort", "--numbers", "[12, 3, 9, 1, 10, 4, 2]",
        "--count", "7", "--local_below", "4"])
    record = job.wait_state("waiting", timeout=120)
    assert record["error"].startswith("IndexError")
    job.write("sort.py", DYNAMIC_MERGE_SORT.replace("return merged[len(merged)]", "return merged"))
    status, body = job.api("POST", "/api/resume")
    assert status == 202, body
    assert job.wait_exit(120) == 0, job.output()
    assert "[1, 2, 3, 4, 9, 10, 12]" in job.output()


def test_a_dataframe_normalised_in_place_resumes_on_the_original(job: Job) -> None:
    pytest.importorskip("pandas")
    job.write("frame.py", textwrap.dedent(f"""
        import pandas as pd
        from interactive import vscode

        @vscode({OFF})
        def shares(frame):
            frame["amount"] = frame["amount"] / frame["amount"].sum()
            frame.drop(index=0, inplace=True)
            return frame["amont"].round(2).tolist()  # the bug: a typo

        frame = pd.DataFrame({{"amount": [10.0, 30.0, 60.0]}})
        print("RESULT", shares(frame), flush=True)
    """))
    job.start("frame.py").wait_state("waiting")
    job.write("frame.py", (job.workspace / "frame.py").read_text().replace('"amont"', '"amount"'))
    assert job.api("POST", "/api/resume")[0] == 202
    assert job.wait_exit() == 0, job.output()
    assert "RESULT [0.3, 0.6]" in job.output()


def test_a_large_string_is_written_in_chunks_and_loads_back(tmp_path: Path) -> None:
    def task(text: str, small: str) -> None: ...

    text = "ü" * (3 << 20) + "\ud800"  # several chunks, a lone surrogate kept
    report = save_inputs("t", task, (text, "s"), {}, tmp_path)
    assert report.saved == ["text", "small"]
    args, _ = load_inputs("t", tmp_path)
    assert args == (text, "s")
    assert save_inputs("t", task, (text, "s"), {}, tmp_path, max_bytes=1 << 20).failed


def test_tensors_on_the_cpu_are_kept_and_restored_in_place(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    def task(weights: object) -> None: ...

    weights = torch.arange(4.0)
    taken = snapshot.take((weights,), {}, 1 << 20)
    weights.mul_(0)
    save_inputs("t", task, (weights,), {}, tmp_path, snapshot=taken)
    (loaded,), _ = load_inputs("t", tmp_path)
    assert snapshot.restore(weights, loaded) is weights
    assert weights.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_tensor_off_the_host_is_not_copied_at_each_call() -> None:
    """A GPU's storages would be copied to the host at every call: the snapshot leaves
    them (a storage on the "meta" device stands for a GPU's here: no GPU on the test
    machines), and the capture says so later."""
    torch = pytest.importorskip("torch")
    storage = torch.empty(4, device="meta").untyped_storage()
    taken = snapshot.take(({"w": storage},), {}, 1 << 20)
    assert taken is not None
    [argument] = taken.arguments
    assert argument.blob is None and argument.not_kept and "meta" in argument.not_kept


LOCK_BESIDE_A_LIST = """
    import threading
    from interactive import vscode

    @vscode({off})
    def task(items, other):
        items.append(99)
        with other:
            return items[10]  # the bug: should be items[-1]

    items = [1, 2, 3]
    print("RESULT", task(items=items, other=threading.Lock()), items, flush=True)
"""


def test_one_unsaved_argument_leaves_the_others_restored(job: Job) -> None:
    """A lock (which cannot be pickled) beside a list the task appends to: the session
    names the lock, and the resumed call gets the list as it was at the call."""
    job.write("locked.py", LOCK_BESIDE_A_LIST.format(off=OFF))
    job.start("locked.py").wait_state("waiting")
    _, body = job.api("GET", "/api/status")
    assert any("'other' could not be saved" in note for note in body["notes"]), body
    job.write("locked.py", (job.workspace / "locked.py").read_text().replace(
        "items[10]", "items[-1]"))
    assert job.api("POST", "/api/resume")[0] == 202
    assert job.wait_exit() == 0, job.output()
    assert "RESULT 99 [1, 2, 3, 99]" in job.output()


SUCCESS_PATH = """
    import os, resource, sys
    import numpy as np
    from interactive import vscode

    class Counted:
        calls = 0
        def __reduce__(self):
            Counted.calls += 1
            return (Counted, ())

    class Interrupts:
        def __getstate__(self):
            raise KeyboardInterrupt

    @vscode(ide="none")
    def task(data, counted, interrupts, items):
        items.append(len(data))
        return int(data[-1])

    data = np.memmap(sys.argv[1], dtype=np.uint8, mode="r")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = [task(data, Counted(), Interrupts(), []) for _ in range(3)]
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print("RESULT", results, "REDUCED", Counted.calls, "GROWN_KIB", grown, flush=True)
"""


def test_the_success_path_runs_no_input_code_and_copies_no_memmap(
    tmp_path: Path, podcode_home: Path
) -> None:
    """As a user runs it: three successful calls with a 1 GiB read-only memmap, an input
    whose __reduce__ counts and one whose pickling raises KeyboardInterrupt."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as handle:
        handle.truncate(1 << 30)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SUCCESS_PATH))
    done = subprocess.run(
        [sys.executable, str(script), str(big)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(podcode_home)},
    )
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[:5] == ["RESULT", "[0,", "0,", "0]", "REDUCED"] and words[5] == "0", done.stdout
    assert int(words[7]) < 64 << 10, done.stdout  # KiB: nothing of the 1 GiB was read
    assert "Traceback" not in done.stderr
