"""PyTorch tensors in a capture: out of band, shared storage, every dtype, devices."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from interactive.inputs import tensors  # noqa: E402
from interactive.inputs.capture import load_inputs, save_inputs  # noqa: E402


def task(value: Any) -> Any:
    return value


def round_trip(value: Any, home: Path) -> Any:
    report = save_inputs("t", task, (value,), {}, home)
    assert not report.failed, report.failed
    return load_inputs("t", home)[0][0]


def same_storage(a: Any, b: Any) -> bool:
    return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def test_storages_go_out_of_band_once(podcode_home: Path) -> None:
    weight = torch.randn(512, 512)
    value = {"w": weight, "tied": weight, "row": weight[3], "again": weight.view(-1)}
    report = save_inputs("t", task, (value,), {}, podcode_home)
    assert (report.folder / "data.bin").stat().st_size < 4096
    assert (report.folder / "buffers.bin").stat().st_size == weight.nbytes  # written once


def test_views_and_tied_weights_share_one_storage_after_load(podcode_home: Path) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    value = {"base": base, "view": base[1:, 2:], "t": base.t(), "tied": base}
    loaded = round_trip(value, podcode_home)
    assert loaded["tied"] is loaded["base"]
    assert same_storage(loaded["view"], loaded["base"])
    assert same_storage(loaded["t"], loaded["base"])
    assert loaded["view"].storage_offset() == 8 and loaded["view"].stride() == (6, 1)
    assert loaded["t"].stride() == (1, 6) and torch.equal(loaded["t"], base.t())
    loaded["base"][1, 2] = -1.0  # writable, and the views see the write
    assert loaded["view"][0, 0].item() == -1.0 and loaded["t"][2, 1].item() == -1.0
    assert base[1, 2].item() == 8.0  # the captured tensor is not touched


@pytest.mark.parametrize(
    "dtype",
    [torch.bfloat16, torch.float16, torch.float64, torch.complex64, torch.bool, torch.int8,
     torch.uint16, torch.float8_e4m3fn],
)
def test_every_dtype_round_trips(podcode_home: Path, dtype: Any) -> None:
    source = torch.randn(6, 5, dtype=torch.float32) * 10
    if dtype is torch.uint16:
        source = source.abs().to(torch.int32)
    value = source.to(dtype)
    loaded = round_trip(value, podcode_home)
    assert loaded.dtype == dtype and loaded.shape == value.shape
    assert loaded.view(torch.uint8).flatten().tolist() == value.view(torch.uint8).flatten().tolist()


def test_bfloat16_values_are_exact(podcode_home: Path) -> None:
    value = torch.randn(1000).to(torch.bfloat16)
    loaded = round_trip(value, podcode_home)
    assert loaded.dtype is torch.bfloat16 and torch.equal(loaded, value)


def test_requires_grad_and_parameters_are_kept(podcode_home: Path) -> None:
    leaf = torch.randn(3, requires_grad=True)
    parameter = torch.nn.Parameter(torch.randn(2, 2))
    frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    loaded = round_trip([leaf, parameter, frozen, torch.zeros(2)], podcode_home)
    assert loaded[0].requires_grad and torch.equal(loaded[0], leaf)
    assert isinstance(loaded[1], torch.nn.Parameter) and loaded[1].requires_grad
    assert isinstance(loaded[2], torch.nn.Parameter) and not loaded[2].requires_grad
    assert not loaded[3].requires_grad
    (loaded[0] * 2).sum().backward()
    assert torch.equal(loaded[0].grad, torch.full((3,), 2.0))


class TiedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("steps", torch.tensor(7))


def test_a_module_s_state_dict_loads_into_a_fresh_module(podcode_home: Path) -> None:
    model = TiedModel().to(torch.bfloat16)
    loaded = round_trip(model.state_dict(), podcode_home)
    assert list(loaded) == list(model.state_dict())
    assert same_storage(loaded["embed.weight"], loaded["head.weight"])
    fresh = TiedModel().to(torch.bfloat16)
    fresh.load_state_dict(loaded)
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(),
                                                  model.state_dict().values(), strict=True))


def test_a_whole_module_round_trips_with_its_tie(podcode_home: Path) -> None:
    loaded = round_trip(TiedModel(), podcode_home)
    assert loaded.head.weight is loaded.embed.weight
    assert loaded.steps.item() == 7


def test_load_in_a_fresh_process_keeps_sharing(podcode_home: Path) -> None:
    base = torch.randn(64, 64)
    save_inputs("pkg.task", task, ({"a": base, "b": base[8:]},), {}, podcode_home)
    script = (
        "import torch;"
        "from interactive import load_inputs;"
        "(v,), _ = load_inputs('pkg.task');"
        "print(v['a'].untyped_storage().data_ptr() == v['b'].untyped_storage().data_ptr(),"
        " v['b'].storage_offset(), float(v['a'].sum()))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == ["True", str(8 * 64)]
    assert float(out[2]) == pytest.approx(float(base.sum()), rel=1e-5)


def test_torch_is_not_imported_for_inputs_without_tensors(podcode_home: Path) -> None:
    script = (
        "import sys, numpy as np;"
        "from pathlib import Path;"
        "from interactive.inputs.capture import save_inputs, load_inputs;"
        "home = Path(sys.argv[1]);"
        "save_inputs('t', print, (np.ones(3), {'a': 1}), {}, home);"
        "load_inputs('t', home);"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script, str(podcode_home)],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


class _OnCuda(tensors.Carrier):
    """A storage as if it had been captured on the first GPU."""

    def __init__(self, host: Any, device: str) -> None:
        super().__init__(host, "cuda:0")


def test_a_gpu_tensor_without_a_gpu_loads_on_the_cpu_with_a_warning(
    podcode_home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tensors, "Carrier", _OnCuda)
    monkeypatch.setattr(tensors, "_warned", set())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    value = torch.arange(6.0)
    with caplog.at_level(logging.WARNING, logger="interactive.inputs.tensors"):
        loaded = round_trip([value, value[2:]], podcode_home)
    assert loaded[0].device.type == "cpu" and torch.equal(loaded[0], value)
    assert same_storage(loaded[0], loaded[1])
    assert caplog.text.count("captured tensors from cuda:0 are loaded on the CPU") == 1


def test_a_gpu_tensor_goes_back_to_its_device_when_there_is_one(
    podcode_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved: list[Any] = []

    def fake_to(storage: Any, *, device: Any, non_blocking: bool = False) -> Any:
        moved.append(device)
        return storage

    monkeypatch.setattr(tensors, "Carrier", _OnCuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.UntypedStorage, "to", fake_to)
    value = torch.arange(6.0)
    loaded = round_trip({"a": value, "b": value}, podcode_home)
    assert moved == [torch.device("cuda:0")]  # once per storage, not per tensor
    assert torch.equal(loaded["a"], value)


def test_an_empty_tensor_round_trips(podcode_home: Path) -> None:
    loaded = round_trip([torch.empty(0), torch.empty(0, 3, dtype=torch.bfloat16)], podcode_home)
    assert loaded[0].shape == (0,) and loaded[1].shape == (0, 3)
    assert loaded[1].dtype is torch.bfloat16
