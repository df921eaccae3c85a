"""Sessions started at the same moment with the same ports: each claims its own.

Ports are claimed (bound and listened on), never probed and released, so the loser of
a race moves to the next port instead of hanging in debugpy or running without an IDE.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.session_fixture import Job

JOB = """
from interactive import vscode

@vscode(ide={ide!r}, port={port}, control_port={control}, debug_port={debug})
def task():
    return 1 / 0

task()
"""


def free_base(span: int = 60) -> int:
    """A base port with ``span`` free ports above it, unlikely to clash with other tests."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + span < 65000:
            return base
    raise RuntimeError("no port range")


def start_together(tmp_path: Path, count: int, ide: str) -> list[Job]:
    base = free_base()
    source = JOB.format(ide=ide, port=base, control=base + 20, debug=base + 40)
    jobs = []
    for index in range(count):
        workspace = tmp_path / f"ws{index}"
        workspace.mkdir()
        job = Job(workspace, tmp_path / f"home{index}")
        job.write("job.py", source)
        jobs.append(job)
    for job in jobs:  # as close together as two Popen calls get
        job.start()
    return jobs


def endpoints(jobs: list[Job], timeout: float) -> list[tuple[str, int, str | None]]:
    records = [job.wait_state("waiting", timeout=timeout) for job in jobs]
    return [(r["control_url"], r["debug"]["port"], r["code_server_url"]) for r in records]


@pytest.mark.parametrize("round_", range(10))
def test_two_sessions_started_together_get_their_own_ports(tmp_path: Path, round_: int) -> None:
    jobs = start_together(tmp_path, 2, "none")
    try:
        seen = endpoints(jobs, timeout=60)
        assert len({control for control, _, _ in seen}) == 2
        assert len({debug for _, debug, _ in seen}) == 2
        for job in jobs:
            assert job.api("POST", "/api/abort")[0] == 202
            assert job.wait_exit() == 1
    finally:
        for job in jobs:
            job.stop()


@pytest.mark.codeserver
def test_two_sessions_with_the_ide_both_serve_one(tmp_path: Path, code_server_binary: Path) -> None:
    jobs = start_together(tmp_path, 2, "code-server")
    try:
        seen = endpoints(jobs, timeout=120)
        urls = [ide for _, _, ide in seen]
        assert all(urls) and len(set(urls)) == 2, urls
        for job in jobs:
            assert job.api("POST", "/api/abort")[0] == 202
            assert job.wait_exit(60) == 1
    finally:
        for job in jobs:
            job.stop()
