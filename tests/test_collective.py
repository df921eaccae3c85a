"""Breaking the process group on a rank's failure: the calls chosen for each backend, on a
fake ``torch.distributed`` (NCCL needs GPUs; gloo runs for real in test_distributed_e2e)."""

from __future__ import annotations

import logging
import os
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from interactive.distributed import collective


class FakeDist:
    """The part of torch.distributed that collective uses, recording the calls."""

    def __init__(self, backend: str, *, abort_api: bool = True, abort_fails: bool = False,
                 backend_abort_fails: bool = False, world_size: int = 2) -> None:
        self.backend, self.world_size = backend, world_size
        self.calls: list[str] = []
        self.initialized = True
        c10d = SimpleNamespace(_get_default_group=self._default_group)
        if abort_api:
            c10d._abort_process_group = self._abort_process_group
        self.distributed_c10d = c10d
        self._abort_fails, self._backend_abort_fails = abort_fails, backend_abort_fails

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def get_world_size(self) -> int:
        return self.world_size

    def get_rank(self) -> int:
        return 1

    def get_backend(self) -> str:
        return self.backend

    def destroy_process_group(self) -> None:
        self.calls.append("destroy_process_group")
        self.initialized = False

    def _abort_process_group(self) -> None:
        self.calls.append("_abort_process_group")
        if self._abort_fails:
            raise RuntimeError("abort is not supported by this backend")
        self.initialized = False

    def _default_group(self) -> Any:
        def get_backend(device: Any) -> Any:
            self.calls.append(f"_get_backend({device})")
            return SimpleNamespace(abort=self._backend_abort)

        return SimpleNamespace(_get_backend=get_backend)

    def _backend_abort(self) -> None:
        self.calls.append("ProcessGroupNCCL.abort")
        if self._backend_abort_fails:
            raise RuntimeError("NCCL communicator already destroyed")


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Any:
    def put(dist: FakeDist) -> FakeDist:
        monkeypatch.setitem(sys.modules, "torch.distributed", dist)
        monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(device=lambda kind: kind))
        monkeypatch.setattr(collective, "_aborted", None)
        monkeypatch.setattr(collective, "_join_late", lambda dist: None)  # no peers here
        return dist

    return put


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_the_abort_api_is_used_when_torch_has_it(install: Any, backend: str) -> None:
    dist = install(FakeDist(backend))
    assert collective.abort_group() is True
    assert dist.calls == ["_abort_process_group"]  # never a destroy that could wait on peers
    assert collective._aborted is not None and collective._aborted.backend == backend


def test_nccl_without_the_abort_api_aborts_its_communicators_before_destroying(
    install: Any,
) -> None:
    dist = install(FakeDist("nccl", abort_api=False))
    assert collective.abort_group() is True
    assert dist.calls == ["_get_backend(cuda)", "ProcessGroupNCCL.abort", "destroy_process_group"]


def test_nccl_that_cannot_be_aborted_is_not_destroyed(
    install: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Destroying an NCCL group with collectives pending would wait for the peers."""
    dist = install(FakeDist("nccl", abort_fails=True, backend_abort_fails=True))
    assert collective.abort_group() is False
    assert "destroy_process_group" not in dist.calls
    assert collective._aborted is None
    assert "wait for their watchdog's timeout" in caplog.text


def test_gloo_falls_back_to_destroying(install: Any) -> None:
    dist = install(FakeDist("gloo", abort_fails=True))
    assert collective.abort_group() is True
    assert dist.calls == ["_abort_process_group", "destroy_process_group"]


def test_a_single_rank_or_no_group_is_left_alone(install: Any) -> None:
    dist = install(FakeDist("nccl", world_size=1))
    assert collective.abort_group() is False and dist.calls == []
    dist = install(FakeDist("nccl"))
    dist.initialized = False
    assert collective.abort_group() is False and dist.calls == []


def test_nccl_without_raised_errors_is_warned_about(
    install: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    install(FakeDist("nccl"))
    with caplog.at_level(logging.WARNING, logger="interactive.distributed.collective"):
        assert collective.abort_group() is True
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=3: a rank whose NCCL collective fails" in caplog.text


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "2"),  # torch's default (3) would kill the rank
        ({"TORCHELASTIC_RUN_ID": "x", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, "2"),  # torchrun's
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, "1"),  # the user's own choice
        ({"TORCHELASTIC_RUN_ID": "x", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, "3"),
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, "0"),
    ],
)
def test_nccl_errors_are_raised_in_the_rank_unless_the_user_chose(
    environ: dict[str, str], expected: str
) -> None:
    changed = collective.prefer_raised_nccl_errors(environ)
    assert environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == expected
    assert changed is (expected == "2")


def test_the_decorator_prepares_nccl_when_podcode_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from interactive import vscode

    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "")  # restored after the test
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    vscode(lambda: None)
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in os.environ  # podcode off
    monkeypatch.setenv("PODCODE_ENABLE", "1")
    vscode(lambda: None)
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"


@pytest.mark.parametrize(("backend", "formed_once"), [("gloo", True), (None, False)])
def test_a_group_formed_by_accelerates_state_is_re_formed_by_podcode(
    monkeypatch: pytest.MonkeyPatch, backend: str | None, formed_once: bool
) -> None:
    """Accelerate's PartialState forms the group at its first use only (a singleton): its
    group is podcode's to re-form even when the task made it; a state that formed none is not."""
    PartialState = pytest.importorskip("accelerate.state").PartialState
    state = dict(PartialState._shared_state)
    monkeypatch.setattr(PartialState, "_shared_state", {**state, "backend": backend})
    assert collective._formed_once() is formed_once
    monkeypatch.delitem(sys.modules, "accelerate.state")
    assert collective._formed_once() is False
