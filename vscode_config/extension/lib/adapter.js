// How a configuration of the companion's debug type reaches debugpy (pure functions).
//
// - attach with "connect": debugpy's listener in the task's process speaks the Debug
//   Adapter Protocol itself, so the IDE connects to it directly;
// - launch: `python -m debugpy.adapter` with the session's interpreter, over stdio;
// - launch with "action": "resume": no debug session, the companion resumes the workflow.
'use strict';

const DEBUG_TYPE = 'podcode';
const DESKTOP_TYPE = 'debugpy';
const DEBUGPY_EXTENSION = 'ms-python.debugpy';
const ACTIONS = ['resume'];

// The debug types the companion serves: its own, and the Python Debugger's "debugpy"
// while that extension is not installed (a session that serves SSH writes a "debugpy"
// configuration for desktop VS Code into the same launch.json; in the pod's code-server
// it then attaches as well, instead of "debug type not supported").
function debugTypes(hasDebugpyExtension) {
  return hasDebugpyExtension ? [DEBUG_TYPE] : [DEBUG_TYPE, DESKTOP_TYPE];
}

// The interpreter of a launch configuration: "python" (a path, or a list whose first item
// is the path), else the given default.
function pythonOf(config, fallback) {
  const python = Array.isArray(config.python) ? config.python[0] : config.python;
  return typeof python === 'string' && python ? python : fallback;
}

function portOf(value) {
  const port = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  return Number.isInteger(port) && port > 0 && port < 65536 ? port : null;
}

// {action} | {server: {host, port}} | {executable: {command, args}} | {error}
function adapterFor(config, defaultPython) {
  if (config.request === 'launch' && config.action !== undefined) {
    return ACTIONS.includes(config.action)
      ? { action: config.action }
      : { error: `unknown "action" ${JSON.stringify(config.action)} (expected one of: ${ACTIONS.join(', ')})` };
  }
  if (config.request === 'attach') {
    const connect = config.connect || {};
    const port = portOf(connect.port !== undefined ? connect.port : config.port);
    if (port === null) {
      return { error: 'an attach configuration needs "connect": {"host", "port"} of a listening debugpy' };
    }
    return { server: { host: connect.host || config.host || '127.0.0.1', port } };
  }
  if (config.request === 'launch') {
    return { executable: { command: pythonOf(config, defaultPython), args: ['-m', 'debugpy.adapter'] } };
  }
  return { error: `"request" must be "attach" or "launch", not ${JSON.stringify(config.request)}` };
}

module.exports = { DEBUGPY_EXTENSION, adapterFor, debugTypes, pythonOf };
