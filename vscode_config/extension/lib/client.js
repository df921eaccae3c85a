// A small JSON client for the session's control API (bearer token, short timeouts): the
// companion's side of podcode's one control-API client (interactive/base/control_client.py),
// with the same paths and the same reading of an error answer.
'use strict';

const http = require('http');
const https = require('https');

// The control API's paths, as interactive/base/routes.py names them (a test keeps them equal).
const ROUTES = Object.freeze({
  STATUS: '/api/status',
  RESUME: '/api/resume',
  KEEPALIVE: '/api/keepalive',
  ACTIVITY: '/api/activity',
  NOTEBOOK_OPEN: '/api/notebook/open',
  NOTEBOOK_EXECUTE: '/api/notebook/execute',
  NOTEBOOK_INTERRUPT: '/api/notebook/interrupt',
});

const TIMEOUT_MS = 5000;
// How long the session may hold a status answer until something changes (it answers at
// once when it already has news, and within a minute at the latest).
const WAIT_SECONDS = 55;

// Sends a request to the session's control API; answer(res, resolve) reads its response
// and settles the promise. timeoutMs 0: no timeout.
function send(session, method, apiPath, body, timeoutMs, answer) {
  return new Promise((resolve, reject) => {
    let url;
    try {
      url = new URL(apiPath, session.controlUrl);
    } catch (err) {
      reject(unreachable(new Error(`bad control URL ${session.controlUrl}: ${err.message}`)));
      return;
    }
    const payload = body === undefined ? null : Buffer.from(JSON.stringify(body));
    const headers = { Authorization: `Bearer ${session.token}`, Accept: 'application/json' };
    if (payload) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = String(payload.length);
    }
    const transport = url.protocol === 'https:' ? https : http;
    const req = transport.request(url, { method, headers, timeout: timeoutMs },
      (res) => answer(res, resolve));
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url.origin} in ${timeoutMs} ms`)));
    req.on('error', (err) => reject(unreachable(err)));
    if (payload) {
      req.write(payload);
    }
    req.end();
  });
}

// A call that got no answer (or a broken one) rejects with an error of this kind.
function unreachable(err) {
  err.kind = 'ControlUnreachable';
  return err;
}

// What an answer with HTTP status and JSON body means, as control_client.refusal decides
// it: null (not an error), or {kind, status, reason (the session's own words), message}.
function refusal(status, body) {
  if (status < 400) {
    return null;
  }
  const reason = String((body && body.error) || `HTTP ${status}`);
  if (status === 401) {
    return { kind: 'ControlUnauthorized', status, reason,
      message: 'the session refused the token (401): the session file is stale, the session '
        + 'may have restarted; try again' };
  }
  if (status === 409) {
    return { kind: 'ControlConflict', status, reason, message: reason };
  }
  if (status === 400) {
    return { kind: 'ControlBadRequest', status, reason,
      message: `the session rejected the request: ${reason}` };
  }
  return { kind: 'ControlRefused', status, reason,
    message: `the session's control API failed (${status}): ${reason}` };
}

function request(session, method, apiPath, body, timeoutMs = TIMEOUT_MS) {
  return send(session, method, apiPath, body, timeoutMs, (res, resolve) => {
    const chunks = [];
    res.on('data', (chunk) => chunks.push(chunk));
    res.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let json = null;
      try {
        json = text ? JSON.parse(text) : null;
      } catch (err) {
        json = null;
      }
      resolve({ status: res.statusCode, body: json });
    });
  });
}

// A cell run with its prints streamed (no timeout: it runs as long as it needs, and the stop
// button interrupts it): onOutput(output) for each printed piece as it comes,
// then {status, body} with the cell's whole answer (the error's body when not 200).
function executeStreaming(session, code, onOutput) {
  return send(session, 'POST', ROUTES.NOTEBOOK_EXECUTE, { code, stream: true }, 0, (res, resolve) => {
    let pending = '';
    let result = null;
    const take = (text) => {
      let data;
      try {
        data = JSON.parse(text);
      } catch (err) {
        return;
      }
      if (res.statusCode !== 200 || !data) {
        result = data;
      } else if (data.output) {
        onOutput(data.output);
      } else if (data.result) {
        result = data.result;
      }
    };
    res.setEncoding('utf8');
    res.on('data', (chunk) => {
      pending += chunk;
      let end = pending.indexOf('\n');
      while (end >= 0) {
        take(pending.slice(0, end));
        pending = pending.slice(end + 1);
        end = pending.indexOf('\n');
      }
    });
    // 'close' also when the connection breaks mid-answer ('end' then never comes).
    res.on('close', () => {
      if (pending.trim()) {
        take(pending);
      }
      resolve({ status: res.statusCode, body: result });
    });
  });
}

module.exports = {
  ROUTES,
  refusal,
  executeStreaming,
  // The status now, or (given the version last seen) once it changes.
  status: (session, seen) => (Number.isInteger(seen)
    ? request(session, 'GET', `${ROUTES.STATUS}?version=${seen}&wait=${WAIT_SECONDS}`,
      undefined, WAIT_SECONDS * 1000 + TIMEOUT_MS)
    : request(session, 'GET', ROUTES.STATUS)),
  resume: (session) => request(session, 'POST', ROUTES.RESUME, {}),
  keepalive: (session, seconds) => request(session, 'POST', ROUTES.KEEPALIVE, { seconds }),
  activity: (session, kind) => request(session, 'POST', ROUTES.ACTIVITY, { kind }),
  interrupt: (session) => request(session, 'POST', ROUTES.NOTEBOOK_INTERRUPT, {}, 10000),
  openNotebook: (session) => request(session, 'POST', ROUTES.NOTEBOOK_OPEN, {}),
  request,
};
