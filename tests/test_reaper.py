"""Cleanup of an idle session: every step, each isolated, against a real store and SMTP."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from interactive.base.settings import HookSettings
from interactive.base.smtp import parse_smtp_url
from interactive.base.state import SessionState
from interactive.reaper.cleanup import cleanup, run_hook
from interactive.reaper.notify import EmailNotifier
from interactive.storage import edits
from interactive.storage.backends import open_store
from interactive.storage.edits import edits_folder
from interactive.storage.store import Store
from interactive.storage.workspace import Snapshot
from tests.reaper_fakes import FakeNotifier, FakePod
from tests.smtp_fixture import SmtpServer

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


@dataclass
class FakeIde:
    order: list[str]
    fails: bool = False
    stopped: bool = False

    async def stop(self) -> None:
        self.order.append("ide")
        if self.fails:
            raise RuntimeError("code-server would not stop")
        self.stopped = True


@dataclass
class OrderedPod(FakePod):
    order: list[str] = field(default_factory=list)
    deleted: bool = True

    def delete(self) -> bool:
        self.order.append("delete")
        self.calls.append(("delete",))
        return self.deleted


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("lr = 0.1\n")
    (root / "pkg" / "model.py").write_text("LAYERS = 2\n")
    (root / "old.txt").write_text("bye\n")
    return root


def edit(root: Path) -> None:
    (root / "train.py").write_text("lr = 0.01\n")
    (root / "pkg" / "new.py").write_text("NEW = True\n")
    (root / "old.txt").unlink()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store({"PODCODE_STORE": str(tmp_path / "store")})


def state_for(task: str = "train.fit") -> SessionState:
    state = SessionState(task, clock=lambda: NOW)
    state.set(state="waiting")
    state.set(state="warned", last_activity=NOW - 2400)
    return state


async def test_cleanup_runs_every_step_in_order(
    workspace: Path, store: Store, smtp_server: SmtpServer
) -> None:
    order: list[str] = []
    snapshot = Snapshot.take(workspace)
    edit(workspace)
    ide = FakeIde(order)
    pod = OrderedPod(order=order)
    notifier = EmailNotifier(parse_smtp_url(smtp_server.url), "podcode@pod", "ana@example.com")
    state = state_for()

    report = await cleanup(
        state=state, hooks=HookSettings(on_reap=lambda: order.append("hook")),
        snapshot=snapshot, store=store, ide=ide, pod=pod, notifier=notifier, clock=lambda: NOW,
    )

    assert report.problems == []
    assert order == ["hook", "ide", "delete"]
    assert state.state == "reaping"
    assert report.hook_ran and report.ide_stopped and report.email_sent and report.pod_deleted
    folder = "edits/train.fit/20231114T221320Z"
    assert report.edits_url == store.url_for(folder)
    saved = Path(report.edits_url)
    assert (saved / "files" / "train.py").read_text() == "lr = 0.01\n"
    assert (saved / "files" / "pkg" / "new.py").read_text() == "NEW = True\n"
    diff = (saved / "changes.diff").read_text()
    assert "-lr = 0.1" in diff and "+lr = 0.01" in diff and "-bye" in diff
    manifest = json.loads((saved / "manifest.json").read_text())
    assert sorted(manifest["copied"]) == ["pkg/new.py", "train.py"]
    assert manifest["deleted"] == ["old.txt"]
    assert sorted(report.changed) == ["old.txt", "pkg/new.py", "train.py"]

    [message] = smtp_server.wait_for(1)
    body = message.get_body(("plain",))
    assert body is not None
    text = body.get_content()
    assert report.edits_url in text and "pkg/new.py" in text
    assert "ml/train-abc" in text
    event = [call for call in pod.calls if call[0] == "event"]
    assert event and event[0][1] == "PodcodeReaped" and report.edits_url in event[0][2]
    assert pod.calls[-1] == ("delete",)


async def test_a_hanging_hook_is_cut_off_and_cleanup_goes_on(
    workspace: Path, store: Store
) -> None:
    release = threading.Event()
    pod, notifier = OrderedPod(), FakeNotifier()
    try:
        report = await cleanup(
            state=state_for(), hooks=HookSettings(on_reap=release.wait),
            snapshot=Snapshot.take(workspace), store=store, ide=None, pod=pod,
            notifier=notifier, clock=lambda: NOW, hook_timeout=0.2,
        )
    finally:
        release.set()
    assert not report.hook_ran
    assert len(report.problems) == 1 and "on_reap" in report.problems[0]
    assert "0.2 s" in report.problems[0]
    assert report.pod_deleted and report.edits_url is not None
    assert notifier.finals[0].problems == report.problems


async def test_hook_errors_and_async_hooks() -> None:
    ran: list[str] = []

    async def checkpoint() -> None:
        await asyncio.sleep(0)
        ran.append("async")

    assert await run_hook(checkpoint, 5.0)
    assert ran == ["async"]

    def broken() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await run_hook(broken, 5.0)


class BrokenStore:
    def put_file(self, rel_path: str, local: Path) -> None:
        raise PermissionError("read-only bucket")

    def put_bytes(self, rel_path: str, data: bytes) -> None:
        raise PermissionError("read-only bucket")

    def url_for(self, rel_path: str) -> str:
        return f"s3://bucket/{rel_path}"


class BrokenNotifier(FakeNotifier):
    async def send_final(self, mail: Any) -> bool:
        raise RuntimeError("template missing")


async def test_every_step_is_isolated(workspace: Path) -> None:
    order: list[str] = []
    snapshot = Snapshot.take(workspace)
    edit(workspace)

    def hook() -> None:
        raise RuntimeError("checkpoint failed")

    pod = OrderedPod(order=order, deleted=False)
    report = await cleanup(
        state=state_for(), hooks=HookSettings(on_reap=hook), snapshot=snapshot,
        store=BrokenStore(), ide=FakeIde(order, fails=True), pod=pod,
        notifier=BrokenNotifier(), clock=lambda: NOW,
    )

    assert order == ["ide", "delete"]
    assert report.edits_url is None
    assert not (report.hook_ran or report.ide_stopped or report.email_sent or report.pod_deleted)
    problems = "\n".join(report.problems)
    for expected in ("on_reap", "checkpoint failed", "saving the edits", "read-only bucket",
                     "stopping the IDE", "final email", "deleting the pod"):
        assert expected in problems
    assert len(report.problems) == 5


async def test_final_email_says_when_edits_were_not_saved() -> None:
    notifier = FakeNotifier()
    report = await cleanup(
        state=state_for(), hooks=HookSettings(), snapshot=None, store=None, ide=None, pod=None,
        notifier=notifier, clock=lambda: NOW, hostname="laptop",
    )
    [mail] = notifier.finals
    assert mail.edits_url is None and mail.pod == "laptop"
    assert report.problems == ["saving the edits: no workspace snapshot or no store"]
    assert not report.pod_deleted


async def test_large_files_are_listed_not_copied(
    workspace: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edits, "MAX_EDIT_FILE_BYTES", 100)
    snapshot = Snapshot.take(workspace)
    (workspace / "model.bin").write_bytes(b"\0" * 1000)
    report = await cleanup(
        state=state_for(), hooks=HookSettings(), snapshot=snapshot, store=store, ide=None,
        pod=None, notifier=None, clock=lambda: NOW,
    )
    assert report.skipped == ["model.bin"]
    assert report.edits_url is not None
    saved = Path(report.edits_url)
    assert not (saved / "files" / "model.bin").exists()
    assert json.loads((saved / "manifest.json").read_text())["too_large"] == ["model.bin"]


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("train.fit", "edits/train.fit/20231114T221320Z"),
        ("mod.<locals>.f", "edits/mod._locals_.f-0c58c33e/20231114T221320Z"),
        ("mod.f.<locals>", "edits/mod.f._locals_-057b4f43/20231114T221320Z"),
        ("../../etc", "edits/_.._etc-f470a0ab/20231114T221320Z"),
        ("", "edits/_-1271cf25/20231114T221320Z"),
    ],
)
def test_edits_folder(task: str, expected: str) -> None:
    assert edits_folder(task, NOW) == expected
