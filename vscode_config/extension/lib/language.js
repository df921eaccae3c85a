// Python language intelligence in the pod's code-server: hover, Go to Definition,
// completion and diagnostics from basedpyright (installed with podcode: the session
// names its server in the workspace setting podcode.languageServer), through
// vscode-languageclient (bundled into ./languageclient.js when podcode is built). The
// server runs on code-server's own Node.js: nothing is downloaded.
'use strict';

const fs = require('fs');

const START_AFTER_DEBUG_MS = 1000;
// Later than the post-mortem's attach: the frame and its locals come first.
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

// Start the server once: a moment after the first debug session starts, or after a
// few seconds without one. Returns a disposable.
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
  const timer = timers.setTimeout(start, START_WITHOUT_DEBUG_MS);
  const debugging = vscode.debug.onDidStartDebugSession(() => {
    timers.setTimeout(start, START_AFTER_DEBUG_MS);
  });
  return {
    dispose: () => {
      timers.clearTimeout(timer);
      debugging.dispose();
      if (client) {
        return client.stop();
      }
      return undefined;
    },
  };
}

module.exports = { problem, startLater, START_AFTER_DEBUG_MS, START_WITHOUT_DEBUG_MS };
