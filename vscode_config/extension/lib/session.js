// Where the control API is: the workspace file .vscode/podcode-session.json, which the
// session writes (mode 0600: a file other users can read is refused), else
// PODCODE_CONTROL_URL / PODCODE_TOKEN from the environment.
'use strict';

const fs = require('fs');
const path = require('path');

const SESSION_FILE = path.join('.vscode', 'podcode-session.json');

function fromEnvironment(env) {
  if (env.PODCODE_CONTROL_URL && env.PODCODE_TOKEN) {
    return { controlUrl: env.PODCODE_CONTROL_URL, token: env.PODCODE_TOKEN, task: env.PODCODE_TASK || null, source: 'environment' };
  }
  return null;
}

// Returns {session} or {problem}; never throws.
function fromFile(file) {
  let stat;
  try {
    stat = fs.statSync(file);
  } catch (err) {
    return { problem: null };
  }
  if ((stat.mode & 0o077) !== 0) {
    return { problem: `${file} is readable by other users; ignoring it (it must be mode 0600)` };
  }
  let data;
  try {
    data = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    return { problem: `${file} is not valid JSON: ${err.message}` };
  }
  if (!data || typeof data.control_url !== 'string' || typeof data.token !== 'string') {
    return { problem: `${file} lacks "control_url" or "token"` };
  }
  return { session: { controlUrl: data.control_url, token: data.token, task: data.task || null, source: file } };
}

// folders: workspace folder paths. Returns {session, problems}.
function findSession(env, folders) {
  const problems = [];
  for (const folder of folders) {
    const found = fromFile(path.join(folder, SESSION_FILE));
    if (found.session) {
      return { session: found.session, problems };
    }
    if (found.problem) {
      problems.push(found.problem);
    }
  }
  return { session: fromEnvironment(env), problems };
}

module.exports = { findSession, fromFile, fromEnvironment, SESSION_FILE };
