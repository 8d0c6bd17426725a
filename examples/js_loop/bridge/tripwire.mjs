// The timer and I/O tripwire. Over the wire, "quiescent" means "the microtask queue has drained"
// (a setImmediate callback has fired). That is only unambiguous when the implementation creates
// no timers or I/O of its own: a setTimeout, a file read or a socket would fire later, at a wall
// time the driver does not control. async_hooks sees every such resource being created; the
// bridge reports them (with where they were created) instead of guessing.

import { createHook } from 'node:async_hooks';

/** The bridge's own modules (frames in them are not where the implementation created anything). */
const OWN = new URL('.', import.meta.url).href;
const isOwn = (frame) => frame.includes('node:') || (frame.includes(OWN) && !frame.slice(frame.indexOf(OWN) + OWN.length).includes('/'));

/** Resource types that never outlive a drain of the microtask queue. */
const HARMLESS = new Set(['PROMISE', 'TickObject', 'Microtask']);

export class Tripwire {
  constructor() {
    /** @type {{type: string, at: string}[]} */
    this.found = [];
    this.own = 0;
    // trackPromises: false (Node >= 26) skips the promise hooks; older runtimes ignore it.
    this.hook = createHook({ init: (_id, type) => this.#init(type), trackPromises: false });
  }

  enable() { this.hook.enable(); }
  disable() { this.hook.disable(); }

  /** Run `fn` without tripping (the bridge's own setImmediate). */
  exempt(fn) {
    this.own += 1;
    try {
      return fn();
    } finally {
      this.own -= 1;
    }
  }

  /** The resources created since the last call. */
  take() {
    return this.found.splice(0);
  }

  #init(type) {
    if (this.own > 0 || HARMLESS.has(type)) return;
    const frames = String(new Error().stack).split('\n').slice(1).map((line) => line.trim());
    const at = frames.find((line) => !isOwn(line.replace(/:\d+:\d+\)?$/, ''))) ?? frames[0] ?? '?';
    this.found.push({ type, at: at.replace(/^at /, '') });
  }
}
