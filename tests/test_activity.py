"""Activity samplers against real files and real processes, and a fake NVML."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from interactive.activity import CpuSampler, FileSampler, GpuSampler, visible_gpus

BURN = "import time\nwhile time.process_time() < {seconds}: pass\n"
FOREVER = "while True: pass\n"


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def bump(path: Path) -> None:
    """Change a file's modification time for sure, whatever the clock's resolution."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


# -- files -----------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    for skipped in (".git", "node_modules", "__pycache__"):
        (root / skipped).mkdir()
        (root / skipped / "f").write_text("x")
    return root


def test_first_scan_is_a_baseline(workspace: Path) -> None:
    sampler = FileSampler(workspace)
    first = sampler.sample(0.0)
    assert not first.active
    assert first.value == 2.0
    assert not sampler.sample(1.0).active


@pytest.mark.parametrize("change", ["modify", "add", "delete", "rename"])
def test_changes_in_the_workspace_are_activity(workspace: Path, change: str) -> None:
    sampler = FileSampler(workspace)
    sampler.sample(0.0)
    target = workspace / "pkg" / "model.py"
    if change == "modify":
        bump(target)
    elif change == "add":
        (workspace / "pkg" / "new.py").write_text("")
    elif change == "delete":
        target.unlink()
    else:
        target.rename(workspace / "pkg" / "model2.py")
    assert sampler.sample(1.0).active
    assert not sampler.sample(2.0).active


def test_tool_folders_are_not_watched(workspace: Path) -> None:
    sampler = FileSampler(workspace)
    sampler.sample(0.0)
    for skipped in (".git", "node_modules", "__pycache__"):
        bump(workspace / skipped / "f")
        (workspace / skipped / "g").write_text("y")
    assert not sampler.sample(1.0).active


def test_symlinked_folders_are_not_followed(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.bin").write_text("1")
    (workspace / "data").symlink_to(outside, target_is_directory=True)
    sampler = FileSampler(workspace)
    sampler.sample(0.0)
    bump(outside / "data.bin")
    assert not sampler.sample(1.0).active


def test_large_trees_are_bounded(workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    for index in range(10):
        (workspace / f"f{index}.txt").write_text("x")
    sampler = FileSampler(workspace, max_files=5)
    caplog.set_level(logging.WARNING, logger="interactive.activity")
    assert sampler.sample(0.0).value == 5.0
    assert sampler.sample(1.0).value == 5.0
    assert len([r for r in caplog.records if "only the first 5" in r.getMessage()]) == 1


# -- CPU -------------------------------------------------------------------------


def spawn(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        for child in _children(proc.pid):
            child.kill()
        proc.kill()
        proc.wait(timeout=10)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def cpu_of(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def test_scope_is_checked() -> None:
    with pytest.raises(ValueError, match="scope"):
        CpuSampler(5.0, scope="everyone")


def test_quiet_processes_are_idle() -> None:
    sampler = CpuSampler(5.0, scope="tree")
    assert not sampler.sample(0.0).active  # baseline
    sample = sampler.sample(1000.0)
    assert not sample.active
    assert sample.value is not None and sample.value < 5.0


def test_a_busy_child_process_is_activity(processes: list[subprocess.Popen[bytes]]) -> None:
    sampler = CpuSampler(5.0, scope="tree")
    sampler.sample(0.0)
    proc = spawn(FOREVER)
    processes.append(proc)
    wait_until(lambda: cpu_of(proc.pid) >= 0.3)
    sample = sampler.sample(1.0)  # >= 0.3 CPU seconds in one second: >= 30 %
    assert sample.active
    assert sample.value is not None and sample.value >= 30.0


def test_a_child_that_ran_and_ended_between_samples_counts() -> None:
    sampler = CpuSampler(5.0, scope="tree")
    sampler.sample(0.0)
    subprocess.run([sys.executable, "-c", BURN.format(seconds=0.3)], check=True)
    assert sampler.sample(1.0).active


def test_same_user_scope_sees_our_children(processes: list[subprocess.Popen[bytes]]) -> None:
    sampler = CpuSampler(5.0, scope="user")
    sampler.sample(0.0)
    proc = spawn(FOREVER)
    processes.append(proc)
    wait_until(lambda: cpu_of(proc.pid) >= 0.3)
    assert sampler.sample(1.0).active


def _burn_in_thread(name: str, stop: threading.Event) -> threading.Thread:
    def burn() -> None:
        while not stop.is_set():
            pass

    thread = threading.Thread(target=burn, name=name, daemon=True)
    thread.start()
    return thread


def _thread_cpu(native_id: int) -> float:
    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return float(thread.user_time + thread.system_time)
    return 0.0


@pytest.mark.parametrize(("name", "counts"), [("user-work", True), ("podcode-monitor", False),
                                              ("pydevd.Reader", False)])
def test_threads_of_this_process(name: str, counts: bool) -> None:
    sampler = CpuSampler(5.0, scope="tree")
    stop = threading.Event()
    sampler.sample(0.0)
    thread = _burn_in_thread(name, stop)
    try:
        assert thread.native_id is not None
        native_id = thread.native_id
        wait_until(lambda: _thread_cpu(native_id) >= 0.5)
        sample = sampler.sample(2.0)  # counted, 0.5 CPU seconds in 2 s would be 25 %
    finally:
        stop.set()
        thread.join()
    assert sample.active is counts


IDE = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", {own!r}]),
        subprocess.Popen(["/bin/sh", "-c", {other!r}])]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(("busy", "counts"), [("own", False), ("terminal", True)])
def test_ide_processes_are_excluded_but_what_runs_in_its_terminal_counts(
    processes: list[subprocess.Popen[bytes]], busy: str, counts: bool
) -> None:
    """code-server's own processes share its executable; a shell in its terminal does not."""
    own = FOREVER if busy == "own" else "import time; time.sleep(600)"
    other = "while :; do :; done" if busy == "terminal" else "sleep 600"
    root = subprocess.Popen([sys.executable, "-c", IDE.format(own=own, other=other)],
                            stdout=subprocess.PIPE)
    processes.append(root)
    assert root.stdout is not None
    own_pid, shell_pid = map(int, root.stdout.readline().split())
    root.stdout.close()
    # the IDE reports its whole tree: launcher, its own helpers, the terminal's shell
    sampler = CpuSampler(5.0, ide_pids=lambda: [root.pid, own_pid, shell_pid], scope="tree")
    sampler.sample(0.0)
    wait_until(lambda: cpu_of(own_pid if busy == "own" else shell_pid) >= 0.5)
    assert sampler.sample(2.0).active is counts  # counted, it would be >= 25 %


# -- GPU -------------------------------------------------------------------------


class FakeNvml:
    """The part of pynvml the sampler uses, with its error hierarchy."""

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's name
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
        pass

    def __init__(self, gpus: list[tuple[str, float | None]] | None = None,
                 missing: bool = False) -> None:
        self.gpus = gpus or []
        self.missing = missing
        self.calls: list[str] = []

    def nvmlInit(self) -> None:  # noqa: N802
        self.calls.append("init")
        if self.missing:
            raise self.NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:  # noqa: N802
        return self.gpus[handle][0].encode()  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:  # noqa: N802
        percent = self.gpus[handle][1]
        if percent is None:
            raise self.NVMLError_NotSupported("Not Supported")
        return SimpleNamespace(gpu=percent, memory=0)


GPUS: list[tuple[str, float | None]] = [("GPU-aaaa-1111", 0.0), ("GPU-bbbb-2222", 80.0),
                                        ("GPU-cccc-3333", None)]


def test_no_nvml_is_said_once_and_then_stays_out_of_the_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nvml = FakeNvml(missing=True)
    sampler = GpuSampler(5.0, environ={}, nvml=nvml)
    caplog.set_level(logging.INFO, logger="interactive.activity")
    for now in range(5):
        sample = sampler.sample(float(now))
        assert (sample.active, sample.value) == (False, None)
    assert nvml.calls == ["init"]
    said = [r.getMessage() for r in caplog.records if "no GPU" in r.getMessage()]
    assert len(said) == 1 and "NVMLError_LibraryNotFound" in said[0]
    sampler.close()
    assert nvml.calls == ["init"]


def test_real_nvml_never_raises() -> None:
    """On a machine without a GPU this is the LibraryNotFound case; with one, a reading."""
    sampler = GpuSampler(5.0, environ=dict(os.environ))
    sample = sampler.sample(0.0)
    sampler.close()
    assert sample.source == "gpu"
    assert sample.value is None or 0.0 <= sample.value <= 100.0


def test_busy_gpu_is_activity_and_the_busiest_is_reported() -> None:
    nvml = FakeNvml(GPUS)
    sampler = GpuSampler(5.0, environ={}, nvml=nvml)
    sample = sampler.sample(0.0)
    assert sample.active and sample.value == 80.0
    sampler.close()
    assert nvml.calls == ["init", "shutdown"]


@pytest.mark.parametrize(
    ("environ", "value"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, 0.0),
        ({"CUDA_VISIBLE_DEVICES": "1"}, 80.0),
        ({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, 80.0),  # a UUID prefix, as CUDA allows
        ({"CUDA_VISIBLE_DEVICES": "0,2"}, 0.0),  # no reading from a MIG-like device
        ({"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "GPU-bbbb-2222"}, 0.0),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-aaaa-1111"}, 0.0),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, 80.0),
    ],
)
def test_only_visible_gpus_count(environ: dict[str, str], value: float) -> None:
    sample = GpuSampler(5.0, environ=environ, nvml=FakeNvml(GPUS)).sample(0.0)
    assert sample.value == value
    assert sample.active is (value > 5.0)


@pytest.mark.parametrize("hidden", ["", "-1", "none"])
def test_no_visible_gpu(hidden: str) -> None:
    nvml = FakeNvml(GPUS)
    sampler = GpuSampler(5.0, environ={"CUDA_VISIBLE_DEVICES": hidden}, nvml=nvml)
    assert sampler.sample(0.0).value is None
    assert sampler.sample(1.0).value is None
    assert nvml.calls == ["init", "shutdown"]


def test_idle_gpu_below_the_threshold() -> None:
    sample = GpuSampler(50.0, environ={}, nvml=FakeNvml([("GPU-x", 40.0)])).sample(0.0)
    assert (sample.active, sample.value) == (False, 40.0)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, ["0", "1"]),
        ({"CUDA_VISIBLE_DEVICES": "1,-1,0"}, ["1"]),
        ({"CUDA_VISIBLE_DEVICES": " GPU-ab , MIG-cd "}, ["GPU-ab", "MIG-cd"]),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, None),
        ({"NVIDIA_VISIBLE_DEVICES": "0,1"}, None),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-ab,GPU-cd"}, ["GPU-ab", "GPU-cd"]),
    ],
)
def test_visible_gpus(environ: dict[str, str], expected: list[str] | None) -> None:
    assert visible_gpus(environ) == expected
