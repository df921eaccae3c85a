"""Python language intelligence in the session's code-server: how soon basedpyright
answers, and what it costs a session that nobody uses.

The real language server (basedpyright's ``langserver.index.js``, installed with the
``[lsp]`` extra: :func:`interactive.doors.language.server_module`) runs on
code-server's own Node.js (the node that code-server's launcher runs, found beside the
code-server that ``server_bootstrap`` locates; nothing is installed here: without one,
the ``node`` on PATH, and the entries say which). The benchmark drives it as the
companion's language client does, over the Language Server Protocol on stdio
(``--stdio``, JSON-RPC with ``Content-Length`` framing, a small client written here):
``initialize`` (rootUri = a fresh workspace; the client announces diagnostics, hover,
definition and ``workspace/configuration``), ``workspace/configuration`` answered with
the settings the session writes (``vscode_config/templates/settings.json.j2``:
``python.pythonPath`` = this interpreter, ``basedpyright.analysis.typeCheckingMode`` =
standard, ``diagnosticMode`` = openFilesOnly, ``autoSearchPaths``,
``useLibraryCodeForTypes``), ``initialized`` and ``workspace/didChangeConfiguration``,
then ``textDocument/didOpen`` of ``job.py``, which imports ``scale`` from the
workspace's ``helpers.py`` and calls it with one argument too many.

``language_server_ready_s``: from spawning the server to the first
``textDocument/publishDiagnostics`` for ``job.py`` that holds the wrong call's error
(its message says "Expected 1 positional argument"). Baseline, in the same run: the
time from the same spawn to the server's ``initialize`` response; ``node_start_s`` is a
bare ``node -e ""`` with the same node, interleaved with the runs. Goal, absolute: 5 s.
The entry also says whether ``textDocument/hover`` on ``scale`` (its signature) and
``textDocument/definition`` (into ``helpers.py``) answer, asked after the idle window.

``language_server_rss_mib``: the resident memory of the server's process tree (node and
any process it started) at the end of the idle window: nothing asked for 2 s after the
diagnostic arrives, then ``PODCODE_BENCH_LANGUAGE_IDLE_SECONDS`` (20) more;
``ready_rss_mib`` is the same when the diagnostic arrives. Goal, absolute: 300 MiB.

``language_server_idle_cpu_s_per_min``: CPU seconds per minute of the same tree over
the idle window (the 20 s, ``job.py`` open). What the server still does in the 2 s
before it, once, is ``settle_cpu_s``. Goal, absolute: 0.05 (it counts within a waiting
session's idle budget; CPU times count in 10 ms ticks: 0.03 cpu s/min over 20 s). No
baseline: a session without the language server has no such process.

Each run is a fresh server and workspace; the server is stopped with ``shutdown`` and
``exit`` (terminated if it does not go). Run: ``python benchmarks/bench_language.py``
(needs basedpyright: the ``[lsp]`` extra).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import queue
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import usage  # noqa: E402
from benchmarks.harness import RUNS, figure, interleaved, seconds  # noqa: E402
from interactive.doors.language import server_module  # noqa: E402
from server_bootstrap.config import CodeServerConfig  # noqa: E402
from server_bootstrap.errors import BootstrapError  # noqa: E402
from server_bootstrap.locate import find_code_server  # noqa: E402

IDLE_SECONDS = float(os.environ.get("PODCODE_BENCH_LANGUAGE_IDLE_SECONDS", "20"))
SETTLE_SECONDS = 2.0
"""After the diagnostic: what the server finishes then (the configuration's second pass)
is counted apart (``settle_cpu_s``), not as idle cost."""
READY_TIMEOUT = 90.0
ANSWER_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
WRONG_CALL = re.compile(r"Expected 1 positional argument")
MIB = 1024 * 1024

SETTINGS: dict[str, Any] = {
    "python": {"pythonPath": sys.executable},
    "basedpyright": {"analysis": {
        "typeCheckingMode": "standard",
        "diagnosticMode": "openFilesOnly",
        "autoSearchPaths": True,
        "useLibraryCodeForTypes": True,
    }},
}
"""What the session's workspace settings give the server (settings.json.j2), nested as
the editor answers ``workspace/configuration``."""

HELPERS = '''\
def scale(value: int) -> int:
    """Double a value for the report."""
    return value * 2
'''
JOB = """\
from helpers import scale


def report(values: list[int]) -> int:
    total = 0
    for value in values:
        total += scale(value)
    return total + scale(1, 2)
"""
HOVER_LINE = "        total += scale(value)"


# -- code-server's Node.js -------------------------------------------------------------


def _launcher_node(launcher: Path, root: Path) -> Path | None:
    """The node named by podcode's npm launcher (``node=...``, ``server_bootstrap.npm``)."""
    try:
        text = launcher.read_text() if launcher.stat().st_size < 65536 else ""
    except (OSError, UnicodeDecodeError):
        return None
    match = re.search(r"^node=(.+)$", text, re.MULTILINE)
    if match is None:
        return None
    try:
        words = shlex.split(match.group(1))
    except ValueError:
        return None
    if not words:
        return None
    named = words[0].replace("$here", str(root))
    found = named if os.path.isabs(named) else shutil.which(named)
    return Path(found) if found else None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def code_server_node() -> tuple[str, str]:
    """The node code-server runs on, and how it was found (relative to the install)."""
    try:
        binary = find_code_server(CodeServerConfig.from_environ())
    except BootstrapError:
        binary = None
    if binary is not None:
        launcher = binary.resolve()
        root = launcher.parent.parent
        candidates = [_launcher_node(launcher, root),
                      root / "lib" / "node",  # release tarball, distribution packages
                      *sorted((root / "node" / "node_modules").glob("node-linux-*/bin/node"))]
        for node in candidates:
            if node is not None and _executable(node):
                try:
                    where = f"<code-server>/{node.relative_to(root)}"
                except ValueError:
                    where = f"the node named by code-server's launcher ({node.name})"
                return str(node), f"code-server's own Node.js: {where}"
    on_path = shutil.which("node")
    if on_path is None:
        raise RuntimeError("bench_language needs Node.js: code-server's own (podcode install) "
                           "or node on PATH")
    return on_path, "node on PATH (code-server's own Node.js was not found)"


def node_version(node: str) -> str:
    done = subprocess.run([node, "--version"], capture_output=True, text=True, check=True,
                          timeout=30)
    return done.stdout.strip()


# -- a small LSP client -----------------------------------------------------------------


def _section(name: str | None) -> Any:
    """``workspace/configuration``'s answer for one section, as the editor gives it."""
    if not name:
        return SETTINGS
    value: Any = SETTINGS
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class Client:
    """One language server on stdio: requests, notifications, and the server's own
    requests answered (configuration from :data:`SETTINGS`, anything else with null)."""

    def __init__(self, argv: list[str], cwd: Path, log: IO[bytes]) -> None:
        self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log)
        self.inbox: queue.Queue[tuple[float, dict[str, Any]] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.ids = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        try:
            while True:
                length = None
                while True:
                    line = stream.readline()
                    if not line:
                        return
                    line = line.strip()
                    if not line:
                        break
                    name, _, value = line.decode("ascii").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if length is None:
                    continue
                message = json.loads(stream.read(length))
                if "method" in message and "id" in message:
                    self._answer(message)
                else:
                    self.inbox.put((time.perf_counter(), message))
        except (OSError, ValueError):
            return
        finally:
            self.inbox.put(None)

    def _answer(self, request: dict[str, Any]) -> None:
        result: Any = None
        if request["method"] == "workspace/configuration":
            result = [_section(item.get("section"))
                      for item in request.get("params", {}).get("items", [])]
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        stdin = self.proc.stdin
        assert stdin is not None
        with self.lock:
            stdin.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            stdin.flush()

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any) -> int:
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        return self.ids

    def wait(self, match: Callable[[dict[str, Any]], bool], timeout: float,
             what: str) -> tuple[float, dict[str, Any]]:
        """The first message from now on that ``match``es, and when it arrived."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                item = self.inbox.get(timeout=max(left, 0.0)) if left > 0 else None
            except queue.Empty:
                item = None
            if item is None:
                raise TimeoutError(f"no {what} from the language server in {timeout:g} s "
                                   f"(running: {self.proc.poll() is None})")
            self.seen.append(item[1])
            if match(item[1]):
                return item

    def call(self, method: str, params: Any, timeout: float = ANSWER_TIMEOUT) -> Any:
        number = self.request(method, params)
        _, answer = self.wait(lambda m: m.get("id") == number and "method" not in m,
                              timeout, f"answer to {method}")
        if "error" in answer:
            raise RuntimeError(f"{method} failed: {answer['error']}")
        return answer.get("result")

    def close(self) -> None:
        """``shutdown`` and ``exit``; terminated, then killed, with any process it
        started, when it does not go."""
        try:
            started = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            started = []
        if self.proc.poll() is None:
            try:
                self.call("shutdown", None, timeout=STOP_TIMEOUT)
                self.notify("exit", None)
            except (OSError, TimeoutError, RuntimeError):
                pass
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        for child in started:  # psutil checks that each pid is still that process
            with contextlib.suppress(psutil.Error):
                child.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.reader.join(STOP_TIMEOUT)


# -- one run ----------------------------------------------------------------------------


def _wrong_call(uri: str) -> Callable[[dict[str, Any]], bool]:
    def match(message: dict[str, Any]) -> bool:
        if message.get("method") != "textDocument/publishDiagnostics":
            return False
        params = message.get("params", {})
        return params.get("uri") == uri and any(
            WRONG_CALL.search(d.get("message", "")) for d in params.get("diagnostics", []))
    return match


def _hover_text(result: Any) -> str:
    contents = (result or {}).get("contents")
    if isinstance(contents, dict):
        return str(contents.get("value", ""))
    if isinstance(contents, list):
        return "\n".join(c if isinstance(c, str) else str(c.get("value", "")) for c in contents)
    return str(contents or "")


def one_server(node: str, server: str, idle_seconds: float) -> dict[str, Any]:
    """Spawn the server on a fresh workspace, open ``job.py``, wait for the wrong call's
    diagnostic, then idle; what was measured."""
    with tempfile.TemporaryDirectory(prefix="podcode-bench-language-") as scratch:
        root = Path(scratch)
        workspace = root / "workspace"
        workspace.mkdir()
        (workspace / "helpers.py").write_text(HELPERS)
        (workspace / "job.py").write_text(JOB)
        job_uri = (workspace / "job.py").as_uri()
        with (root / "server.log").open("wb") as log:
            started = time.perf_counter()
            client = Client([node, server, "--stdio"], workspace, log)
            try:
                return _drive(client, workspace, job_uri, started, idle_seconds)
            except (TimeoutError, RuntimeError) as exc:
                raise RuntimeError(
                    f"{exc}\nlast messages: {json.dumps(client.seen[-5:])[-3000:]}\n"
                    f"server's stderr: {(root / 'server.log').read_text()[-2000:]}") from exc
            finally:
                client.close()


def _drive(client: Client, workspace: Path, job_uri: str, started: float,
           idle_seconds: float) -> dict[str, Any]:
    number = client.request("initialize", {
        "processId": os.getpid(),
        "clientInfo": {"name": "podcode-bench"},
        "rootUri": workspace.as_uri(),
        "rootPath": str(workspace),
        "workspaceFolders": [{"uri": workspace.as_uri(), "name": workspace.name}],
        "capabilities": {
            "workspace": {"configuration": True, "workspaceFolders": True,
                          "didChangeConfiguration": {"dynamicRegistration": True}},
            "textDocument": {
                "synchronization": {"dynamicRegistration": True},
                "publishDiagnostics": {"relatedInformation": True, "versionSupport": True},
                "hover": {"contentFormat": ["markdown", "plaintext"]},
                "definition": {"linkSupport": True},
            },
            "window": {"workDoneProgress": True},
        },
    })
    answered, answer = client.wait(lambda m: m.get("id") == number and "method" not in m,
                                   READY_TIMEOUT, "initialize response")
    if "error" in answer:
        raise RuntimeError(f"initialize failed: {answer['error']}")
    client.notify("initialized", {})
    client.notify("workspace/didChangeConfiguration", {"settings": None})
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": job_uri, "languageId": "python", "version": 1, "text": JOB}})
    ready_at, diagnostics = client.wait(_wrong_call(job_uri), READY_TIMEOUT,
                                        "diagnostic of the wrong call in job.py")
    message = next(d["message"] for d in diagnostics["params"]["diagnostics"]
                   if WRONG_CALL.search(d.get("message", "")))
    pid = client.proc.pid
    tree = usage.tree(pid)
    ready_rss = usage.rss_bytes(tree)
    at_ready = usage.cpu_seconds(tree, children=True)
    time.sleep(SETTLE_SECONDS)
    tree = usage.tree(pid)
    before = usage.cpu_seconds(tree, children=True)
    window = time.monotonic()
    time.sleep(idle_seconds)
    tree = usage.tree(pid)
    after = usage.cpu_seconds(tree, children=True)
    elapsed = time.monotonic() - window
    idle_rss = usage.rss_bytes(tree)
    used = sum(cpu - before.get(process, 0.0) for process, cpu in after.items())

    lines = JOB.splitlines()
    line = lines.index(HOVER_LINE)
    position = {"line": line, "character": lines[line].index("scale") + 1}
    document = {"uri": job_uri}
    hover = _hover_text(client.call("textDocument/hover",
                                    {"textDocument": document, "position": position}))
    found = client.call("textDocument/definition",
                        {"textDocument": document, "position": position}) or []
    targets = [t.get("targetUri") or t.get("uri") or ""
               for t in (found if isinstance(found, list) else [found])]
    return {
        "initialize_s": answered - started,
        "ready_s": ready_at - started,
        "message": message,
        "ready_rss": ready_rss,
        "idle_rss": idle_rss,
        "idle_cpu_per_min": used * 60.0 / elapsed,
        "settle_cpu_s": sum(cpu - at_ready.get(process, 0.0) for process, cpu in before.items()),
        "processes": len(tree),
        "hover": "(value: int) -> int" in hover,
        "definition": any(t.endswith("/helpers.py") for t in targets),
    }


def run(runs: int = RUNS, idle_seconds: float = IDLE_SECONDS) -> list[dict[str, Any]]:
    module = server_module()
    if module is None:
        raise RuntimeError("bench_language needs basedpyright: pip install 'podcode[lsp]'")
    node, which = code_server_node()
    version = node_version(node)
    node_is = f"{which} ({version})"
    server = f"basedpyright {importlib.metadata.version('basedpyright')}"
    samples: list[dict[str, Any]] = []

    def ours() -> float:
        samples.append(one_server(node, str(module), idle_seconds))
        return float(samples[-1]["ready_s"])

    _, bare = interleaved(ours, lambda: seconds(lambda: subprocess.run(
        [node, "-e", ""], check=True, timeout=60)), runs=runs)
    ready_rss = [s["ready_rss"] / MIB for s in samples]
    common = {"node": node_is, "server": server,
              "processes": max(s["processes"] for s in samples)}
    return [
        figure("language_server_ready_s", [s["ready_s"] for s in samples], unit="s",
               baseline=[s["initialize_s"] for s in samples], digits=3,
               goal="<= 5 (absolute: spawn to the wrong call's diagnostic)",
               baseline_is="the same spawn to the server's initialize response, same run",
               node_start_s=round(statistics.median(bare), 3),
               node_start_is='a bare node -e "" with the same node, interleaved with the runs',
               diagnostic=samples[0]["message"],
               hover=all(s["hover"] for s in samples),
               definition=all(s["definition"] for s in samples),
               measures="spawn node langserver.index.js --stdio, initialize, the session's "
                        "settings over workspace/configuration, didOpen job.py: to the first "
                        "publishDiagnostics with the wrong call's error (scale(1, 2))",
               **common),
        figure("language_server_rss_mib", [s["idle_rss"] / MIB for s in samples],
               unit="MiB", goal="<= 300 (absolute)", digits=1,
               ready_rss_mib=round(statistics.median(ready_rss), 1),
               ready_rss_mib_min=round(min(ready_rss), 1),
               ready_rss_mib_max=round(max(ready_rss), 1),
               measures="resident memory of the server's process tree after "
                        f"{SETTLE_SECONDS:g} + {idle_seconds:g} s idle once ready "
                        "(ready_rss_mib: when the diagnostic arrives)",
               baseline_is="none: an absolute goal", **common),
        figure("language_server_idle_cpu_s_per_min", [s["idle_cpu_per_min"] for s in samples],
               unit="cpu s/min", goal="<= 0.05 (absolute: within a waiting session's idle "
                                      "budget)", digits=3,
               window=f"{idle_seconds:g} s, from {SETTLE_SECONDS:g} s after the "
                      "diagnostic's arrival",
               resolution=f"{0.01 * 60 / idle_seconds:.3f} cpu s/min (CPU times count in "
                          "10 ms ticks)",
               settle_cpu_s=round(statistics.median(s["settle_cpu_s"] for s in samples), 3),
               settle_cpu_is=f"CPU seconds of the tree in the {SETTLE_SECONDS:g} s between "
                             "the diagnostic and the window (median), once per start",
               measures="CPU seconds per minute of the server's process tree, idle after "
                        "the diagnostic (job.py open, nothing asked)",
               baseline_is="none: an absolute goal", **common),
    ]


if __name__ == "__main__":
    for entry in run():
        print(json.dumps(entry))
