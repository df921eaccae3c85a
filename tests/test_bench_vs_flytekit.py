"""The side-by-side benchmark with flytekit stays importable and its local file server keeps
serving (the benchmark itself needs flytekit, code-server and chromium; no figure is
asserted here)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from benchmarks import bench_vs_flytekit as bench
from server_bootstrap.vsix import read_manifest


def test_the_local_server_serves_the_folder_and_counts_bytes(tmp_path: Path) -> None:
    (tmp_path / "code-server.tar.gz").write_bytes(b"x" * 3_000_000)
    with bench.LocalServer(tmp_path) as server:
        url = server.url("code-server.tar.gz")
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.read() == b"x" * 3_000_000
        assert server.take_sent() == 3_000_000
        assert server.take_sent() == 0  # counted once, per pod
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(server.url("nothing-here"), timeout=10)
        assert missing.value.code == 404
        missing.value.close()


def test_both_tasks_are_valid_python_with_their_decorator() -> None:
    for flavour in (bench.PODCODE, bench.FLYTEKIT):
        source = bench.TASK.format(**flavour)
        compile(source, "job.py", "exec")
        assert "@task\n" + flavour["decorator"] in source


def test_the_extension_both_pods_get_is_a_vsix(tmp_path: Path) -> None:
    manifest = read_manifest(bench.bench_vsix(tmp_path))
    assert (manifest.publisher, manifest.name) == ("podcodebench", "bench-hello")
