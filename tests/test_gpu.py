"""GPU activity against the real pynvml over a fake NVML library, a fake /proc for
PID namespaces, and a real HTTP server speaking dcgm-exporter's text format."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pynvml
import pytest

from interactive.reaper import dcgm
from interactive.reaper.gpu import GpuSampler, visible_gpus
from interactive.reaper.pidns import ProcessView, in_root_namespace, nspid
from tests.codeserver_fixture import Files
from tests.fake_nvml import (
    DRIVER_NOT_LOADED,
    NO_PERMISSION,
    NOT_SUPPORTED,
    Device,
    FakeLibrary,
    Process,
    Slice,
    install,
)

PARENT = "GPU-5f2c0a44-0000-0000-0000-00000000000a"
SLICES = [Slice("MIG-11111111-aaaa-5555-8888-000000000001", slot=0, gpu_instance=7),
          Slice("MIG-22222222-bbbb-5555-8888-000000000002", slot=3, gpu_instance=9)]


def fake_proc(root: Path, parents: dict[int, int], own: list[int]) -> ProcessView:
    """A /proc with ``parents`` (pid -> parent pid) and this process's ``NSpid`` chain.
    This process is in the host's PID namespace when it is pid 100 there."""
    for pid, parent in parents.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} (python (x)) S {parent} 1 1 0 -1\n")
        (root / str(pid) / "status").write_text(f"Name:\tpython\nNSpid:\t{pid}\n")
    (root / "self").mkdir()
    (root / "self" / "status").write_text("NSpid:\t" + "\t".join(map(str, own)) + "\n")
    return ProcessView(root, root_namespace=lambda: own == [100])


# our task is 100 -> 101 -> 102; 300 belongs to another tenant of the GPU
HOST = {1: 0, 100: 1, 101: 100, 102: 101, 300: 1}


def sampler(monkeypatch: pytest.MonkeyPatch, devices: list[Device], view: ProcessView,
            environ: dict[str, str] | None = None, **options: object) -> GpuSampler:
    install(monkeypatch, devices)
    return GpuSampler(5.0, environ=environ or {}, nvml=pynvml, processes=view, **options)


# -- whole GPUs -------------------------------------------------------------------------


def test_per_process_counts_only_the_tasks_own_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    notes: list[str] = []
    device = Device("GPU-aaaa", utilization=95, processes=[Process(300, 95)])
    gpus = sampler(monkeypatch, [device], fake_proc(tmp_path, HOST, [100]), note=notes.append)
    sample = gpus.sample(0.0)  # another tenant keeps the GPU at 95 %: not our activity
    assert (sample.active, sample.value) == (False, 0.0)
    device.processes.append(Process(102, 40, stamp=2_000_000))  # our grandchild computes
    sample = gpus.sample(10.0)
    assert (sample.active, sample.value) == (True, 40.0)
    assert not gpus.sample(20.0).active  # no new sample since: idle again
    assert notes == ["GPU activity of GPU 0 (GPU-aaaa): the utilisation of this task's own "
                     "processes (NVML per-process samples); other processes on this GPU do "
                     "not count"]


def test_a_container_seeing_the_hosts_ids_is_matched_through_nspid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The host's /proc in view: /proc/self says "NSpid: 100 7" (host id, container id)."""
    device = Device("GPU-aaaa", utilization=90, processes=[Process(101, 70)])
    gpus = sampler(monkeypatch, [device], fake_proc(tmp_path, HOST, [100, 7]))
    assert gpus.sample(0.0).value == 70.0


def test_a_container_with_its_own_ids_falls_back_to_the_device(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    notes: list[str] = []
    device = Device("GPU-aaaa", utilization=90, processes=[Process(4242, 90)])
    view = fake_proc(tmp_path, {1: 0, 7: 1}, [7])  # "NSpid: 7": the host's id is unknown
    gpus = sampler(monkeypatch, [device], view, note=notes.append)
    sample = gpus.sample(0.0)
    assert (sample.active, sample.value) == (True, 90.0)
    (note,) = notes
    assert "the whole GPU's utilisation (NVML)" in note and "PID namespace of its own" in note
    assert "other processes on this GPU count" in note


@pytest.mark.parametrize(
    ("error", "why"),
    [(NOT_SUPPORTED, "NVML has no per-process samples on it"),
     (NO_PERMISSION, "per-process samples cannot be read (NVMLError_NoPermission)")],
)
def test_no_per_process_samples_falls_back_to_the_device(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: int, why: str
) -> None:
    notes: list[str] = []
    device = Device("GPU-aaaa", utilization=33, process_error=error)
    gpus = sampler(monkeypatch, [device], fake_proc(tmp_path, HOST, [100]), note=notes.append)
    assert gpus.sample(0.0).value == 33.0
    assert gpus.sample(1.0).value == 33.0
    library = pynvml.nvmlLib
    assert isinstance(library, FakeLibrary)
    assert library.calls.count("processes GPU-aaaa") == 1  # asked once, then device-level
    assert library.calls.count("device GPU-aaaa") == 2
    (note,) = notes
    assert why in note and "the whole GPU's utilisation" in note


@pytest.mark.parametrize("own", [[100], [7]], ids=["per-process", "device-level"])
def test_a_visible_gpu_always_gives_a_reading(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, own: list[int]
) -> None:
    """The NVML path must work: a visible whole GPU yields a number, never nothing."""
    device = Device("GPU-aaaa", utilization=12, processes=[Process(101, 12)])
    gpus = sampler(monkeypatch, [device], fake_proc(tmp_path, {**HOST, 7: 1}, own))
    sample = gpus.sample(0.0)
    assert sample.value == 12.0 and sample.active


# -- MIG ---------------------------------------------------------------------------------


def mig_node() -> list[Device]:
    return [Device("GPU-0000-whole", utilization=50), Device(PARENT, slices=list(SLICES))]


def test_mig_slices_are_the_parents_children_and_are_recognised(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notes: list[str] = []
    environ = {"CUDA_VISIBLE_DEVICES": SLICES[1].uuid}
    gpus = sampler(monkeypatch, mig_node(), fake_proc(tmp_path, HOST, [100]), environ,
                   note=notes.append)
    caplog.set_level(logging.INFO, logger="interactive.reaper.gpu")
    assert gpus.sample(0.0).value is None  # NVML has no utilisation on MIG
    assert "no visible GPU" not in caplog.text
    (note,) = notes
    assert note.startswith(f"GPU activity cannot be measured on MIG slice {SLICES[1].uuid}")
    assert "dcgm_url" in note and "editor, terminals, debugger, workspace files and CPU" in note


LABELS = (f'gpu="1",UUID="{PARENT}",pci_bus_id="00000000:3B:00.0",device="nvidia1",'
          'modelName="NVIDIA A100-SXM4-40GB",GPU_I_PROFILE="1g.5gb",Hostname="node-3"')
METRICS = f"""# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{LABELS},GPU_I_ID="7"}} 0.910000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{LABELS},GPU_I_ID="9"}} 0.023000
DCGM_FI_PROF_GR_ENGINE_ACTIVE_SOMETHING{{GPU_I_ID="9",UUID="{PARENT}"}} 0.99
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-0000-whole"}} 50
"""


@pytest.mark.parametrize(("slice_", "value"), [(SLICES[0], 91.0), (SLICES[1], 2.3)])
def test_mig_activity_comes_from_dcgm_exporter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, http_files: Files, slice_: Slice,
    value: float,
) -> None:
    http_files.content["/metrics"] = METRICS.encode()
    notes: list[str] = []
    url = f"{http_files.url}/metrics"
    gpus = sampler(monkeypatch, mig_node(), fake_proc(tmp_path, HOST, [100]),
                   {"NVIDIA_VISIBLE_DEVICES": slice_.uuid}, dcgm_url=url, note=notes.append)
    sample = gpus.sample(0.0)
    assert sample.value == pytest.approx(value) and sample.active is (value > 5.0)
    assert notes == [f"GPU activity of MIG slice {slice_.uuid}: its graphics engine activity "
                     f"(DCGM_FI_PROF_GR_ENGINE_ACTIVE) from the dcgm-exporter at {url}"]


def test_an_unreachable_dcgm_exporter_is_said_and_the_other_signals_decide(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, http_files: Files
) -> None:
    notes: list[str] = []
    url = f"{http_files.url}/missing"  # answers 404
    gpus = sampler(monkeypatch, mig_node(), fake_proc(tmp_path, HOST, [100]),
                   {"CUDA_VISIBLE_DEVICES": SLICES[0].uuid}, dcgm_url=url, note=notes.append)
    assert gpus.sample(0.0).value is None
    assert gpus.sample(1.0).value is None
    (note,) = notes
    assert f"while the dcgm-exporter at {url} cannot be read (HTTPError)" in note


def test_whole_gpus_and_slices_together_the_busiest_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, http_files: Files
) -> None:
    http_files.content["/metrics"] = METRICS.encode()
    gpus = sampler(monkeypatch, mig_node(), fake_proc(tmp_path, {1: 0, 7: 1}, [7]),
                   dcgm_url=f"{http_files.url}/metrics")
    assert gpus.sample(0.0).value == pytest.approx(91.0)  # GPU 0 at 50 %, slices 91 and 2.3


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (SLICES[1].uuid[:12], [SLICES[1].uuid]),  # a prefix, as CUDA allows
        (f"MIG-{PARENT}/9/0", [SLICES[1].uuid]),  # the older MIG-GPU-<uuid>/<GI>/<CI> form
        (PARENT, [s.uuid for s in SLICES]),  # the parent: all of its slices
        ("1", [s.uuid for s in SLICES]),
        ("0", ["GPU-0000-whole"]),
        ("MIG-99", []),
    ],
)
def test_which_gpus_and_slices_are_visible(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wanted: str, expected: list[str]
) -> None:
    gpus = sampler(monkeypatch, mig_node(), fake_proc(tmp_path, HOST, [100]),
                   {"CUDA_VISIBLE_DEVICES": wanted})
    gpus.sample(0.0)
    assert [gpu.uuid for gpu in gpus._gpus or []] == expected


# -- no GPU, and the life cycle ---------------------------------------------------------


def test_no_driver_is_said_once_and_then_stays_out_of_the_way(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    library = install(monkeypatch, [Device("GPU-aaaa")], init_error=DRIVER_NOT_LOADED)
    gpus = GpuSampler(5.0, environ={}, nvml=pynvml)
    caplog.set_level(logging.INFO, logger="interactive.reaper.gpu")
    for now in range(5):
        sample = gpus.sample(float(now))
        assert (sample.active, sample.value) == (False, None)
    gpus.close()
    assert library.calls == ["init"]
    said = [r.getMessage() for r in caplog.records if "no GPU" in r.getMessage()]
    assert len(said) == 1 and "NVMLError_DriverNotLoaded" in said[0]


@pytest.mark.parametrize("hidden", ["", "-1", "none"])
def test_no_visible_gpu_shuts_nvml_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hidden: str
) -> None:
    gpus = sampler(monkeypatch, [Device("GPU-aaaa", 80)], fake_proc(tmp_path, HOST, [100]),
                   {"CUDA_VISIBLE_DEVICES": hidden})
    assert gpus.sample(0.0).value is None and gpus.sample(1.0).value is None
    library = pynvml.nvmlLib
    assert library.calls == ["init", "shutdown"]


def test_close_shuts_nvml_down_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpus = sampler(monkeypatch, [Device("GPU-aaaa", 80)], fake_proc(tmp_path, HOST, [7]))
    assert gpus.sample(0.0).value == 80.0
    gpus.close()
    gpus.close()
    library = pynvml.nvmlLib
    assert [call for call in library.calls if call in ("init", "shutdown")] == ["init", "shutdown"]


def test_real_nvml_never_raises() -> None:
    """This machine's real NVML: without a GPU the "no GPU" case, with one a reading."""
    gpus = GpuSampler(5.0, environ=dict(os.environ))
    sample = gpus.sample(0.0)
    gpus.close()
    assert sample.source == "gpu"
    assert sample.value is None or 0.0 <= sample.value <= 100.0


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


# -- the pieces --------------------------------------------------------------------------


def test_this_machines_own_process_is_found_when_its_namespace_allows() -> None:
    view = ProcessView()
    own = view.own_pid()
    if in_root_namespace():
        assert own == os.getpid() and os.getpid() in view.tree(own)
    elif len(nspid(Path("/proc/self/status"))) > 1:
        assert own is not None
    else:
        assert own is None and "PID namespace of its own" in view.reason


def test_the_tree_follows_parents(tmp_path: Path) -> None:
    view = fake_proc(tmp_path, HOST, [100])
    assert view.tree(100) == {100, 101, 102}
    assert view.own_pid() == 100


def test_prometheus_text_is_parsed_for_one_metric() -> None:
    text = (
        '# HELP x\nDCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID="GPU-a",GPU_I_ID="1",x="a\\"b,c"} 0.5 '
        "1712345678000\nDCGM_FI_PROF_GR_ENGINE_ACTIVE 0.25\n"
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID="GPU-a",GPU_I_ID="2"} NaN\n'
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE_X{UUID="GPU-a"} 1\nbroken{ 1\n'
    )
    series = list(dcgm.parse(text))
    assert [(dict(s.labels), s.value) for s in series] == [
        ({"UUID": "GPU-a", "GPU_I_ID": "1", "x": 'a"b,c'}, 0.5), ({}, 0.25)]
    assert dcgm.engine_active(series, "gpu-A", 1) == 50.0
    assert dcgm.engine_active(series, "GPU-a", 2) is None
