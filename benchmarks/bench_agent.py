"""The coding agent's door: ``podcode mcp`` driven by the MCP SDK's own client over stdio,
against a real session (a task that failed in a child process, no IDE).

The task fails with a DataFrame of a million rows and a list of a million items among its
locals. ``run()`` returns:

- ``mcp_describe_failure_ms``: one ``describe_failure`` call, from the client's request
  to its answer (status, frames, the failing frame's locals summarised, bounded).
  Baseline, in the same run: the same three control-API calls made directly with
  :class:`~interactive.base.control_client.ControlClient` (no MCP, no second process).
  Goal: at most 300 ms.
- ``mcp_evaluate_roundtrip_ms``: one ``evaluate`` of ``1 + 1`` in the failing frame.
  Baseline: ``ControlClient.evaluate`` of the same. Goal: at most 100 ms.
- ``mcp_describe_failure_bytes``: the size of that answer (UTF-8). Goal: at most 32 KiB.

Each run is the mean of :data:`CALLS` calls. Run: ``python benchmarks/run.py bench_agent``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from benchmarks.harness import RUNS, figure  # noqa: E402
from interactive.base.control_client import ControlClient  # noqa: E402

CALLS = 5
JOB = textwrap.dedent("""
    import pandas as pd

    from interactive import vscode


    @vscode(ide="none", port=0, control_port=0, debug_port=0)
    def total(df):
        many = list(range(1_000_000))
        return df["prise"].sum() + len(many)


    if __name__ == "__main__":
        n = 1_000_000
        total(pd.DataFrame({"price": [1.5] * n, "qty": list(range(n)), "name": ["a"] * n}))
""")


def _start(folder: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any], Path]:
    workspace, home = folder / "ws", folder / "home"
    workspace.mkdir()
    (workspace / "job.py").write_text(JOB)
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "job.py"], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            record = json.loads((home / "session.json").read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("state") == "waiting":
            return proc, record, home
        if proc.poll() is not None:
            raise RuntimeError("the task ended before its session opened")
        time.sleep(0.1)
    raise RuntimeError("the session did not open within 120 s")


def _direct_describe(client: ControlClient) -> None:
    client.status()
    failure = client.frames()
    client.frame_locals(failure.get("failed_frame") or 0)


async def _measure(home: Path, client: ControlClient) -> dict[str, list[float]]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "interactive.cli", "mcp", "--local"],
                                   env={"PODCODE_HOME": str(home), "PYTHONPATH": str(ROOT)},
                                   cwd=str(ROOT))
    samples: dict[str, list[float]] = {k: [] for k in (
        "describe", "describe_base", "evaluate", "evaluate_base", "bytes")}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("list_sessions", {})  # the session reached once

        async def mcp_call(tool: str, arguments: dict[str, Any]) -> float:
            started = time.perf_counter()
            for _ in range(CALLS):
                result = await session.call_tool(tool, arguments)
                assert not result.is_error, result
            elapsed = (time.perf_counter() - started) / CALLS * 1000
            if tool == "describe_failure":
                text = getattr(result.content[0], "text", "")
                assert '"df"' in text and '"many"' in text, text
                samples["bytes"].append(len(text.encode()))
            return elapsed

        def direct(call: Any) -> float:
            started = time.perf_counter()
            for _ in range(CALLS):
                call()
            return (time.perf_counter() - started) / CALLS * 1000

        frame = client.frames().get("failed_frame") or 0
        for index in range(RUNS):  # A B B A ...: neither always first
            pairs = [
                ("describe", lambda: mcp_call("describe_failure", {})),
                ("evaluate", lambda: mcp_call("evaluate", {"code": "1 + 1"})),
            ]
            for name, ours in pairs:
                base = (lambda: direct(lambda: _direct_describe(client))) if name == "describe" \
                    else (lambda: direct(lambda: client.evaluate("1 + 1", frame)))
                if index % 2 == 0:
                    samples[name].append(await ours())
                    samples[f"{name}_base"].append(base())
                else:
                    samples[f"{name}_base"].append(base())
                    samples[name].append(await ours())
    return samples


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        proc, record, home = _start(Path(folder))
        try:
            client = ControlClient(record["control_url"].replace("0.0.0.0", "127.0.0.1"),
                                   record["token"])
            samples = asyncio.run(_measure(home, client))
        finally:
            proc.kill()
            proc.wait(30)
    return [
        figure("mcp_describe_failure_ms", samples["describe"], unit="ms", digits=1,
               baseline=samples["describe_base"],
               goal="<= 300 (baseline: the same control-API calls, no MCP)"),
        figure("mcp_evaluate_roundtrip_ms", samples["evaluate"], unit="ms", digits=1,
               baseline=samples["evaluate_base"],
               goal="<= 100 (baseline: ControlClient.evaluate, no MCP)"),
        figure("mcp_describe_failure_bytes", samples["bytes"], unit="bytes", digits=0,
               goal="<= 32768", note="a DataFrame of 1M rows and a 1M-item list in scope"),
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
