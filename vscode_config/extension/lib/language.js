// Python language intelligence in the pod's code-server: hover, Go to Definition,
// completion and diagnostics from basedpyright (installed with podcode: the session
// names its server in the workspace setting podcode.languageServer), through
// vscode-languageclient (bundled into ./languageclient.js when podcode is built). The
// server runs on code-server's own Node.js: nothing is downloaded.
'use strict';

const fs = require('fs');

// The frame and its locals come first: the server (a second or more of CPU) starts a moment
// after the debugger shows a frame, else a while after a debug session starts (one that
// shows none), else later than the post-mortem's attach would have.
const START_AFTER_FRAME_MS = 1000;
const START_AFTER_DEBUG_MS = 3000;
const START_WITHOUT_DEBUG_MS = 4000;

function loadClient() {
  try {
    return require('./languageclient');
  } catch (err) {
    return null;
  }
}

// What keeps the server from starting, in words; null when it can start.
function problem(module, client, exists) {
  if (!module) {
    return 'no language server named (podcode.languageServer): basedpyright is not installed with podcode, or language_server=False';
  }
  if (!exists(module)) {
    return `the language server ${module} does not exist`;
  }
  if (!client) {
    return 'this companion was built without its language client (scripts/build-companion-client.sh)';
  }
  return null;
}

// Start the server once: a moment after the debugger first shows a frame; without a
// frame, a while after the first debug session starts; without one, a few seconds after
// activation. Returns a disposable.
function startLater(vscode, log, timers = { setTimeout, clearTimeout }) {
  let client = null;
  let started = false;
  const start = () => {
    if (started) {
      return;
    }
    started = true;
    const module = vscode.workspace.getConfiguration('podcode').get('languageServer');
    const library = loadClient();
    const why = problem(module, library, (path) => fs.existsSync(path));
    if (why) {
      log(`Python language features are off: ${why}`);
      return;
    }
    client = new library.LanguageClient(
      'podcode.python',
      'podcode: Python language server',
      { module, transport: library.TransportKind.ipc },
      {
        documentSelector: [{ scheme: 'file', language: 'python' }],
        synchronize: { configurationSection: ['python', 'basedpyright'] },
      },
    );
    log(`starting the Python language server ${module}`);
    client.start().catch((err) => log(`the Python language server failed: ${err.message}`));
  };
  // One pending timer: the first debug session replaces activation's, the first frame the
  // debug session's.
  let pending = timers.setTimeout(start, START_WITHOUT_DEBUG_MS);
  let waitsFor = 'debug';
  const startIn = (ms) => {
    timers.clearTimeout(pending);
    pending = timers.setTimeout(start, ms);
  };
  const watching = [vscode.debug.onDidStartDebugSession(() => {
    if (waitsFor === 'debug') {
      waitsFor = 'frame';
      startIn(START_AFTER_DEBUG_MS);
    }
  })];
  if (vscode.debug.onDidChangeActiveStackItem) { // VS Code 1.90 and later
    watching.push(vscode.debug.onDidChangeActiveStackItem((item) => {
      if (waitsFor === 'frame' && item && item.frameId !== undefined) {
        waitsFor = null;
        startIn(START_AFTER_FRAME_MS);
      }
    }));
  }
  return {
    dispose: () => {
      timers.clearTimeout(pending);
      watching.forEach((subscription) => subscription.dispose());
      if (client) {
        return client.stop();
      }
      return undefined;
    },
  };
}

module.exports = {
  problem, startLater, START_AFTER_DEBUG_MS, START_AFTER_FRAME_MS, START_WITHOUT_DEBUG_MS,
};
