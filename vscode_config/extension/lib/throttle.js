// At most one report per interval: the first goes at once, later ones are folded
// into a single report at the end of the interval (carrying the latest kind).
'use strict';

class Throttle {
  constructor(intervalMs, send, clock = Date.now, timers = { setTimeout, clearTimeout }) {
    this.intervalMs = intervalMs;
    this.send = send;
    this.clock = clock;
    this.timers = timers;
    this.lastSent = -Infinity;
    this.pending = null;
    this.timer = null;
  }

  report(kind) {
    const wait = this.lastSent + this.intervalMs - this.clock();
    if (wait <= 0 && this.timer === null) {
      this.fire(kind);
      return;
    }
    this.pending = kind;
    if (this.timer === null) {
      this.timer = this.timers.setTimeout(() => {
        this.timer = null;
        const next = this.pending;
        this.pending = null;
        if (next !== null) {
          this.fire(next);
        }
      }, Math.max(0, wait));
    }
  }

  fire(kind) {
    this.lastSent = this.clock();
    try {
      const sending = this.send(kind);
      if (sending && typeof sending.catch === 'function') {
        sending.catch(() => undefined);
      }
    } catch (err) {
      // A failed report is not worth more than a lost one.
    }
  }

  dispose() {
    if (this.timer !== null) {
      this.timers.clearTimeout(this.timer);
      this.timer = null;
    }
  }
}

module.exports = { Throttle };
