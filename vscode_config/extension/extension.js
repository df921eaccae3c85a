// podcode companion: a status-bar item with the session's state and the time left
// before cleanup, the commands "Resume workflow" and "Keep alive", the debugger of the
// pod's launch configurations (debugger.js), a notebook whose cells run in the failed
// frame (lib/notebook.js), and throttled activity reports (typing, terminal, debugging)
// to the session's control API.
'use strict';

const vscode = require('vscode');
const client = require('./lib/client');
const { registerDebugger } = require('./debugger');
const { isPersonRequest } = require('./lib/activity');
const language = require('./lib/language');
const notebook = require('./lib/notebook');
const { findSession } = require('./lib/session');
const {
  ENDED_TEXT, pollDelay, sessionGone, shouldAttach, statusText, statusTooltip,
} = require('./lib/status');
const { Throttle } = require('./lib/throttle');

const ACTIVITY_INTERVAL_MS = 5000;
const KEEPALIVE_CHOICES = [
  { label: '1 hour', seconds: 3600 },
  { label: '4 hours', seconds: 4 * 3600 },
  { label: '8 hours', seconds: 8 * 3600 },
  { label: '24 hours', seconds: 24 * 3600 },
];

let output;
let item;
let reported = new Set();
let answered = false; // the control API answered once: its absence now means the session ended
let lastState = null;
let seen = { url: null, version: null }; // the status version last shown, per session
const attached = new Set(); // sessions whose post-mortem this window started by itself
let notebookItem = null; // opens the notebook on the failed frame (lib/notebook.js)

function log(message) {
  output.appendLine(`[${new Date().toISOString()}] ${message}`);
}

function currentSession() {
  const folders = (vscode.workspace.workspaceFolders || [])
    .filter((folder) => folder.uri.scheme === 'file')
    .map((folder) => folder.uri.fsPath);
  const { session, problems } = findSession(process.env, folders);
  for (const problem of problems) {
    if (!reported.has(problem)) {
      reported.add(problem);
      log(problem);
      vscode.window.showWarningMessage(`podcode: ${problem}`);
    }
  }
  return session;
}

// Set the status bar item, only what changed: an answer that changes nothing leaves the
// item (and a click on it just then) alone.
function show(text, tooltip, warning = false) {
  if (item.text !== text) {
    item.text = text;
  }
  if (item.tooltip !== tooltip) {
    item.tooltip = tooltip;
  }
  if (Boolean(item.backgroundColor) !== warning) {
    item.backgroundColor = warning ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
  }
}

function showEnded() {
  notebook.showWhile(notebookItem, 'ended');
  show(ENDED_TEXT, 'The podcode session is over: the workflow went on (or was stopped), and this IDE closes with it.');
  lastState = 'ended';
}

async function refresh() {
  const session = currentSession();
  if (!session) {
    if (answered) {
      showEnded(); // the session removes its file when it ends
      return;
    }
    show('$(debug-disconnect) podcode: no session', 'No podcode session found (.vscode/podcode/session-<id>.json, .vscode/podcode-session.json, or PODCODE_CONTROL_URL/PODCODE_TOKEN)');
    return;
  }
  try {
    const version = seen.url === session.controlUrl ? seen.version : null;
    const answer = await client.status(session, version);
    seen = { url: null, version: null };
    if (answer.status !== 200 || !answer.body) {
      show(`$(debug-disconnect) podcode: API answered ${answer.status}`,
        `GET ${session.controlUrl}${client.ROUTES.STATUS} answered ${answer.status}`);
      return;
    }
    answered = true;
    lastState = answer.body.state;
    notebook.showWhile(notebookItem, lastState);
    seen = { url: session.controlUrl, version: answer.body.version };
    for (const note of answer.body.notes || []) {
      if (!reported.has(note)) {
        reported.add(note);
        vscode.window.showWarningMessage(`podcode: ${note}`);
      }
    }
    attachOnOpen(session, answer.body);
    const now = Date.now() / 1000;
    show(statusText(answer.body, now), statusTooltip(answer.body, now),
      ['warned', 'reaping'].includes(answer.body.state));
  } catch (err) {
    seen = { url: null, version: null };
    if (answered && sessionGone(err)) {
      showEnded();
      return;
    }
    show('$(debug-disconnect) podcode: unreachable', `${session.controlUrl}: ${err.message}`);
  }
}

// Zero clicks from the link to the failed frame: the post-mortem configuration starts
// by itself, once per window (setting podcode.attachOnOpen).
function attachOnOpen(session, body) {
  const enabled = vscode.workspace.getConfiguration('podcode').get('attachOnOpen', true);
  if (!shouldAttach(body, session, attached, enabled, Boolean(vscode.debug.activeDebugSession))) {
    return;
  }
  attached.add(`${session.source}\n${session.postmortem}`);
  const folder = (vscode.workspace.workspaceFolders || [])[0];
  log(`starting "${session.postmortem}"`);
  vscode.debug.startDebugging(folder, session.postmortem).then(
    (started) => { if (!started) log(`"${session.postmortem}" did not start`); },
    (err) => log(`"${session.postmortem}" failed: ${err.message}`),
  );
}

function resumeSummary(body) {
  const report = body || {};
  const parts = [report.patched && report.patched.length
    ? `patched ${report.patched.join(', ')}` : 'nothing patched'];
  if (report.not_loaded && report.not_loaded.length) {
    parts.push(`not loaded in the task's process: ${report.not_loaded.join(', ')}`);
  }
  return parts.join('; ');
}

async function resume() {
  const session = currentSession();
  if (!session) {
    vscode.window.showErrorMessage('podcode: no session to resume');
    return;
  }
  try {
    const answer = await client.resume(session);
    if (answer.status === 202) {
      lastState = 'resuming';
      vscode.window.showInformationMessage(`podcode: resuming the workflow with your edits (${resumeSummary(answer.body)})`);
    } else {
      const reason = answer.body && answer.body.error ? answer.body.error : `status ${answer.status}`;
      vscode.window.showErrorMessage(`podcode: resume refused: ${reason}`);
    }
  } catch (err) {
    vscode.window.showErrorMessage(`podcode: resume failed: ${err.message}`);
  }
  await refresh();
}

async function keepAlive() {
  const session = currentSession();
  if (!session) {
    vscode.window.showErrorMessage('podcode: no session to keep alive');
    return;
  }
  const choice = await vscode.window.showQuickPick(KEEPALIVE_CHOICES, {
    placeHolder: 'Keep the session (and its pod) for',
  });
  if (!choice) {
    return;
  }
  try {
    const answer = await client.keepalive(session, choice.seconds);
    if (answer.status === 200) {
      vscode.window.showInformationMessage(`podcode: kept alive for ${choice.label}`);
    } else {
      const reason = answer.body && answer.body.error ? answer.body.error : `status ${answer.status}`;
      vscode.window.showErrorMessage(`podcode: keep-alive refused: ${reason}`);
    }
  } catch (err) {
    vscode.window.showErrorMessage(`podcode: keep-alive failed: ${err.message}`);
  }
  await refresh();
}

async function menu() {
  const picked = await vscode.window.showQuickPick(
    [
      { label: '$(debug-continue) Resume workflow', run: resume },
      { label: '$(clock) Keep alive', run: keepAlive },
    ],
    { placeHolder: 'podcode session' },
  );
  if (picked) {
    await picked.run();
  }
}

function watchActivity(context, report) {
  const subscriptions = [
    vscode.workspace.onDidChangeTextDocument((event) => {
      if (event.contentChanges.length > 0 && event.document.uri.scheme !== 'output') {
        report('typing');
      }
    }),
    vscode.window.onDidChangeTextEditorSelection((event) => {
      if (event.kind !== undefined && event.kind !== vscode.TextEditorSelectionChangeKind.Command) {
        report('typing');
      }
    }),
    vscode.window.onDidOpenTerminal(() => report('terminal')),
    vscode.window.onDidChangeActiveTerminal(() => report('terminal')),
    // Debugging counts when a person drives it (F5, stepping, evaluating, breakpoints),
    // in any debug session; the requests the IDE sends by itself do not.
    vscode.debug.registerDebugAdapterTrackerFactory('*', {
      createDebugAdapterTracker: () => ({
        onWillReceiveMessage: (message) => {
          if (isPersonRequest(message)) {
            report('debug');
          }
        },
      }),
    }),
  ];
  if (vscode.window.onDidChangeTerminalState) {
    subscriptions.push(vscode.window.onDidChangeTerminalState(() => report('terminal')));
  }
  if (vscode.window.onDidStartTerminalShellExecution) {
    subscriptions.push(vscode.window.onDidStartTerminalShellExecution(() => report('terminal')));
  }
  context.subscriptions.push(...subscriptions);
}

function activate(context) {
  output = vscode.window.createOutputChannel('podcode');
  reported = new Set();
  item = vscode.window.createStatusBarItem('podcode.session', vscode.StatusBarAlignment.Left, 100);
  item.name = 'podcode session';
  item.command = 'podcode.menu';
  item.text = '$(sync~spin) podcode';
  item.show();

  const throttle = new Throttle(ACTIVITY_INTERVAL_MS, async (kind) => {
    const session = currentSession();
    if (session) {
      await client.activity(session, kind).catch((err) => log(`activity report failed: ${err.message}`));
    }
  });
  watchActivity(context, (kind) => throttle.report(kind));

  let timer = null;
  let stopped = false;
  const poll = () => {
    refresh()
      .catch((err) => log(err.message))
      .finally(() => {
        if (!stopped) {
          // A session that tells its status version is asked again at once: it holds
          // the answer until something changes.
          timer = setTimeout(poll, Number.isInteger(seen.version) ? 0 : pollDelay(lastState));
        }
      });
  };
  context.subscriptions.push(
    output,
    item,
    { dispose: () => { stopped = true; clearTimeout(timer); } },
    { dispose: () => throttle.dispose() },
    vscode.commands.registerCommand('podcode.resume', resume),
    vscode.commands.registerCommand('podcode.keepAlive', keepAlive),
    vscode.commands.registerCommand('podcode.menu', menu),
  );
  registerDebugger(context, resume);
  notebookItem = notebook.register(vscode, context, { currentSession, log }).item;
  context.subscriptions.push(language.startLater(vscode, log));
  poll();
}

function deactivate() {}

module.exports = { activate, deactivate };
