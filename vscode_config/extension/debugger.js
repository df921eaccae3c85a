// The companion's debugger: the pod's launch configurations (type "podcode") work in
// code-server with no other extension. Attach connects to debugpy's listener in the task's
// process; launch runs `python -m debugpy.adapter` with the session's interpreter; the
// "resume workflow" configuration runs the Resume command instead of a debug session. The
// desktop configurations (type "debugpy") work the same way while the Python Debugger
// extension is not installed here.
'use strict';

const vscode = require('vscode');
const { DEBUGPY_EXTENSION, adapterFor, debugTypes } = require('./lib/adapter');

function defaultPython() {
  const configured = vscode.workspace.getConfiguration('python').get('defaultInterpreterPath');
  return typeof configured === 'string' && configured ? configured : 'python3';
}

function configurationProvider(resume) {
  return {
    async resolveDebugConfiguration(folder, config) {
      if (!config.type && !config.request) {
        vscode.window.showInformationMessage(
          'podcode: pick one of the podcode configurations in Run and Debug (.vscode/launch.json)');
        return undefined;
      }
      const adapter = adapterFor(config, defaultPython());
      if (adapter.action === 'resume') {
        await resume();
        return undefined; // no debug session: the command did the work
      }
      return config;
    },
  };
}

const descriptorFactory = {
  createDebugAdapterDescriptor(session) {
    const adapter = adapterFor(session.configuration, defaultPython());
    if (adapter.server) {
      return new vscode.DebugAdapterServer(adapter.server.port, adapter.server.host);
    }
    if (adapter.executable) {
      return new vscode.DebugAdapterExecutable(adapter.executable.command, adapter.executable.args);
    }
    throw new Error(`podcode: ${adapter.error || 'this configuration starts no debugger'}`);
  },
};

function registerDebugger(context, resume) {
  for (const type of debugTypes(Boolean(vscode.extensions.getExtension(DEBUGPY_EXTENSION)))) {
    context.subscriptions.push(
      vscode.debug.registerDebugConfigurationProvider(type, configurationProvider(resume)),
      vscode.debug.registerDebugAdapterDescriptorFactory(type, descriptorFactory),
    );
  }
}

module.exports = { registerDebugger };
