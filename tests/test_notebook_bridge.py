"""The ``podcode`` Jupyter kernel (the bridge JupyterLab starts), driven by jupyter_client
as JupyterLab drives it, against a real control API serving a failed frame: a cell's
output, value and exception come back as Jupyter messages, an interrupt of a cell blocked
in native code says so in that cell, and a cell sent while the task is not waiting is
refused with the session's reason. And the JupyterLab server's set-up: its token only in
a private file, and a session without JupyterLab that says what to install."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from interactive.base.files import write_json
from interactive.base.phases import Phase
from interactive.base.settings import EditorSettings
from interactive.session.ide import start_ide
from interactive.session.notebook import jupyterlab
from interactive.session.notebook.jupyterlab import KERNEL_NAME, command_line, kernel_spec, prepare
from tests.cli_fixture import served_api
from tests.test_notebook_routes import Host, _failure

manager = pytest.importorskip("jupyter_client.manager")
kernelspec = pytest.importorskip("jupyter_client.kernelspec")
pytest.importorskip("ipykernel")


async def _run(client: Any, code: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The reply to ``code`` and the iopub messages of its run (type, content)."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def hook(message: dict[str, Any]) -> None:
        if message["msg_type"] not in ("status", "execute_input"):
            seen.append((message["msg_type"], message["content"]))

    reply = await client.execute_interactive(code, output_hook=hook, timeout=60)
    return reply["content"], seen


async def test_cells_interrupts_and_refusals_as_jupyter_messages(tmp_path: Path) -> None:
    host, failure = Host(tmp_path), _failure()
    async with served_api(host, failure=lambda: failure) as (_, url):
        session_file = tmp_path / "session.json"
        write_json(session_file, {"control_url": url, "token": "s3cret"}, mode=0o600)
        kernels = tmp_path / "kernels" / KERNEL_NAME
        kernels.mkdir(parents=True)
        (kernels / "kernel.json").write_text(json.dumps(kernel_spec(session_file, "frame")))
        specs = kernelspec.KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
        kernel = manager.AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)
        await kernel.start_kernel()
        client = kernel.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            reply, seen = await _run(client, 'print("total is", total)\ntotal * 2')
            assert reply["status"] == "ok"
            assert seen == [("stream", {"name": "stdout", "text": "total is 12\n"}),
                            ("display_data", {"data": {"text/plain": "24"}, "metadata": {}})]

            reply, seen = await _run(client, "rows[5]")  # the frame's own list
            assert reply["status"] == "error" and reply["ename"] == "IndexError"
            [(kind, error)] = seen
            assert kind == "error" and "rows[5]" in "\n".join(error["traceback"])

            running = asyncio.ensure_future(_run(client, "import time\ntime.sleep(2)\n'slept'"))
            await asyncio.sleep(0.5)
            await kernel.interrupt_kernel()
            reply, seen = await running
            said = "".join(content.get("text", "") for _, content in seen)
            assert "blocked in native code" in said, seen
            assert reply["ename"] == "KeyboardInterrupt"  # once the call returned

            host.state.set(state=Phase.RESUMING)
            reply, seen = await _run(client, "1")
            assert reply["status"] == "error" and "resuming" in reply["evalue"], reply
        finally:
            client.stop_channels()
            await kernel.shutdown_kernel(now=True)


def test_the_servers_token_is_in_a_private_file_never_in_its_command_line(
    tmp_path: Path
) -> None:
    environ = prepare(tmp_path / "jupyter", tmp_path / "runtime", password="pa55word",
                      session_file=tmp_path / "session.json", label="podcode: job")
    config = Path(environ["JUPYTER_CONFIG_DIR"]) / "jupyter_server_config.json"
    assert json.loads(config.read_text()) == {"IdentityProvider": {"token": "pa55word"}}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert "pa55word" not in " ".join([*command_line(
        root=tmp_path, bind="127.0.0.1", port=8888, opens="nb.ipynb"), *environ.values()])
    spec = Path(environ["JUPYTER_DATA_DIR"]) / "kernels" / KERNEL_NAME / "kernel.json"
    assert json.loads(spec.read_text())["display_name"] == "podcode: job"


async def test_without_jupyterlab_the_session_goes_on_and_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jupyterlab, "available", lambda: False)
    notes: list[str] = []
    ide = await start_ide(EditorSettings(ide="jupyter"), workspace=tmp_path, home=tmp_path,
                          bind="127.0.0.1", port=0, password="pa55word", note=notes.append,
                          session="s1", task="job.py:train")
    assert ide is None
    [note] = notes
    assert "no IDE (JupyterLab)" in note and "pip install 'podcode[jupyter]'" in note
