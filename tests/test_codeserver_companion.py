"""The companion extension's logic, run by Node outside VS Code: finding the session,
the status text, throttled activity, and its HTTP calls against a real aiohttp server."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

LIB = Path(__file__).resolve().parents[1] / "vscode_config" / "extension" / "lib"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs node to run the extension's code")


def node(script: str, *args: str) -> Any:
    """Run ``script`` with ``lib`` = the extension's lib folder; it prints one JSON value."""
    assert NODE is not None
    prelude = f"const lib = {json.dumps(str(LIB))};\n"
    done = subprocess.run([NODE, "-e", prelude + script, "--", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


FIND = """
const { findSession } = require(lib + '/session.js');
const [env, folders] = JSON.parse(process.argv[1]);
console.log(JSON.stringify(findSession(env, folders)));
"""


def _session_file(folder: Path, mode: int, data: object) -> Path:
    path = folder / ".vscode" / "podcode-session.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    path.chmod(mode)
    return path


def test_session_from_the_workspace_file(tmp_path: Path) -> None:
    _session_file(tmp_path, 0o600, {"control_url": "http://127.0.0.1:1", "token": "t",
                                    "task": "m.f"})
    found = node(FIND, json.dumps([{}, [str(tmp_path / "none"), str(tmp_path)]]))
    assert found["session"]["controlUrl"] == "http://127.0.0.1:1"
    assert found["session"]["token"] == "t" and found["session"]["task"] == "m.f"
    assert found["problems"] == []


def test_the_workspace_file_wins_over_the_environment(tmp_path: Path) -> None:
    """The session writes the file; code-server's environment need not carry the token."""
    _session_file(tmp_path, 0o600, {"control_url": "http://127.0.0.1:1", "token": "file"})
    env = {"PODCODE_CONTROL_URL": "http://127.0.0.1:2", "PODCODE_TOKEN": "env"}
    found = node(FIND, json.dumps([env, [str(tmp_path)]]))
    assert found["session"]["token"] == "file"
    assert found["session"]["source"] == str(tmp_path / ".vscode" / "podcode-session.json")
    without_file = node(FIND, json.dumps([env, [str(tmp_path / "elsewhere")]]))
    assert without_file["session"]["token"] == "env"
    assert without_file["session"]["source"] == "environment"


def test_the_code_servers_own_session_wins_over_the_newest(tmp_path: Path) -> None:
    """Two sessions of one process share a workspace, each with its own code-server: each
    code-server's companion serves the session that started it (PODCODE_SESSION_ID)."""
    _session_file(tmp_path, 0o600, {"control_url": "http://127.0.0.1:2", "token": "newest"})
    own = tmp_path / ".vscode" / "podcode" / "session-41-7.json"
    own.parent.mkdir()
    own.write_text(json.dumps({"control_url": "http://127.0.0.1:1", "token": "first"}))
    own.chmod(0o600)
    found = node(FIND, json.dumps([{"PODCODE_SESSION_ID": "41-7"}, [str(tmp_path)]]))
    assert found["session"]["token"] == "first" and found["session"]["source"] == str(own)
    for other in ("41-7-2", "../../x", ""):  # not its file, or not a session's name
        found = node(FIND, json.dumps([{"PODCODE_SESSION_ID": other}, [str(tmp_path)]]))
        assert found["session"]["token"] == "newest", other


@pytest.mark.parametrize(
    ("mode", "data", "problem"),
    [
        (0o644, {"control_url": "http://x", "token": "t"}, "readable by other users"),
        (0o640, {"control_url": "http://x", "token": "t"}, "readable by other users"),
        (0o600, "{not json", "not valid JSON"),
        (0o600, {"control_url": "http://x"}, 'lacks "control_url" or "token"'),
    ],
)
def test_unsafe_or_broken_files_are_refused(
    tmp_path: Path, mode: int, data: object, problem: str
) -> None:
    _session_file(tmp_path, mode, data)
    found = node(FIND, json.dumps([{}, [str(tmp_path)]]))
    assert found["session"] is None
    assert len(found["problems"]) == 1 and problem in found["problems"][0]


def test_status_text_shows_state_and_time_left() -> None:
    script = """
    const s = require(lib + '/status.js');
    const now = 1000000;
    console.log(JSON.stringify([
      s.statusText({state: 'warned', reap_at: now + 1500}, now),
      s.statusText({state: 'waiting', reap_at: null, idle_seconds: 600,
                    max_idle_seconds: 1800, grace_seconds: 600}, now),
      s.statusText({state: 'waiting', reap_at: null, idle_seconds: 5}, now),
      s.statusText({state: 'reaping', reap_at: now - 10}, now),
      s.formatDuration(3900), s.formatDuration(59), s.formatDuration(3600 * 25),
      s.statusTooltip({state: 'waiting', task: 'train.fit', idle_seconds: 90,
                       reap_at: now + 60}, now),
    ]));
    """
    texts = node(script)
    assert texts[0] == "$(warning) podcode: warned · cleanup in 25m"
    assert texts[1] == "$(debug-pause) podcode: waiting · cleanup in 30m"
    assert texts[2] == "$(debug-pause) podcode: waiting"
    assert texts[3].endswith("cleanup in 0s")
    assert texts[4:7] == ["1h 05m", "59s", "25h 00m"]
    assert "train.fit" in texts[7] and "idle for 1m" in texts[7]


def test_activity_reports_are_throttled() -> None:
    """A fake clock and timers: the first report goes at once, the burst after it becomes
    one report (the latest kind) when the interval ends."""
    script = """
    const { Throttle } = require(lib + '/throttle.js');
    let now = 0; const timers = []; const sent = [];
    const fake = {
      setTimeout: (fn, ms) => { timers.push({fn, at: now + ms}); return timers.length; },
      clearTimeout: () => {},
    };
    const t = new Throttle(5000, (kind) => sent.push([now, kind]), () => now, fake);
    t.report('typing');
    now = 1000; t.report('typing');
    now = 2000; t.report('terminal');
    now = 3000; t.report('debug');
    const scheduled = timers.map((x) => x.at);
    now = 5000; timers.shift().fn();
    now = 12000; t.report('typing');
    setImmediate(() => console.log(JSON.stringify({sent, scheduled, pending: timers.length})));
    """
    result = node(script)
    assert result["sent"] == [[0, "typing"], [5000, "debug"], [12000, "typing"]]
    assert result["scheduled"] == [5000]
    assert result["pending"] == 0


def test_the_language_server_starts_after_the_debugger_shows_a_frame() -> None:
    """Fake VS Code events and timers: the server (a second of CPU or more) starts once, a
    moment after the debugger first shows a frame; not 4 s after activation, nor 3 s after
    the debug session started, while the frame and its locals are on their way."""
    script = """
    const language = require(lib + '/language.js');
    let now = 0; const timers = new Map(); let next = 0; const handlers = {}; const logged = [];
    const fake = {
      setTimeout: (fn, ms) => { timers.set(++next, {fn, at: now + ms}); return next; },
      clearTimeout: (id) => { timers.delete(id); },
    };
    const event = (name) => (fn) => { handlers[name] = fn; return { dispose: () => {} }; };
    const vscode = {
      debug: { onDidStartDebugSession: event('start'), onDidChangeActiveStackItem: event('item') },
      workspace: { getConfiguration: () => ({ get: () => undefined }) },
    };
    const pending = () => [...timers.values()].map((x) => x.at);
    const seen = {};
    language.startLater(vscode, (line) => logged.push([now, line]), fake);
    seen.activated = pending();
    now = 200; handlers.start({});
    seen.debugging = pending();
    now = 1500; handlers.item({ threadId: 1 });  // a thread, not a frame
    now = 1600; handlers.item({ threadId: 1, frameId: 7 });
    now = 1700; handlers.item({ threadId: 1, frameId: 8 });  // stepping: no new timer
    handlers.start({});  // nor for a second debug session
    seen.frame = pending();
    for (const [id, timer] of timers) { timers.delete(id); now = timer.at; timer.fn(); }
    console.log(JSON.stringify({ seen, logged }));
    """
    result = node(script)
    assert result["seen"] == {"activated": [4000], "debugging": [3200], "frame": [2600]}
    assert [entry[0] for entry in result["logged"]] == [2600]  # it started once, then
    assert "language features are off" in result["logged"][0][1]  # (no server named here)


async def test_client_calls_the_control_api() -> None:
    seen: list[tuple[str, str, str, object]] = []

    async def record(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        seen.append((request.method, request.path, request.headers.get("Authorization", ""),
                     body))
        if request.path == "/api/status":
            return web.json_response({"state": "waiting", "reap_at": None, "idle_seconds": 3})
        return web.json_response({"ok": True}, status=202 if request.path == "/api/resume"
                                 else 200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    script = """
    const c = require(lib + '/client.js');
    const session = { controlUrl: process.argv[1], token: 'tok' };
    (async () => {
      const out = [];
      out.push(await c.status(session));
      out.push(await c.activity(session, 'typing'));
      out.push(await c.keepalive(session, 3600));
      out.push(await c.resume(session));
      console.log(JSON.stringify(out.map((r) => [r.status, r.body])));
    })().catch((e) => { console.error(e); process.exit(1); });
    """
    try:
        answers = await asyncio.to_thread(node, script, f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
    assert answers[0] == [200, {"state": "waiting", "reap_at": None, "idle_seconds": 3}]
    assert [a[0] for a in answers[1:]] == [200, 200, 202]
    assert seen == [
        ("GET", "/api/status", "Bearer tok", None),
        ("POST", "/api/activity", "Bearer tok", {"kind": "typing"}),
        ("POST", "/api/keepalive", "Bearer tok", {"seconds": 3600}),
        ("POST", "/api/resume", "Bearer tok", {}),
    ]


def test_debug_configurations_reach_debugpy() -> None:
    """attach: debugpy's own listener (DAP over TCP); launch: `python -m debugpy.adapter`
    with the configuration's interpreter; "action": "resume": no debug session at all."""
    script = """
    const { adapterFor } = require(lib + '/adapter.js');
    const cases = [
      {request: 'attach', connect: {host: '127.0.0.1', port: 5678}},
      {request: 'attach', connect: {port: '5679'}},
      {request: 'attach', port: 5680},
      {request: 'attach', processId: 42},
      {request: 'launch', program: 'x.py', python: '/venv/bin/python'},
      {request: 'launch', program: 'x.py', python: ['/venv/bin/python', '-X', 'dev']},
      {request: 'launch', program: 'x.py'},
      {request: 'launch', action: 'resume'},
      {request: 'launch', action: 'explode'},
      {request: 'restart'},
    ];
    console.log(JSON.stringify(cases.map((c) => adapterFor(c, '/usr/bin/python3'))));
    """
    got = node(script)
    adapter = ["-m", "debugpy.adapter"]
    assert got[0] == {"server": {"host": "127.0.0.1", "port": 5678}}
    assert got[1] == {"server": {"host": "127.0.0.1", "port": 5679}}
    assert got[2] == {"server": {"host": "127.0.0.1", "port": 5680}}
    assert "connect" in got[3]["error"]
    assert got[4] == {"executable": {"command": "/venv/bin/python", "args": adapter}}
    assert got[5] == {"executable": {"command": "/venv/bin/python", "args": adapter}}
    assert got[6] == {"executable": {"command": "/usr/bin/python3", "args": adapter}}
    assert got[7] == {"action": "resume"}
    assert "explode" in got[8]["error"] and "restart" in got[9]["error"]


def test_the_desktop_debug_type_is_served_while_its_extension_is_not_installed() -> None:
    script = """
    const { debugTypes } = require(lib + '/adapter.js');
    console.log(JSON.stringify([debugTypes(false), debugTypes(true)]));
    """
    assert node(script) == [["podcode", "debugpy"], ["podcode"]]
    package = json.loads((LIB.parent / "package.json").read_text())
    types = [debugger["type"] for debugger in package["contributes"]["debuggers"]]
    assert types == ["podcode", "debugpy"]


def test_only_what_a_person_does_in_the_debugger_is_activity() -> None:
    script = """
    const { isPersonRequest } = require(lib + '/activity.js');
    const request = (command, args) => ({type: 'request', command, arguments: args || {}});
    const person = [request('next'), request('stepIn'), request('continue'),
                    request('evaluate', {context: 'repl'}), request('evaluate', {context: 'hover'}),
                    request('setBreakpoints'), request('attach'), request('disconnect')];
    const ide = [request('threads'), request('stackTrace'), request('scopes'),
                 request('variables'), request('evaluate', {context: 'watch'}),
                 {type: 'event', event: 'stopped'}, {type: 'response', command: 'next'}, null];
    console.log(JSON.stringify([person.map(isPersonRequest), ide.map(isPersonRequest)]));
    """
    person, ide = node(script)
    assert all(person) and not any(ide)


def test_the_status_shows_that_the_session_ended() -> None:
    script = """
    const s = require(lib + '/status.js');
    console.log(JSON.stringify([
      s.statusText({state: 'done', reap_at: 1e9}, 0), s.statusText({state: 'failed'}, 0),
      s.statusTooltip({state: 'done', task: 'm.f'}, 0), s.ENDED_TEXT,
      s.statusText({state: 'running', reap_at: null, idle_seconds: 0, max_idle_seconds: 60}, 0),
      s.statusTooltip({state: 'resuming', idle_seconds: 0, max_idle_seconds: 60}, 0),
      [s.pollDelay('resuming'), s.pollDelay('running'), s.pollDelay('waiting'), s.pollDelay(null)],
    ]));
    """
    done, failed, tooltip, ended, running, resuming, delays = node(script)
    assert done == "$(check) podcode: session ended (the task succeeded)"
    assert failed == "$(error) podcode: session ended (the task failed)"
    assert "Resume" not in tooltip and "session ended" in ended
    # After Resume the text stays true when the session ends and takes this VS Code with it.
    assert running == "$(sync~spin) podcode: running · the session ends when the task succeeds"
    assert "cleanup" not in resuming and "if it fails, the session opens again" in resuming
    assert delays[0] == delays[1] < delays[2] == delays[3]


def test_a_closed_control_api_means_the_session_ended_not_unreachable() -> None:
    """After a successful resume the session closes its API: however the connection
    fails (refused, or reset mid-request), the status bar says it ended."""
    script = """
    const s = require(lib + '/status.js');
    const err = (code) => Object.assign(new Error('x'), {code});
    console.log(JSON.stringify([
      s.sessionGone(err('ECONNREFUSED')), s.sessionGone(err('ECONNRESET')),
      s.sessionGone({cause: {code: 'ECONNRESET'}}), s.sessionGone(err('ETIMEDOUT')),
      s.sessionGone(err('ENOTFOUND')),
    ]));
    """
    assert node(script) == [True, True, True, False, False]


def test_the_post_mortem_starts_by_itself_once_per_window() -> None:
    script = """
    const { shouldAttach } = require(lib + '/status.js');
    const session = {source: '/w/.vscode/podcode/session-1.json', postmortem: 'attach'};
    const failed = {state: 'waiting', error: 'ValueError: x'};
    const started = new Set();
    const first = shouldAttach(failed, session, started, true, false);
    started.add(`${session.source}\\n${session.postmortem}`);
    console.log(JSON.stringify([
      first,
      shouldAttach(failed, session, started, true, false),           // done in this window
      shouldAttach(failed, session, new Set(), false, false),        // the setting is off
      shouldAttach(failed, session, new Set(), true, true),          // a debug session runs
      shouldAttach({state: 'waiting', error: null}, session, new Set(), true, false),  // startup
      shouldAttach({state: 'resuming', error: 'x'}, session, new Set(), true, false),
      shouldAttach(failed, {source: 's', postmortem: null}, new Set(), true, false),
      shouldAttach({state: 'warned', error: 'x'}, session, new Set(), true, false),
    ]));
    """
    assert node(script) == [True, False, False, False, False, False, False, True]


def test_the_tooltip_lists_what_coding_agents_did() -> None:
    script = """
    const s = require(lib + '/status.js');
    const now = 1000000;
    const actions = [1, 2, 3, 4, 5, 6].map((i) => ({actor: 'agent via MCP',
      action: `evaluate in frame 0: x + ${i}`, at: now - 120, status: 200}));
    actions.push({actor: 'agent via MCP', action: 'resume', at: now - 5, status: 202});
    console.log(JSON.stringify([
      s.statusTooltip({state: 'waiting', task: 't', actions, actions_dropped: 3}, now),
      s.statusTooltip({state: 'waiting', task: 't', actions: []}, now),
    ]));
    """
    with_actions, without = node(script)
    lines = with_actions.splitlines()
    assert "coding agent: 10 actions in this session" in lines
    assert "  5s ago agent via MCP: resume (202)" in lines
    assert sum("evaluate in frame 0" in line for line in lines) == 4  # the newest five shown
    assert "coding agent" not in without
