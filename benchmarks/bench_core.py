"""Core figures: decorator overhead, input capture speed, resume latency."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import timeit
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import figure, filesystem, interleaved, ratio  # noqa: E402


def overhead_us_per_call(calls: int = 200_000) -> dict[str, Any]:
    os.environ["PODCODE_ENABLE"] = "1"
    from interactive import vscode

    def bare(x: int) -> int:
        return x + 1

    wrapped = vscode(ide="none")(bare)
    wrapped(1)  # first call installs the SIGTERM handler
    ours, base = interleaved(
        lambda: min(timeit.repeat(lambda: wrapped(1), number=calls, repeat=3)) / calls,
        lambda: min(timeit.repeat(lambda: bare(1), number=calls, repeat=3)) / calls,
    )
    return figure(
        "overhead_us_per_call", [(o - b) * 1e6 for o, b in zip(ours, base, strict=True)],
        unit="us", baseline=[b * 1e6 for b in base], goal="<= 10", digits=3,
        baseline_is="the undecorated function's own call (us)",
    )


AT_CALL_SIZES = {"1kib": 1 << 10, "1mib": 1 << 20, "100mib": 100 << 20}


def _at_call_input(size: int) -> Any:
    """A task's argument of about ``size`` bytes: a list of ints for the small one (pickled
    in band), a NumPy array for the others (a writable buffer, out of band)."""
    if size <= 1 << 10:
        return list(range(size // 8))
    return np.ones(size // 8)


def capture_at_call_overhead_ratio(label: str, size: int) -> dict[str, Any]:
    """The snapshot taken at each call (:mod:`interactive.inputs.snapshot`, default
    budget) against ``pickle.dumps`` of the same argument."""
    from interactive.base.settings import Settings
    from interactive.inputs import snapshot

    value = _at_call_input(size)
    budget = Settings().max_snapshot_bytes
    number = max(1, (1 << 24) // size)

    def each(call: Any) -> float:
        return min(timeit.repeat(call, number=number, repeat=3)) / number

    ours, base = interleaved(
        lambda: each(lambda: snapshot.take((value,), {}, budget)),
        lambda: each(lambda: pickle.dumps(value, protocol=5)),
    )
    # A small argument pays a fixed few microseconds (within overhead_us_per_call's budget)
    # over its 1 us pickle; a large one must cost no more than pickling it.
    return ratio(
        f"capture_at_call_overhead_ratio_{label}", ours, base, speedup=False, unit="x",
        goal="<= 5" if size <= 1 << 10 else "<= 1.5", baseline_unit="s",
    )


CAPTURE_MIB = 512
PAGE = 4096
BENCH_DIR = os.environ.get("PODCODE_BENCH_DIR")
"""Where the capture benchmarks write (default: the system's temporary folder)."""


def _touch_arrays(values: list[Any]) -> int:
    """Read one byte of every page of each loaded array: a lazily mapped load pays for its
    page faults here, inside the timing, as an eager one paid in its read."""
    return sum(int(v.reshape(-1).view(np.uint8)[::PAGE].sum()) for v in values)


def _capture_run(write: Any, read: Any, touch: Any) -> float:
    """Seconds to write, read back and touch, in a fresh folder removed afterwards (a
    capture is written once, into a new session's folder: no file is overwritten)."""
    folder = Path(tempfile.mkdtemp(prefix="podcode-bench-", dir=BENCH_DIR))
    try:
        started = time.perf_counter()
        write(folder)
        touch(read(folder))
        return time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _ours(value: Any) -> tuple[Any, Any]:
    from interactive.inputs.capture import load_inputs, save_inputs

    def write(folder: Path) -> None:
        report = save_inputs("bench.task", _ours, (value,), {}, folder / "home")
        assert not report.failed, report.failed

    def read(folder: Path) -> Any:
        return load_inputs("bench.task", folder / "home")[0][0]

    return write, read


def capture_throughput_ratio(arrays: int = 8) -> dict[str, Any]:
    """podcode's capture (save + load) of NumPy arrays against np.save + np.load."""
    rng = np.random.default_rng(0)
    data = [rng.random((CAPTURE_MIB * 1024 * 1024) // 8 // arrays) for _ in range(arrays)]

    def np_write(folder: Path) -> None:
        for index, array in enumerate(data):
            np.save(folder / f"a{index}.npy", array)

    def np_read(folder: Path) -> list[Any]:
        return [np.load(folder / f"a{index}.npy") for index in range(arrays)]

    write, read = _ours(data)
    ours, base = interleaved(lambda: _capture_run(write, read, _touch_arrays),
                             lambda: _capture_run(np_write, np_read, _touch_arrays))
    return ratio(
        "capture_throughput_ratio", ours, base, speedup=True, unit="x np.save+np.load",
        goal=">= 0.8",
        baseline_is=f"np.save + np.load of the same {arrays} float64 arrays, one file each",
        mib=CAPTURE_MIB, filesystem=filesystem(Path(BENCH_DIR or tempfile.gettempdir())),
    )


def _tensors(total_mib: int) -> dict[str, Any]:
    """A model's worth of tensors: float32 and bfloat16 weights, a tied (shared) weight,
    a view into another tensor's storage."""
    import torch

    generator = torch.Generator().manual_seed(0)
    side = int((total_mib * 1024 * 1024 // 4 // 8) ** 0.5)
    weights = {f"layer{i}.weight": torch.randn(side, side, generator=generator)
               for i in range(6)}
    weights["half.weight"] = torch.randn(side, 2 * side, generator=generator).to(torch.bfloat16)
    weights["embed.weight"] = weights["layer0.weight"]  # tied
    weights["head.bias"] = weights["layer1.weight"][0]  # a view
    return weights


def _touch_tensors(values: dict[str, Any]) -> int:
    import torch

    return sum(int(t.contiguous().view(-1).view(torch.uint8)[::PAGE].sum())
               for t in values.values())


def capture_throughput_ratio_torch(total_mib: int = CAPTURE_MIB) -> dict[str, Any]:
    """podcode's capture of PyTorch CPU tensors against torch.save + torch.load."""
    import torch

    weights = _tensors(total_mib)

    def torch_write(folder: Path) -> None:
        torch.save(weights, folder / "weights.pt")

    def torch_read(folder: Path) -> Any:
        return torch.load(folder / "weights.pt")

    write, read = _ours(weights)
    ours, base = interleaved(lambda: _capture_run(write, read, _touch_tensors),
                             lambda: _capture_run(torch_write, torch_read, _touch_tensors))
    return ratio(
        "capture_throughput_ratio_torch", ours, base, speedup=True, unit="x torch.save+torch.load",
        goal=">= 0.8",
        baseline_is="torch.save + torch.load (defaults) of the same state_dict-like dict",
        mib=total_mib, torch=torch.__version__,
        filesystem=filesystem(Path(BENCH_DIR or tempfile.gettempdir())),
    )


JOB = textwrap.dedent("""
    from interactive import vscode

    @vscode(ide="none", port=0, control_port=0, debug_port=0)
    def task(x):
        print("task started", flush=True)
        raise RuntimeError("broken")
        return x

    if __name__ == "__main__":
        task(1)
""")


def resume_latency_s(rounds: int = 5) -> dict[str, Any]:
    """From ``POST /api/resume`` to the task running again, with the fix (an edit of the
    task's own file) patched in. An absolute goal: there is no comparable baseline.

    The resume is sent a second after the session opened, as a person's would be at the
    earliest: in the first fraction of a second the monitor is still starting (it finds the
    pod, starts its samplers) and holds the interpreter."""
    samples = []
    for _ in range(rounds):
        root = Path(tempfile.mkdtemp(prefix="podcode-bench-"))
        (root / "job.py").write_text(JOB)
        env = {
            **os.environ,
            "PODCODE_ENABLE": "1",
            "PODCODE_HOME": str(root / "home"),
            "PYTHONUNBUFFERED": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "job.py"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "task started"
            record = _wait_waiting(root / "home" / "session.json")
            time.sleep(1.0)
            fixed = JOB.replace('raise RuntimeError("broken")', "pass")
            (root / "job.py").write_text(fixed)
            os.utime(root / "job.py", ns=(time.time_ns() + 10**7,) * 2)
            request = urllib.request.Request(
                record["control_url"] + "/api/resume",
                method="POST",
                headers={"Authorization": f"Bearer {record['token']}"},
            )
            started = time.perf_counter()
            urllib.request.urlopen(request, b"", timeout=10).close()
            while proc.stdout.readline().strip() != "task started":
                pass
            samples.append(time.perf_counter() - started)
            proc.wait(30)
        finally:
            proc.kill()
            proc.wait()
            shutil.rmtree(root, ignore_errors=True)
    return figure("resume_latency_s", samples, unit="s", goal="<= 0.3 (absolute)",
                  baseline=None, digits=4)


def _wait_waiting(path: Path, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record: dict[str, Any] = json.loads(path.read_text())
            if record["state"] == "waiting":
                return record
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.02)
    raise TimeoutError("no session")


def run() -> list[dict[str, Any]]:
    entries = [overhead_us_per_call(), capture_throughput_ratio()]
    entries += [capture_at_call_overhead_ratio(name, size) for name, size in AT_CALL_SIZES.items()]
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        entries.append(capture_throughput_ratio_torch())
    return [*entries, resume_latency_s()]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
