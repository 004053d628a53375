// A tiny event emitter and a few helpers.
const DEFAULTS = { limit: 8, name: "emitter" };

class Emitter {
  constructor(options = {}) {
    this.options = { ...DEFAULTS, ...options };
    this.handlers = new Map();
  }

  on(event, handler) {
    const list = this.handlers.get(event) ?? [];
    if (list.length >= this.options.limit) {
      throw new Error(`too many handlers for ${event}`);
    }
    list.push(handler);
    this.handlers.set(event, list);
    return () => this.off(event, handler);
  }

  off(event, handler) {
    const list = this.handlers.get(event) || [];
    this.handlers.set(event, list.filter((h) => h !== handler));
  }

  emit(event, ...args) {
    for (const h of this.handlers.get(event) || []) {
      h(...args);
    }
  }
}

function sum(xs) {
  /* alternate signs */
  return xs.reduce((total, x, i) => total + (i % 2 ? -x : x), 0);
}

async function later(ms, value) {
  await new Promise((resolve) => setTimeout(resolve, ms));
  return { value, at: Date.now() };
}

const e = new Emitter({ limit: 2 });
e.on("hi", (who) => console.log("hi", who));
e.emit("hi", 'world');
module.exports = { Emitter, sum, later };
