"""Stopping an npm install from another thread (a session that ends while code-server
installs): npm's whole process group ends and nothing half-built is kept. A stand-in npm
that forks a child (as npm runs node-gyp) plays the install."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from interactive.base.identity import is_running
from server_bootstrap.cancel import Cancel, InstallCancelled
from server_bootstrap.config import CodeServerConfig
from server_bootstrap.install import install, install_notice
from server_bootstrap.installs import install_name
from server_bootstrap.npm import run_npm
from tests.waiting import wait_until

NPM = """#!/bin/sh
sleep 600 &
echo $! >> "{pids}"
echo $$ >> "{pids}"
wait
"""


@pytest.fixture
def slow_npm(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "npm").write_text(NPM.format(pids=tmp_path / "pids"))
    (folder / "npm").chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "pids"
    found = [int(p) for p in path.read_text().split()] if path.exists() else []
    return found if len(found) == 2 else []


def test_cancel_ends_npm_and_its_children(slow_npm: dict[str, str], tmp_path: Path) -> None:
    cancel = Cancel()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            run_npm(["install", "code-server"], slow_npm, cancel)
        except BaseException as exc:  # noqa: BLE001 - kept for the assertion
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    started = wait_until(lambda: pids(tmp_path), "npm and its child")
    cancel.cancel()
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(failure[0], InstallCancelled) and "was stopped" in str(failure[0])
    wait_until(lambda: not any(is_running(pid, None) for pid in started), "npm's group to end")


def test_a_cancelled_install_keeps_nothing(slow_npm: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    config = CodeServerConfig(cache=cache, method="npm")
    cancel = Cancel()
    threading.Timer(0.1, lambda: wait_until(lambda: pids(tmp_path)) and cancel.cancel()).start()
    with pytest.raises(InstallCancelled):
        install(config, environ=slow_npm, cancel=cancel)
    assert not list(cache.glob(".tmp-*")) and not (cache / install_name("4.139.1")).exists()
    with pytest.raises(InstallCancelled, match="stopped before it started"):
        install(config, environ=slow_npm, cancel=cancel)  # refused at once, nothing run


def test_the_notice_says_what_how_big_where_and_how_to_avoid_it(tmp_path: Path) -> None:
    notice = install_notice(CodeServerConfig(cache=tmp_path / "c", method="npm"))
    assert f"into {tmp_path / 'c' / install_name('4.139.1')}" in notice
    assert "255 MB" in notice and "podcode install" in notice
    assert "PODCODE_CODE_SERVER_CACHE" in notice and "docs/deploy.md" in notice
    assert "\n" not in notice
    tarball = install_notice(CodeServerConfig(cache=tmp_path, sha256="0" * 64))
    assert "a release tarball" in tarball and "sha256" in tarball
