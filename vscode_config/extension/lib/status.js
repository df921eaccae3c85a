// What the status-bar item says, from GET /api/status (pure functions).
'use strict';

const ICONS = {
  running: '$(sync~spin)',
  waiting: '$(debug-pause)',
  resuming: '$(debug-continue)',
  warned: '$(warning)',
  reaping: '$(trash)',
  done: '$(check)',
  failed: '$(error)',
};

const ENDED_STATES = ['done', 'failed'];
const BUSY_STATES = ['resuming', 'running'];
const ENDED_TEXT = '$(circle-slash) podcode: session ended';
const POLL_MS = 5000;
const FAST_POLL_MS = 1000;

// How soon to ask again: often while the task runs after a resume, so that the end of the
// session shows as it happens.
function pollDelay(state) {
  return BUSY_STATES.includes(state) ? FAST_POLL_MS : POLL_MS;
}

// The control API closed (the session ended: its task succeeded, or it was aborted or
// cleaned up), as opposed to a network hiccup: the status bar then says the session ended.
function sessionGone(err) {
  const code = err && (err.code || (err.cause && err.cause.code));
  return ['ECONNREFUSED', 'ECONNRESET', 'EPIPE'].includes(code);
}

function isNumber(value) {
  return typeof value === 'number' && Number.isFinite(value);
}

// Seconds before the session is cleaned up, or null when the API does not say.
function secondsLeft(status, nowSeconds) {
  for (const key of ['reap_at', 'cleanup_at']) {
    if (isNumber(status[key])) {
      return Math.max(0, status[key] - nowSeconds);
    }
  }
  if (isNumber(status.max_idle_seconds) && isNumber(status.idle_seconds)) {
    const grace = isNumber(status.grace_seconds) ? status.grace_seconds : 0;
    return Math.max(0, status.max_idle_seconds - status.idle_seconds + grace);
  }
  return null;
}

function formatDuration(seconds) {
  const total = Math.max(0, Math.round(seconds));
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  if (hours > 0) {
    return `${hours}h ${String(minutes).padStart(2, '0')}m`;
  }
  if (minutes > 0) {
    return `${minutes}m`;
  }
  return `${total % 60}s`;
}

function statusText(status, nowSeconds) {
  const state = String(status.state || 'unknown');
  const icon = ICONS[state] || '$(debug)';
  if (ENDED_STATES.includes(state)) {
    return `${icon} podcode: session ended (${state === 'done' ? 'the task succeeded' : 'the task failed'})`;
  }
  if (BUSY_STATES.includes(state)) {
    // True until the end: when the task succeeds, the session stops this VS Code with it.
    return `${icon} podcode: ${state} · the session ends when the task succeeds`;
  }
  const left = secondsLeft(status, nowSeconds);
  const suffix = left === null ? '' : ` · cleanup in ${formatDuration(left)}`;
  return `${icon} podcode: ${state}${suffix}`;
}

function statusTooltip(status, nowSeconds) {
  const lines = [`podcode session: ${status.task || 'unknown task'}`, `state: ${status.state}`];
  if (status.error) {
    lines.push(`error: ${status.error}`);
  }
  if (isNumber(status.idle_seconds) && !BUSY_STATES.includes(status.state)) {
    lines.push(`idle for ${formatDuration(status.idle_seconds)}`);
  }
  const left = secondsLeft(status, nowSeconds);
  if (left !== null && !BUSY_STATES.includes(status.state)) {
    lines.push(`cleanup in ${formatDuration(left)} unless you keep it alive`);
  }
  lines.push(...agentLines(status, nowSeconds));
  if (BUSY_STATES.includes(status.state)) {
    lines.push('The task runs with your edits. If it succeeds, the session ends and this VS Code '
      + 'stops; if it fails, the session opens again here.');
  } else if (!ENDED_STATES.includes(status.state)) {
    lines.push('Click for: Resume workflow, Keep alive');
  }
  return lines.join('\n');
}

const SHOWN_ACTIONS = 5;

// What coding agents did in the session (podcode mcp), newest last: the engineer sees
// every change an agent made.
function agentLines(status, nowSeconds) {
  const actions = Array.isArray(status.actions) ? status.actions : [];
  if (!actions.length) {
    return [];
  }
  const total = actions.length + (isNumber(status.actions_dropped) ? status.actions_dropped : 0);
  const lines = [`coding agent: ${total} action${total === 1 ? '' : 's'} in this session`];
  for (const action of actions.slice(-SHOWN_ACTIONS)) {
    const ago = isNumber(action.at) ? `${formatDuration(Math.max(0, nowSeconds - action.at))} ago` : '';
    const answered = action.status === null || action.status === undefined ? '' : ` (${action.status})`;
    lines.push(`  ${ago} ${action.actor}: ${action.action}${answered}`);
  }
  return lines;
}

// Whether to start the post-mortem now, with no click: a failed task waits (not one in
// mode "startup"), the setting is on, no debug session runs in this window, and this
// window has not started it for this session yet (a reload or another window does again).
function shouldAttach(body, session, started, enabled, debugging) {
  return Boolean(
    enabled && !debugging && session && session.postmortem && body
    && ['waiting', 'warned'].includes(body.state) && body.error
    && !started.has(`${session.source}\n${session.postmortem}`),
  );
}

module.exports = {
  shouldAttach,
  ENDED_TEXT, FAST_POLL_MS, POLL_MS, formatDuration, pollDelay, secondsLeft, sessionGone, statusText,
  statusTooltip, agentLines,
};
