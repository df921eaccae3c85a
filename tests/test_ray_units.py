"""The Ray parts that need no cluster: the bug board, bug keys, the working_dir copy,
settings that travel with a task, and ``@vscode`` over framework objects and classes."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

from interactive import vscode
from interactive.base.names import RAW_ATTRIBUTE
from interactive.base.types import ExcInfo
from interactive.ray.bugs import (
    FAILED,
    FIXED,
    FULL,
    OPEN,
    OWNER_TIMEOUT_SECONDS,
    WAIT,
    Board,
    bug_key,
)
from interactive.ray.waiters import NOTE, OwnerWatch
from interactive.ray.worker import copy_of, in_copy, relocate
from interactive.task.travel import ShippedSettings


def failure(divisor: int) -> ExcInfo:
    try:
        if divisor:
            raise ValueError("here")
        raise ValueError("there")
    except ValueError as exc:
        return (type(exc), exc, exc.__traceback__)


def test_a_bug_is_the_task_the_exception_type_and_the_line() -> None:
    here, there = failure(1), failure(0)
    assert bug_key("t", here) == bug_key("t", failure(1))
    assert bug_key("t", here) != bug_key("t", there)  # another line
    assert bug_key("t", here) != bug_key("u", here)
    assert bug_key("t", here).startswith("t builtins.ValueError at test_ray_units.py:")


def test_the_board_opens_one_session_and_hands_its_outcome_to_the_rest() -> None:
    board = Board()
    assert board.claim("bug", "pod-a") == (OPEN, None)
    assert board.claim("bug", "pod-b") == (WAIT, "pod-a")
    assert asyncio.run(board.outcome("bug", 0.01)) == (WAIT, "pod-a")  # not settled yet
    board.settle("bug", FIXED, [("driver.py", "old", "new")])
    assert asyncio.run(board.outcome("bug", 0.01)) == (FIXED, [("driver.py", "old", "new")])
    assert board.claim("bug", "pod-c") == (FIXED, [("driver.py", "old", "new")])
    board.settle("bug", FAILED, "later news is ignored once settled")
    assert board.claim("bug", "pod-c")[0] == FIXED
    assert board.claim("bug", "pod-c", again=True) == (OPEN, None)  # the fix did not help
    assert board.opened == 2


def test_the_board_counts_who_waits_for_an_open_session() -> None:
    board = Board()
    board.claim("bug", "pod-a pid 1")
    assert board.waiters("bug") == 0 and board.waiters("other") == 0
    for who in ("pod-b pid 2", "pod-b pid 3", "pod-b pid 3"):  # a waiter asks again
        board.claim("bug", who)
    assert board.waiters("bug") == 2
    board.settle("bug", FIXED, [])
    assert board.waiters("bug") == 0  # settled: nobody waits any more


def test_the_owner_beats_and_its_session_is_told_once_that_tasks_wait_for_it() -> None:
    answers: list[object] = [RuntimeError("board busy"), 0, 3, 5]
    notes: list[str] = []
    watch: OwnerWatch

    def beat() -> int:
        answer = answers.pop(0)
        if not answers:
            watch.stop()
        if isinstance(answer, Exception):
            raise answer
        return int(answer)  # type: ignore[call-overload]

    watch = OwnerWatch(beat, seconds=0.001)
    watch.attach(type("Session", (), {"state": type("State", (), {"note": notes.append})()}))
    watch.watch()  # beats until stopped, even after it has said it
    assert answers == [] and notes == [NOTE.format(count=3)]
    assert notes[0].startswith("3 more task(s) hit this bug and wait for this session")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bug_whose_owner_fell_silent_is_taken_over_by_a_waiting_task() -> None:
    asyncio.run(_owner_falls_silent())


async def _owner_falls_silent() -> None:
    clock = Clock()
    board = Board(clock)
    assert board.claim("bug", "w1", limits=(1, 0)) == (OPEN, None)
    assert board.claim("bug", "w2") == (WAIT, "w1")
    clock.now = OWNER_TIMEOUT_SECONDS - 1
    assert board.heartbeat("bug", "w1") == 1  # alive, one waits
    assert board.heartbeat("bug", "w2") == 0  # not the owner: no beat
    clock.now += OWNER_TIMEOUT_SECONDS - 1
    assert await board.outcome("bug", 0.001, "w2") == (WAIT, "w1")  # still alive
    assert board.claim("other", "w3", limits=(1, 0))[0] == FULL  # one live session
    clock.now += OWNER_TIMEOUT_SECONDS + 1  # w1 was killed
    assert board.claim("other", "w3", limits=(1, 0)) == (OPEN, None)  # the dead one: no slot
    assert await board.outcome("bug", 0.001, "w2", (1, 0)) == (
        FULL, "1 sessions are open in this job (ray_max_sessions=1)")
    board.settle("other", FIXED, [])
    assert await board.outcome("bug", 0.001, "w2") == (OPEN, None)  # w2 takes it over
    assert board.claim("bug", "w4") == (WAIT, "w2") and board.heartbeat("bug", "w2") == 1
    assert board.live() and board.opened == 3


def test_a_silent_owners_bug_is_opened_again_by_the_next_task_that_hits_it() -> None:
    clock = Clock()
    board = Board(clock)
    board.claim("bug", "w1")
    clock.now = OWNER_TIMEOUT_SECONDS + 1
    assert not board.live()
    assert board.claim("bug", "w2") == (OPEN, None)


def test_sessions_are_bounded_per_job_and_per_node_and_a_settled_bug_frees_its_place() -> None:
    board = Board()
    limits = (3, 2)  # in the job, on one node
    assert board.claim("a", "w1", node="n1", limits=limits) == (OPEN, None)
    assert board.claim("b", "w2", node="n1", limits=limits) == (OPEN, None)
    verdict, why = board.claim("c", "w3", node="n1", limits=limits)
    assert verdict == FULL
    assert why == "2 sessions are open on this node (ray_max_sessions_per_node=2)"
    assert board.claim("a", "w4", node="n1", limits=limits) == (WAIT, "w1")  # a known bug waits
    assert board.claim("c", "w5", node="n2", limits=limits) == (OPEN, None)
    verdict, why = board.claim("d", "w6", node="n3", limits=limits)
    assert verdict == FULL and why == "3 sessions are open in this job (ray_max_sessions=3)"
    board.settle("a", FIXED, [])
    assert board.claim("d", "w6", node="n3", limits=limits) == (OPEN, None)
    assert board.claim("e", "w7", node="n1", limits=(0, 0)) == (OPEN, None)  # 0: no bound
    assert board.opened == 5


def test_an_aborted_bug_fails_its_waiters() -> None:
    board = Board()
    board.claim("bug", "pod-a")
    board.settle("bug", FAILED, "Reaped: idle")
    assert board.claim("bug", "pod-b") == (FAILED, "Reaped: idle")


def test_the_copy_of_a_file_is_its_longest_tail_there(tmp_path: Path) -> None:
    for rel in ("jobs/train.py", "train.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert in_copy("/home/ana/proj/jobs/train.py", tmp_path) == tmp_path / "jobs/train.py"
    assert in_copy("/home/ana/proj/other.py", tmp_path) is None


def test_the_nodes_copy_is_found_from_a_tune_trials_folder(tmp_path: Path) -> None:
    copy = tmp_path / "runtime_resources" / "working_dir_files" / "_ray_pkg_1f2e"
    trial = tmp_path / "artifacts" / "exp" / "working_dirs" / "trainable_00000"
    for folder in (copy, trial):
        folder.mkdir(parents=True)
    assert copy_of(copy, [], None) == copy  # a task: it runs in the copy
    assert copy_of(trial, ["/usr/lib/python3", str(copy)], None) == copy  # Tune moved it
    assert copy_of(trial, [], str(copy)) == copy  # TUNE_ORIG_WORKING_DIR says where
    assert copy_of(trial, [], str(tmp_path)) == tmp_path  # no copy of Ray's: what Tune says
    assert copy_of(trial, [str(tmp_path / "gone" / "working_dir_files" / "x")], None) == trial


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[tuple[types.FunctionType, Path]]:
    """A task of a driver's file shipped by value (as Ray does), and the node's copy."""
    origin, copy = tmp_path / "laptop" / "proj", tmp_path / "node" / "pkg"
    text = "def helper(x):\n    return 1 / x\n\n\ndef task(x):\n    return helper(x)\n"
    for folder in (origin, copy):
        (folder / "jobs").mkdir(parents=True)
        (folder / "jobs" / "rl_job.py").write_text(text)
    sys.path.insert(0, str(origin / "jobs"))
    module = importlib.import_module("rl_job")
    cloudpickle.register_pickle_by_value(module)
    try:
        task = cloudpickle.loads(cloudpickle.dumps(module.task))
        yield task, copy
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        sys.path.remove(str(origin / "jobs"))
        sys.modules.pop("rl_job", None)


def test_code_shipped_by_value_is_pointed_at_the_nodes_copy(
    shipped: tuple[types.FunctionType, Path],
) -> None:
    task, copy = shipped
    target = copy / "jobs" / "rl_job.py"
    assert relocate(task, copy) == target
    helper = task.__globals__["helper"]
    assert task.__code__.co_filename == str(target) == helper.__code__.co_filename
    with pytest.raises(ZeroDivisionError) as failed:
        task(0)
    assert failed.traceback[-1].path == target, "the traceback names the copy's file"
    assert relocate(task, copy) == target  # again: nothing more to move


def test_settings_travel_to_another_process_but_the_nodes_own_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    carried = ShippedSettings(
        pid=-1, settings={"PODCODE_ENABLE": "1", "PODCODE_OWNER": "ana@x.org"})
    assert carried.missing({"PODCODE_OWNER": "ops@x.org"}) == {"PODCODE_ENABLE": "1"}
    here = ShippedSettings.here()
    assert here.missing({}) == {}, "where the decorator ran, nothing to take"
    environ = {"PODCODE_OWNER": "ops@x.org"}
    monkeypatch.setattr(os, "environ", environ)
    carried.apply_here()
    assert environ == {"PODCODE_OWNER": "ops@x.org", "PODCODE_ENABLE": "1"}


def test_vscode_over_an_object_keeping_the_function_in_function() -> None:
    class RemoteLike:  # Ray's RemoteFunction keeps the user's function in ._function
        def __init__(self, function: types.FunctionType) -> None:
            self._function = function

    def add(x: int) -> int:
        return x + 1

    remote = RemoteLike(add)
    assert vscode(remote) is remote
    assert getattr(remote._function, RAW_ATTRIBUTE) is add and remote._function(1) == 2


def test_vscode_over_a_class_wraps_its_methods() -> None:
    @vscode
    class Counter:
        def __init__(self) -> None:
            self.total = 0

        def add(self, x: int) -> int:
            self.total += x
            return self.total

    assert hasattr(vars(Counter)["add"], RAW_ATTRIBUTE)
    assert not hasattr(vars(Counter)["__init__"], RAW_ATTRIBUTE)
    assert Counter().add(2) == 2


def test_a_ray_node_pod_is_never_deleted_by_one_sessions_cleanup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from interactive.base import identity

    monkeypatch.setattr(identity, "_pod_shared_with", [])
    name = identity.claim_session_id()
    try:
        assert not identity.others_open(name)  # alone: its cleanup may delete the pod
        identity.share_pod("a Ray node")
        assert identity.others_open(name), "the raylet and other workers keep the pod"
    finally:
        identity.release_session_id(name)


def test_a_blocked_wait_sees_an_exception_raised_into_its_thread() -> None:
    """``ray.cancel`` raises KeyboardInterrupt into a running task's thread; a session
    waiting for a command must see it (a bare ``queue.get()`` never would)."""
    import ctypes
    import queue
    import threading

    from interactive.base.threads import get_interruptibly

    commands: queue.SimpleQueue[str] = queue.SimpleQueue()
    seen: list[BaseException] = []

    started = threading.Event()

    def wait() -> None:
        try:
            started.set()
            get_interruptibly(commands)
        except KeyboardInterrupt as exc:
            seen.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    started.wait(10)
    assert waiter.ident is not None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(waiter.ident), ctypes.py_object(KeyboardInterrupt))
    waiter.join(10)
    assert not waiter.is_alive() and isinstance(seen[0], KeyboardInterrupt)


def test_the_fix_is_written_into_another_nodes_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A task waiting on another node takes the fix into its node's copy of the code, so a
    worker started there later imports the fixed module."""
    from interactive.ray.bugs import _write

    copy = tmp_path / "node-b" / "_ray_pkg_1f2e"
    (copy / "jobs").mkdir(parents=True)
    (copy / "jobs" / "steps.py").write_text("def f(x):\n    return 1 / x\n")
    (copy / "jobs" / "steps.py").chmod(0o640)
    (copy / "same.py").write_text("A = 1\n")
    stamp = (copy / "same.py").stat().st_mtime_ns
    _write(copy, [("jobs/steps.py", "def f(x):\n    return 1 / x\n",
                   "def f(x):\n    return 1 / (x or 1)\n"),
                  ("same.py", "A = 1\n", "A = 1\n"),
                  ("gone/missing.py", "", "B = 2\n")])
    assert (copy / "jobs" / "steps.py").read_text() == "def f(x):\n    return 1 / (x or 1)\n"
    assert (copy / "jobs" / "steps.py").stat().st_mode & 0o777 == 0o640
    assert (copy / "same.py").stat().st_mtime_ns == stamp  # unchanged: not written again
    assert "cannot write the fix to" in caplog.text  # a file this copy lacks: said, skipped
