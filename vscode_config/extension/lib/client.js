// A small JSON client for the session's control API (bearer token, short timeouts).
'use strict';

const http = require('http');
const https = require('https');

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
      reject(new Error(`bad control URL ${session.controlUrl}: ${err.message}`));
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
    req.on('error', reject);
    if (payload) {
      req.write(payload);
    }
    req.end();
  });
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
  return send(session, 'POST', '/api/notebook/execute', { code, stream: true }, 0, (res, resolve) => {
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
  executeStreaming,
  // The status now, or (given the version last seen) once it changes.
  status: (session, seen) => (Number.isInteger(seen)
    ? request(session, 'GET', `/api/status?version=${seen}&wait=${WAIT_SECONDS}`, undefined,
      WAIT_SECONDS * 1000 + TIMEOUT_MS)
    : request(session, 'GET', '/api/status')),
  resume: (session) => request(session, 'POST', '/api/resume', {}),
  keepalive: (session, seconds) => request(session, 'POST', '/api/keepalive', { seconds }),
  activity: (session, kind) => request(session, 'POST', '/api/activity', { kind }),
  interrupt: (session) => request(session, 'POST', '/api/notebook/interrupt', {}, 10000),
  openNotebook: (session) => request(session, 'POST', '/api/notebook/open', {}),
  request,
};
