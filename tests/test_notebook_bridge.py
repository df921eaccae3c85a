"""The ``podcode`` Jupyter kernel (the bridge JupyterLab starts), driven by jupyter_client
as JupyterLab drives it, against a real control API serving a failed frame: a cell's
output, value and exception come back as Jupyter messages, an interrupt of a cell blocked
in native code says so in that cell, and a cell sent while the task is not waiting is
refused with the session's reason. And the JupyterLab server's set-up: its token only in
a private file, a session without JupyterLab that says what to install, and under
torchrun a kernel for each local rank, in that rank's frame."""

from __future__ import annotations

import asyncio
import contextlib
import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from interactive.base.files import write_json
from interactive.base.phases import Phase
from interactive.base.settings import EditorSettings
from interactive.doors.ide import start_ide
from interactive.doors.notebook import jupyterlab
from interactive.doors.notebook.jupyterlab import KERNEL_NAME, command_line, kernel_spec, prepare
from tests import notebook_fixture
from tests.cli_fixture import served_api
from tests.notebook_fixture import Host, failure_of_failing
from tests.torchrun_job import Torchrun, copy_example

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


@contextlib.asynccontextmanager
async def running_kernel(kernels: Path, name: str) -> AsyncIterator[tuple[Any, Any]]:
    """The kernel ``name`` of the specs in ``kernels``, started as JupyterLab starts it, and
    a client ready to talk to it; shut down at the end."""
    specs = kernelspec.KernelSpecManager(kernel_dirs=[str(kernels)])
    kernel = manager.AsyncKernelManager(kernel_name=name, kernel_spec_manager=specs)
    await kernel.start_kernel()
    client = kernel.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        yield kernel, client
    finally:
        client.stop_channels()
        await kernel.shutdown_kernel(now=True)


def kernel_dir(tmp_path: Path, url: str) -> Path:
    """A kernels folder whose podcode kernel reaches the control API at ``url``."""
    session_file = tmp_path / "session.json"
    write_json(session_file, {"control_url": url, "token": "s3cret"}, mode=0o600)
    kernels = tmp_path / "kernels" / KERNEL_NAME
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps(kernel_spec(session_file, "frame")))
    return tmp_path / "kernels"


async def test_cells_interrupts_and_refusals_as_jupyter_messages(tmp_path: Path) -> None:
    host, failure = Host(tmp_path), failure_of_failing()
    async with served_api(host, failure=lambda: failure) as (_, url):
        kernel_dir(tmp_path, url)
        async with running_kernel(tmp_path / "kernels", KERNEL_NAME) as (kernel, client):
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

            # Prints come as they happen: the cell goes on once the client has seen the first.
            notebook_fixture.GATE.clear()

            shown: list[tuple[str, Any]] = []

            def first_seen(message: dict[str, Any]) -> None:
                content = message["content"]
                if message["msg_type"] in ("stream", "display_data"):
                    shown.append((message["msg_type"], content.get("text") or content["data"]))
                if content.get("text") == "first\n":
                    notebook_fixture.GATE.set()

            reply = await client.execute_interactive(
                "import tests.notebook_fixture as gate\nprint('first')\n"
                "print('second', gate.GATE.wait(20))\n'done'", output_hook=first_seen, timeout=60)
            assert reply["content"]["status"] == "ok"
            assert shown == [("stream", "first\n"), ("stream", "second True\n"),
                             ("display_data", {"text/plain": "'done'"})]

            # An interrupt that overtakes a cell asked before it (the control channel is not
            # the shell's): that cell does not run; the next one does.
            early = client.session.msg("execute_request", {
                "code": "'ran'", "silent": False, "store_history": True,
                "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
            client.control_channel.send(client.session.msg("interrupt_request", {}))
            await client.get_control_msg(timeout=30)
            client.shell_channel.send(early)
            replied = await client.get_shell_msg(timeout=30)
            assert replied["content"]["evalue"] == "interrupted before it ran", replied
            reply, seen = await _run(client, "'runs'")
            assert reply["status"] == "ok" and seen[-1][1]["data"]["text/plain"] == "'runs'"

            # Asked at once, before the cell runs in the task: it is interrupted all the same.
            running = asyncio.ensure_future(_run(client, "while True: pass"))
            await kernel.interrupt_kernel()
            reply, _ = await running
            assert reply["ename"] == "KeyboardInterrupt", reply

            host.state.set(state=Phase.RESUMING)
            reply, seen = await _run(client, "1")
            assert reply["status"] == "error" and "resuming" in reply["evalue"], reply


async def test_a_cell_sent_as_the_kernel_starts_runs_and_shows_its_output(
    tmp_path: Path
) -> None:
    """A cell sent before the client could subscribe to the kernel's output channel (no
    ``wait_for_ready``, as a cell typed while JupyterLab connects): its output is not lost
    to ZeroMQ's late subscriber."""
    host, failure = Host(tmp_path), failure_of_failing()
    async with served_api(host, failure=lambda: failure) as (_, url):
        kernel_dir(tmp_path, url)
        specs = kernelspec.KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
        kernel = manager.AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)
        await kernel.start_kernel()
        client = kernel.client()
        client.start_channels()
        try:
            reply, seen = await _run(client, 'print("early", total)\ntotal')
        finally:
            client.stop_channels()
            await kernel.shutdown_kernel(now=True)
        assert reply["status"] == "ok", reply
        assert seen == [("stream", {"name": "stdout", "text": "early 12\n"}),
                        ("display_data", {"data": {"text/plain": "12"}, "metadata": {}})]


def test_the_servers_token_is_in_a_private_file_never_in_its_command_line(
    tmp_path: Path
) -> None:
    kernels = {KERNEL_NAME: kernel_spec(tmp_path / "session.json", "podcode: job")}
    environ = prepare(tmp_path / "jupyter", tmp_path / "runtime", password="pa55word",
                      kernels=kernels)
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


@pytest.mark.slow
async def test_each_local_rank_has_a_kernel_in_its_own_failed_frame(
    tmp_path: Path, podcode_home: Path
) -> None:
    """torchrun, two ranks, ``ide="jupyter"``: the pod's JupyterLab (the leader's) offers a
    kernel per local rank, and each one's cells run in that rank's process and frame."""
    copy_example(tmp_path / "workspace")
    job = Torchrun(tmp_path / "workspace", podcode_home, env={"PODCODE_IDE": "jupyter"})
    try:
        ranks = [job.wait_waiting(0), job.wait_waiting(1)]
        [leader] = [local for local, record in enumerate(ranks) if record.get("leader")]
        [kernels] = (podcode_home / f"rank-{leader}").glob("jupyter*/data/kernels")
        names = {KERNEL_NAME: leader, f"{KERNEL_NAME}-rank-{1 - leader}": 1 - leader}
        assert sorted(path.name for path in kernels.iterdir()) == sorted(names)
        for name, local in names.items():
            async with running_kernel(kernels, name) as (_, client):
                reply, seen = await _run(client, "import os\nos.environ['LOCAL_RANK'], rank")
            assert reply["status"] == "ok", seen
            assert seen[-1][1]["data"]["text/plain"] == f"('{local}', {local})", (name, seen)
    finally:
        job.stop()


@pytest.mark.slow
async def test_a_jupyterlab_that_exits_is_started_again_on_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As code-server is: killed, the server is started again (the session's ``ide`` says
    restarting, then up); stopped, it stays stopped."""
    import os
    import signal

    from server_bootstrap.codeserver import http_status
    from tests.torchrun_job import free_port

    monkeypatch.setattr(jupyterlab, "RESTART_DELAY_SECONDS", 0.0)
    root = tmp_path / "workspace"
    (root / "nb").mkdir(parents=True)
    server = jupyterlab.JupyterLab(
        root=root, notebook=root / "nb" / "n.ipynb", folder=tmp_path / "jupyter",
        bind="127.0.0.1", port=free_port(), password="pa55word",
        kernels={KERNEL_NAME: kernel_spec(tmp_path / "session.json", "podcode: job")},
        marker="podcode-restart-test")
    heard: list[str] = []
    await server.start()
    supervising = asyncio.ensure_future(server.supervise(heard.append))
    try:
        first = server._proc
        assert first is not None
        os.kill(first.pid, signal.SIGKILL)
        while heard[-1:] != ["up"]:
            assert not supervising.done(), supervising
            await asyncio.sleep(0.1)
        assert heard == ["restarting", "up"] and server.restarts == 1
        assert server._proc is not first
        assert await http_status(server.url, "/api") == 200  # the same address
    finally:
        await server.stop()
    await asyncio.wait_for(supervising, 30)  # stopped: it returns


def test_an_answer_that_breaks_off_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """The session's process dies mid-answer: the kernel says so in the cell."""
    from interactive.doors.notebook.bridge import post
    from tests.notebook_fixture import FIRST_PRINT, dying_session

    session_file = tmp_path / "session.json"
    printed: list[dict[str, Any]] = []
    with dying_session() as url:
        write_json(session_file, {"control_url": url, "token": "t"}, mode=0o600)
        answer = post(session_file, "/api/notebook/execute", {"code": "1"}, 30, printed.append)
    assert printed == [FIRST_PRINT]
    # A close reads as the answer's end; a reset, where the system sends one, as no answer.
    assert answer["error"].startswith(("the session's answer ended before the cell's result",
                                       "the session does not answer")), answer


def test_the_kernel_imports_ipykernel_the_standard_library_and_the_one_client() -> None:
    """The bridge runs in JupyterLab's kernel process: nothing of the session comes along,
    and it reaches the session as every other door does."""
    import ast
    import sys

    from interactive.base import control_client
    from interactive.doors.notebook import bridge

    def imported(module: Any) -> set[str]:
        tree = ast.parse(Path(module.__file__).read_text())
        return {name for node in ast.walk(tree) for name in (
            [alias.name for alias in node.names] if isinstance(node, ast.Import)
            else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])}

    ours = {"interactive.base", "interactive.base.control_client", "interactive.base.errors",
            "interactive.base.routes"}
    for module, allowed in ((bridge, {"ipykernel", *ours}), (control_client, ours)):
        foreign = {name for name in imported(module) if name.split(".")[0] not in
                   sys.stdlib_module_names and name not in allowed
                   and name.split(".")[0] not in allowed}
        assert not foreign, (module.__name__, foreign)
