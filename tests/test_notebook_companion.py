"""The companion's notebook outputs, run by Node outside VS Code: the kernel's mime bundles
become NotebookCellOutputs (PNG as bytes, HTML, text, streams, a traceback as an error)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

LIB = Path(__file__).resolve().parents[1] / "vscode_config" / "extension" / "lib"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs node to run the extension's code")

CONVERT = """
class Item {
  constructor(data, mime) { this.mime = mime; this.data = Buffer.from(data).toString('base64'); }
  static text(text, mime = 'text/plain') { return new Item(Buffer.from(text), mime); }
  static stdout(text) { return Item.text(text, 'application/vnd.code.notebook.stdout'); }
  static stderr(text) { return Item.text(text, 'application/vnd.code.notebook.stderr'); }
  static error(err) {
    return Item.text(JSON.stringify({ name: err.name, message: err.message, stack: err.stack }),
      'application/vnd.code.notebook.error');
  }
}
class Output { constructor(items) { this.items = items; } }
const vscode = { NotebookCellOutputItem: Item, NotebookCellOutput: Output };
const { cellOutputs } = require(process.argv[2] + '/notebook.js');
console.log(JSON.stringify(cellOutputs(vscode, JSON.parse(process.argv[1]))));
"""


def convert(body: dict[str, Any]) -> list[list[tuple[str, bytes]]]:
    assert NODE is not None
    done = subprocess.run([NODE, "-e", CONVERT, json.dumps(body), str(LIB)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [[(item["mime"], base64.b64decode(item["data"])) for item in output["items"]]
            for output in json.loads(done.stdout)]


def test_the_kernels_outputs_become_notebook_outputs() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    body = {"outputs": [
        {"type": "stream", "name": "stdout", "text": "total is 12\n"},
        {"type": "stream", "name": "stderr", "text": "warn\n"},
        {"type": "display", "data": {"text/plain": "<Figure>",
                                     "image/png": base64.b64encode(png).decode()}},
        {"type": "display", "data": {"text/plain": "   a\n0  1", "text/html": "<table></table>"}},
        {"type": "error", "ename": "IndexError", "evalue": "list index out of range",
         "traceback": "Traceback ...\nIndexError: list index out of range\n"},
    ], "ok": False, "execution_count": 3}
    stdout, stderr, figure, table, error = convert(body)
    assert stdout == [("application/vnd.code.notebook.stdout", b"total is 12\n")]
    assert stderr == [("application/vnd.code.notebook.stderr", b"warn\n")]
    assert figure == [("image/png", png), ("text/plain", b"<Figure>")]  # the bytes, richest first
    assert table == [("text/html", b"<table></table>"), ("text/plain", b"   a\n0  1")]
    ((mime, data),) = error
    assert mime == "application/vnd.code.notebook.error"
    assert json.loads(data) == {"name": "IndexError", "message": "list index out of range",
                                "stack": "Traceback ...\nIndexError: list index out of range\n"}
    assert convert({}) == []


TARGETS = """
const { targets } = require(process.argv[2] + '/notebook.js');
const found = targets(JSON.parse(process.argv[1]));
console.log(JSON.stringify(found.map((t) => [t.key, t.label, t.record || null])));
"""


def targets(session: dict[str, Any]) -> list[list[Any]]:
    assert NODE is not None
    done = subprocess.run([NODE, "-e", TARGETS, json.dumps(session), str(LIB)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_the_notebook_offers_each_local_ranks_frame() -> None:
    """One process: its own frame only; a distributed task's leader: every local rank's
    (the others through their session records)."""
    assert targets({}) == [["own", "this task", None]]
    assert targets({"localRank": 0, "ranks": [{"local_rank": 1, "record": "/h/rank-1/s.json"}]}) \
        == [["own", "local rank 0", None], ["rank-1", "local rank 1", "/h/rank-1/s.json"]]


STREAMING = """
const client = require(process.argv[2] + '/client.js');
const session = { controlUrl: process.argv[3], token: 's3cret' };
client.executeStreaming(session, process.argv[1], (output) => {
  console.log('OUTPUT ' + JSON.stringify(output));
}).then((answer) => console.log('RESULT ' + JSON.stringify(answer)),
  (err) => console.log('FAILED ' + err.message));
"""


async def test_the_companion_shows_a_cells_prints_while_it_runs(tmp_path: Path) -> None:
    """The companion's client, against the session's real control API: the first print
    comes while the cell waits for the test to have seen it; then the cell's answer."""
    import asyncio

    from tests import notebook_fixture
    from tests.cli_fixture import served_api
    from tests.notebook_fixture import Host, failure_of_failing

    assert NODE is not None
    notebook_fixture.GATE.clear()
    code = "import tests.notebook_fixture as gate\nprint('first')\ngate.GATE.wait(30)\n'done'"
    failure = failure_of_failing()
    async with served_api(Host(tmp_path), failure=lambda: failure) as (_, url):
        node = await asyncio.create_subprocess_exec(
            NODE, "-e", STREAMING, code, str(LIB), url, stdout=asyncio.subprocess.PIPE)
        assert node.stdout is not None
        first = (await asyncio.wait_for(node.stdout.readline(), 60)).decode()
        notebook_fixture.GATE.set()
        rest = (await asyncio.wait_for(node.stdout.read(), 60)).decode()
        await node.wait()
    assert first == 'OUTPUT {"type":"stream","name":"stdout","text":"first\\n"}\n'
    assert rest.startswith("RESULT "), rest
    answer = json.loads(rest.removeprefix("RESULT "))
    assert answer["status"] == 200 and answer["body"]["ok"], answer
    assert answer["body"]["outputs"][-1] == {"type": "display", "data": {"text/plain": "'done'"}}


async def test_an_answer_that_breaks_off_ends_the_cell_instead_of_hanging() -> None:
    """The session's process dies mid-answer: the client hears what came, then the end."""
    import asyncio

    from tests.notebook_fixture import dying_session

    assert NODE is not None
    with dying_session() as url:
        node = await asyncio.create_subprocess_exec(
            NODE, "-e", STREAMING, "print('first')", str(LIB), url, stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(node.communicate(), 60)
    first, result = out.decode().splitlines()
    assert first == 'OUTPUT {"type":"stream","name":"stdout","text":"first\\n"}'
    assert result == "RESULT {\"status\":200,\"body\":null}", result
