"""The ``podcode`` Jupyter kernel: JupyterLab's cells run in the failed frame.

A small kernel process that JupyterLab starts from the session's kernel spec
(:mod:`.jupyterlab`); it imports ipykernel, the standard library and podcode's one
control-API client (:mod:`interactive.base.control_client`), nothing of the session. It
holds no namespace of its own: each cell goes to the session's
``POST /api/notebook/execute`` (loopback, the session's bearer token, read from the
session's ``0600`` companion file), runs there on the frame kernel's thread in the
task's process, and its outputs come back as Jupyter messages: what it prints as it
prints it, then its rich displays and traceback. An interrupt request is
``POST /api/notebook/interrupt``. So JupyterLab and VS Code's notebook see one namespace:
the failed frame's.

A cell sent as the kernel starts, before any client listens on its output channel
(IOPub, a ZeroMQ publisher: what is published before a subscriber joined is lost), waits
until one does (at most :data:`LISTENER_WAIT_SECONDS`): its output would be lost
otherwise, and the cell would look as if it never ran. ipykernel's publisher hears each
subscription (it answers with ``iopub_welcome``); :class:`HeardIOPub` tells the kernel.

    python -m interactive.doors.notebook.bridge --session-file FILE -f CONNECTION_FILE
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ipykernel import kernelapp
from ipykernel.iostream import IOPubThread
from ipykernel.kernelapp import IPKernelApp
from ipykernel.kernelbase import Kernel

from interactive.base import routes
from interactive.base.control_client import ControlClient, ControlError, ControlUnreachable

EXECUTE_TIMEOUT_SECONDS = 24 * 3600.0
"""A cell may run as long as the session waits; an interrupt ends it sooner."""

INTERRUPT_RETRY_SECONDS, INTERRUPT_ATTEMPTS = 0.1, 30
"""An interrupt that finds no cell running while one is in flight is sent again (the
cell's request may not have reached the task yet), this often, this many times."""

LISTENER_WAIT_SECONDS = 30.0
"""How long a cell waits for a client to listen on the kernel's output channel; then it
runs all the same (its reply still says how it ended)."""

LISTENING = threading.Event()
"""Set once a client subscribed to the kernel's output channel."""

NO_LISTENER = ("no client listened on the kernel's output channel within "
               f"{LISTENER_WAIT_SECONDS:g} s: the cell ran, but what it showed may be lost")


class HeardIOPub(IOPubThread):
    """ipykernel's output channel, which also sets :data:`LISTENING` at a subscription."""

    def _handle_subscription(self, frames: Any) -> None:
        super()._handle_subscription(frames)  # type: ignore[no-untyped-call]
        if any(bytes(frame)[:1] == b"\x01" for frame in frames):
            LISTENING.set()


NATIVE = ("podcode: the cell is blocked in native code (a C call such as time.sleep or a "
          "blocking read); it stops when that call returns to Python\n")


def endpoint(session_file: Path) -> tuple[str, str]:
    """The control URL and token the session wrote for its IDE."""
    data = json.loads(session_file.read_text())
    return str(data["control_url"]).rstrip("/"), str(data["token"])


def post(session_file: Path, path: str, body: dict[str, Any], timeout: float,
         printed: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """``POST`` to the session's control API; an error answer as ``{"error": ...}``. With
    ``printed``, a cell's prints are streamed: each is given to it as it comes
    (:mod:`.printed`), and the cell's answer returned."""
    try:
        url, token = endpoint(session_file)
    except (OSError, ValueError, KeyError) as exc:
        return {"error": f"no session serves this kernel now ({session_file}: {exc!r}): its "
                         "task has not failed, or its session has ended"}
    try:
        client = ControlClient(url, token, timeout)
        if printed is not None:
            return client.streamed(path, {**body, "stream": True}, printed)
        return client.call("POST", path, body)
    except ControlUnreachable as exc:
        return {"error": f"the session does not answer ({exc.why}): it has ended or moved"}
    except ControlError as exc:
        return {"error": exc.reason or str(exc)}


def messages(outputs: list[dict[str, Any]], streamed: dict[str, str] | None = None
             ) -> list[tuple[str, dict[str, Any]]]:
    """The session's outputs (:mod:`.outputs`) as Jupyter iopub messages (type, content),
    less what was ``streamed`` already (by stream name: the start of its text)."""
    sent: list[tuple[str, dict[str, Any]]] = []
    for output in outputs:
        kind = output.get("type")
        if kind == "stream":
            name = output.get("name", "stdout")
            text = str(output.get("text", ""))[len((streamed or {}).get(name, "")):]
            if text:
                sent.append(("stream", {"name": name, "text": text}))
        elif kind == "display":
            sent.append(("display_data", {"data": output.get("data", {}), "metadata": {}}))
        elif kind == "error":
            sent.append(("error", _error(output)))
    return sent


def _error(output: dict[str, Any]) -> dict[str, Any]:
    traceback = output.get("traceback") or []
    lines = traceback if isinstance(traceback, list) else str(traceback).splitlines()
    return {"ename": output.get("ename", "Error"), "evalue": output.get("evalue", ""),
            "traceback": [str(line) for line in lines]}


class FrameBridge(Kernel):
    implementation = "podcode"
    implementation_version = "1"
    banner = "podcode: cells run in the failed frame of the task's process"
    language_info = {"name": "python", "mimetype": "text/x-python",
                     "file_extension": ".py", "pygments_lexer": "ipython3",
                     "codemirror_mode": {"name": "ipython", "version": 3}}
    session_file = Path()
    in_flight = 0
    """Cells posted to the session and not answered yet."""
    interrupted_at: Any = None
    """When the last interrupt that found no cell of this kernel running was asked (its
    message's date): a cell asked before it, not started yet, does not run. The interrupt
    comes on the control channel and can overtake the cell's request on the shell one."""

    async def do_execute(self, code: str, silent: bool, store_history: bool = True,
                         user_expressions: Any = None, allow_stdin: bool = False,
                         **_: Any) -> dict[str, Any]:
        if not code.strip():
            return self._ok()
        asked = self.get_parent().get("header", {}).get("date")  # type: ignore[no-untyped-call]
        if asked is not None and self.interrupted_at is not None and asked <= self.interrupted_at:
            error = {"ename": "KeyboardInterrupt", "evalue": "interrupted before it ran",
                     "traceback": ["KeyboardInterrupt: interrupted before it ran"]}
            if not silent:
                self.send_response(self.iopub_socket, "error", error)  # type: ignore[no-untyped-call]
            return {"status": "error", "execution_count": self.execution_count, **error}
        heard = LISTENING.is_set() or await asyncio.to_thread(LISTENING.wait,
                                                             LISTENER_WAIT_SECONDS)
        loop, streamed = asyncio.get_running_loop(), dict[str, str]()

        def show(output: dict[str, Any]) -> None:  # on the loop, in the order printed
            name, text = str(output.get("name", "stdout")), str(output.get("text", ""))
            streamed[name] = streamed.get(name, "") + text
            if not silent:
                self.send_response(self.iopub_socket, "stream",  # type: ignore[no-untyped-call]
                                   {"name": name, "text": text})

        def relay(output: dict[str, Any]) -> None:  # on the request's thread
            loop.call_soon_threadsafe(show, output)

        self.in_flight += 1
        try:
            answer = await asyncio.to_thread(post, self.session_file, routes.NOTEBOOK_EXECUTE,
                                             {"code": code}, EXECUTE_TIMEOUT_SECONDS, relay)
        finally:
            self.in_flight -= 1
        if "error" in answer and "outputs" not in answer:
            answer = {"ok": False, "outputs": [{"type": "error", "ename": "podcode",
                                                "evalue": answer["error"], "traceback": [
                                                    f"podcode: {answer['error']}"]}]}
        count = int(answer.get("execution_count") or self.execution_count)
        sent = messages(answer.get("outputs", []), streamed)
        if not silent:
            for kind, content in sent:
                self.send_response(self.iopub_socket, kind, content)  # type: ignore[no-untyped-call]
        errors = [content for kind, content in sent if kind == "error"]
        if not heard:  # said in the reply, the one message that cannot be lost
            errors.append({"ename": "podcode", "evalue": NO_LISTENER,
                           "traceback": [f"podcode: {NO_LISTENER}"]})
        if errors:
            return {"status": "error", "execution_count": count, **errors[-1]}
        return self._ok()

    def _ok(self) -> dict[str, Any]:
        return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                "user_expressions": {}}

    async def interrupt_request(self, stream: Any, ident: Any, parent: Any) -> None:
        for _ in range(INTERRUPT_ATTEMPTS):
            answer = await asyncio.to_thread(post, self.session_file,
                                             routes.NOTEBOOK_INTERRUPT,
                                             {}, 10.0)
            if answer.get("result") != "idle" or not self.in_flight:
                break
            await asyncio.sleep(INTERRUPT_RETRY_SECONDS)
        if answer.get("result") == "idle" and not self.in_flight:
            self.interrupted_at = parent.get("header", {}).get("date")
        content = {"status": "ok"} if "error" not in answer else {
            "status": "error", "ename": "podcode", "evalue": answer["error"], "traceback": []}
        if answer.get("result") == "native":  # said in the running cell's output
            self.send_response(self.iopub_socket, "stream",  # type: ignore[no-untyped-call]
                               {"name": "stderr", "text": NATIVE}, channel="shell")
        if self.session:
            self.session.send(stream, "interrupt_reply", content, parent, ident=ident)


def main(argv: list[str]) -> None:
    if "--session-file" not in argv[:-1]:
        raise SystemExit("usage: python -m interactive.doors.notebook.bridge "
                         "--session-file FILE -f CONNECTION_FILE")
    at = argv.index("--session-file")
    FrameBridge.session_file = Path(argv[at + 1])
    kernelapp.IOPubThread = HeardIOPub  # type: ignore[attr-defined]  # its app makes IOPub of it
    IPKernelApp.launch_instance(argv=argv[:at] + argv[at + 2:], kernel_class=FrameBridge)


if __name__ == "__main__":
    main(sys.argv[1:])
