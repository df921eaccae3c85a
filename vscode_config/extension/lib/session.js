// Where the control API is: the file of the session that started this code-server
// (.vscode/podcode/session-<PODCODE_SESSION_ID>.json: several sessions of one process share
// a workspace, each with its own code-server), else the workspace's newest session
// (.vscode/podcode-session.json), else PODCODE_CONTROL_URL / PODCODE_TOKEN from the
// environment. The session writes its files with mode 0600: one other users can read is
// refused.
'use strict';

const fs = require('fs');
const path = require('path');

const SESSION_FILE = path.join('.vscode', 'podcode-session.json');
const SESSION_ID = /^[0-9]+(-[0-9]+)*$/;

// The files to look at in a workspace folder, the own session's first.
function sessionFiles(env, folder) {
  const id = env.PODCODE_SESSION_ID;
  const own = id && SESSION_ID.test(id)
    ? [path.join(folder, '.vscode', 'podcode', `session-${id}.json`)] : [];
  return [...own, path.join(folder, SESSION_FILE)];
}

function fromEnvironment(env) {
  if (env.PODCODE_CONTROL_URL && env.PODCODE_TOKEN) {
    return { controlUrl: env.PODCODE_CONTROL_URL, token: env.PODCODE_TOKEN, task: env.PODCODE_TASK || null, source: 'environment' };
  }
  return null;
}

// A distributed task's other local ranks: [{local_rank, record}] (each one's session file).
function otherRanks(ranks) {
  return Array.isArray(ranks) ? ranks.filter((rank) => rank && Number.isInteger(rank.local_rank)
    && typeof rank.record === 'string') : [];
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
  return { session: { controlUrl: data.control_url, token: data.token, task: data.task || null, postmortem: typeof data.postmortem === 'string' ? data.postmortem : null, source: file, localRank: Number.isInteger(data.local_rank) ? data.local_rank : null, ranks: otherRanks(data.ranks) } };
}

// folders: workspace folder paths. Returns {session, problems}.
function findSession(env, folders) {
  const problems = [];
  for (const folder of folders) {
    for (const file of sessionFiles(env, folder)) {
      const found = fromFile(file);
      if (found.session) {
        return { session: found.session, problems };
      }
      if (found.problem) {
        problems.push(found.problem);
      }
    }
  }
  return { session: fromEnvironment(env), problems };
}

module.exports = { findSession, fromFile, fromEnvironment, SESSION_FILE };
