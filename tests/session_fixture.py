"""Run a decorated task in a real child process and drive its session from the test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


class Job:
    """A child Python process running ``job.py`` in its own workspace folder."""

    def __init__(self, workspace: Path, home: Path) -> None:
        self.workspace = workspace
        self.home = home
        self.proc: subprocess.Popen[str] | None = None
        self.log = workspace.parent / f"{workspace.name}.log"

    def write(self, name: str, source: str) -> Path:
        path = self.workspace / name
        path.write_text(textwrap.dedent(source))
        # Edits in a test happen within the file system's timestamp granularity: make them visible.
        stamp = time.time_ns() + 10_000_000
        os.utime(path, ns=(stamp, stamp))
        return path

    def start(
        self,
        script: str = "job.py",
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        wrapper: list[str] | None = None,
    ) -> Job:
        """``python script *args`` (``script="-m"`` for a module), under ``wrapper``."""
        environ = {
            **os.environ,
            "PODCODE_ENABLE": "1",
            "PODCODE_HOME": str(self.home),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        with open(self.log, "w") as handle:
            self.proc = subprocess.Popen(
                [*(wrapper or []), sys.executable, script, *(args or [])],
                cwd=self.workspace,
                env=environ,
                stdout=handle,
                stderr=subprocess.STDOUT,
                text=True,
            )
        return self

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def session(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.home / "session.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def wait_state(
        self, *states: str, attempt: int | None = None, timeout: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.session()
            if (
                record
                and record["state"] in states
                and (attempt is None or record.get("attempt") == attempt)
            ):
                return record
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"job exited ({self.proc.returncode}) before {states}:\n{self.output()}"
                )
            time.sleep(0.05)
        raise AssertionError(
            f"session never reached {states}; last {self.session()}\n{self.output()}"
        )

    def api(
        self, method: str, path: str, body: Any = None, token: str | None = "session"
    ) -> tuple[int, Any]:
        record = self.session()
        assert record is not None
        request = urllib.request.Request(record["control_url"] + path, method=method)
        if token == "session":
            token = record["token"]
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, data, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"job still running:\n{self.output()}") from None

    def stop(self) -> None:
        """SIGTERM first, so that the session stops its code-server; SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture
def job(tmp_path: Path, podcode_home: Path) -> Iterator[Job]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    running = Job(workspace, podcode_home)
    yield running
    running.stop()
