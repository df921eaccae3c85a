"""A resumed task's fix: printed with how to apply it, and mailed to the owner once the
monitor chose who mails (no session needed: the delivery takes what it needs)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from interactive.session.fix import deliver_fix
from interactive.storage.workspace import Snapshot


class Mailer:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.done = threading.Event()

    async def send(self, rendered: Any) -> bool:
        self.sent.append(rendered)
        self.done.set()
        return True


def edited(tmp_path: Path) -> Snapshot:
    (tmp_path / "job.py").write_text("x = 1 // 0\n")
    snapshot = Snapshot.take(tmp_path)
    (tmp_path / "job.py").write_text("x = 1 // 1\n")
    return snapshot


def test_the_fix_is_printed_and_mailed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mailer, waited = Mailer(), []

    def notifier(timeout: float) -> Mailer:
        waited.append(timeout)
        return mailer

    deliver_fix("jobs.train", "store/edits/jobs.train/1", edited(tmp_path), notifier=notifier,
                pod=None, clock=lambda: 1000.0)
    out = capsys.readouterr().out
    assert "store/edits/jobs.train/1" in out and "podcode edits jobs.train | git apply" in out
    assert mailer.done.wait(20) and waited and waited[0] > 0
    [mail] = mailer.sent
    assert "jobs.train" in mail.subject
    assert any(b"1 // 1" in content for _, content in mail.attachments) or "1 // 1" in mail.text


def test_nothing_saved_nothing_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[float] = []
    deliver_fix("jobs.train", None, edited(tmp_path), notifier=asked.append, pod=None,
                clock=lambda: 1000.0)
    assert capsys.readouterr().out == "" and asked == []


def test_no_notifier_no_mail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deliver_fix("jobs.train", "store/edits/jobs.train/1", edited(tmp_path),
                notifier=lambda timeout: None, pod=None, clock=lambda: 1000.0)
    assert "store/edits/jobs.train/1" in capsys.readouterr().out
