"""The session's JupyterLab reads nothing of the user's Jupyter set-up and leaves no file
with its token (or its cookie key) behind: a real server, started from a task whose
environment points Jupyter and IPython at a hostile configuration folder (a
``jupyter_server_config.py`` that writes a marker file), never runs that configuration;
once it serves, no file in its folders holds the token; it still asks for the token; and
its stop leaves no process of its tree."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from interactive.doors.notebook import jupyterlab
from interactive.doors.notebook.jupyterlab import (
    KERNEL_NAME,
    isolated_environ,
    kernel_spec,
    remove_secret_files,
)

HOSTILE = """
from pathlib import Path
Path({marker!r}).write_text("ran")
"""


def test_the_servers_environment_drops_every_pointer_to_the_users_setup() -> None:
    task = {"PATH": "/bin", "JUPYTER_CONFIG_PATH": "/u/cfg", "JUPYTER_PATH": "/u/data",
            "JUPYTER_CONFIG_DIR": "/u/.jupyter", "JUPYTER_TOKEN": "t", "IPYTHONDIR": "/u/ip",
            "JUPYTERLAB_DIR": "/u/lab", "XDG_CONFIG_DIRS": "/u/xdg", "HOME": "/u"}
    own = {"JUPYTER_CONFIG_DIR": "/s/config", "IPYTHONDIR": "/s/ipython"}
    env = isolated_environ(task, own, user_site=False)
    assert env == {"PATH": "/bin", "HOME": "/u", "PYTHONNOUSERSITE": "1", **own}
    assert "PYTHONNOUSERSITE" not in isolated_environ(task, own, user_site=True)


def test_the_token_files_the_server_writes_are_removed(tmp_path: Path) -> None:
    (tmp_path / "jpserver-12.json").write_text('{"token": "x"}')
    (tmp_path / "jpserver-12-open.html").write_text("x")
    (tmp_path / "jupyter_cookie_secret").write_text("k")
    (tmp_path / "kernel-abc.json").write_text("{}")  # a kernel's connection: not the token
    assert len(remove_secret_files(tmp_path)) == 3
    assert [path.name for path in tmp_path.iterdir()] == ["kernel-abc.json"]


@pytest.mark.skipif(not jupyterlab.available(), reason="JupyterLab is not installed")
async def test_a_hostile_config_in_the_tasks_environment_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from server_bootstrap.codeserver import http_status
    from tests.torchrun_job import free_port

    marker = tmp_path / "hostile-ran"
    hostile = tmp_path / "hostile"
    for folder in ("config-path", "config-dir", "ipython/profile_default"):
        (hostile / folder).mkdir(parents=True)
    for config in ("config-path/jupyter_server_config.py", "config-path/jupyter_lab_config.py",
                   "config-dir/jupyter_server_config.py",
                   "ipython/profile_default/ipython_config.py"):
        (hostile / config).write_text(HOSTILE.format(marker=str(marker)))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(hostile / "config-path"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(hostile / "config-dir"))
    monkeypatch.setenv("JUPYTER_PATH", str(hostile))
    monkeypatch.setenv("IPYTHONDIR", str(hostile / "ipython"))

    root = tmp_path / "workspace"
    (root / "nb").mkdir(parents=True)
    server = jupyterlab.JupyterLab(
        root=root, notebook=root / "nb" / "n.ipynb", folder=tmp_path / "jupyter",
        bind="127.0.0.1", port=free_port(), password="pa55word-isolated",
        kernels={KERNEL_NAME: kernel_spec(tmp_path / "session.json", "podcode: job")},
        marker="podcode-isolation-test")
    await server.start()
    try:
        assert server._proc is not None and server._runtime is not None
        pid = server._proc.pid
        assert not marker.exists()
        assert await http_status(server.url, "/api/status") == 403  # its own token applies
        holding = [path for folder in (tmp_path / "jupyter", server._runtime)
                   for path in folder.rglob("*") if path.is_file()
                   and b"pa55word-isolated" in path.read_bytes()]
        assert holding == []
        assert sorted(path.name for path in server._runtime.iterdir()
                      if path.name.startswith(("jpserver", "jupyter_cookie"))) == []
        runtime = server._runtime
    finally:
        await server.stop()
    assert not marker.exists()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not runtime.exists()
    assert os.environ["JUPYTER_CONFIG_PATH"] == str(hostile / "config-path")  # not changed
