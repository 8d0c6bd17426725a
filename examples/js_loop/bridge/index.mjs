// loopkit-wire-bridge: expose a JavaScript agent loop to loopkit over its wire protocol
// (docs/wire-protocol.md in the loopkit repository). Plain ES modules, Node >= 20, no
// dependency beyond Node's standard library.
//
//   import { serve } from 'loopkit-wire-bridge';
//   serve({
//     name: 'my-loop', version: '1.0.0', features: ['injection'],
//     createService: ({ clock, uuid, logger, persistence }) => new MyService({ clock, uuid, logger, persistence }),
//   });
//
// The driver (loopkit, in Python) owns virtual time and every external event; this bridge
// runs the loop's JavaScript between them: a command runs synchronously, `run` lets the
// microtask queue drain and answers once it has (quiescence), and every listener the driver
// registered is called back synchronously (the bridge blocks in fs.readSync for the answer).

import './polyfill.mjs';
import { promiseHooks } from 'node:v8';
import { Channel, ChannelClosed } from './framing.mjs';
import { applyEdit } from './edits.mjs';
import {
  AGENT, AGENT_OPTIONS, CHUNK, CONFIG, CONTENT, Codec, EVENT, EVENTS, EVENT_DATA, JSON_VALUE, MESSAGES,
  NOTIFICATION_ARGS, REQUEST, SOURCE, TOOL_CONTEXT, WATERFALLS, decodeError, encodeErrorInfo,
} from './schema.mjs';
import { Tripwire } from './tripwire.mjs';

export { Codec, Unserializable, decodeError, encodeErrorInfo } from './schema.mjs';
export * as shapes from './schema.mjs';

export const PROTOCOL = 1;
export const BRIDGE = Object.freeze({ name: 'loopkit-wire-bridge', version: '0.1.0' });

/**
 * How the bridge reaches a loop. Every entry has a default for a loop whose API is the
 * contract's, spelled in camelCase (`registerModel`, `createAgent`, `whenIdle`, `deriveMessages`,
 * ...); override only what differs.
 *
 * @typedef {object} Api
 * @property {(service: any, event: string, fn: Function) => (() => void)} on
 * @property {(service: any, name: string, adapter: any) => unknown} registerModel
 * @property {(service: any, tool: any) => unknown} registerTool
 * @property {(service: any, name: string, text: string) => unknown} addSystemPromptSection
 * @property {(service: any, id: string, options: object) => any} create
 * @property {(service: any, id: string, sessionId: string, meta: object, options: object) => any} createAgent
 * @property {(service: any, id: string, sessionId: string, options: object) => Promise<any>} resume
 * @property {(service: any, id: string) => any} get
 * @property {(service: any, config: object) => unknown} loadConfig
 * @property {(service: any) => Promise<unknown>} close
 * @property {(stream: (request: object) => AsyncIterable<object>) => any} modelAdapter  the model the loop is given
 * @property {(tool: {name: string, description: string, inputSchema: object, execute: Function}) => any} tool
 */

/**
 * What an implementer passes to `serve`.
 *
 * @typedef {object} Binding
 * @property {string} name
 * @property {string} [version]
 * @property {string[]} [features]  optional features: 'persistence', 'configuration', 'injection'
 * @property {(sources: {clock: () => number, uuid: () => string, nextId: (prefix: string) => string, logger: {warn(m: string): void}, persistence: any}) => any} createService
 * @property {() => any} [newPersistence]  a fresh in-memory persistence backend ('persistence')
 * @property {'camel' | 'snake'} [spelling]  how the loop spells the spec's data shapes (default camel)
 * @property {Partial<Api>} [api]
 */

/** @param {Binding} binding */
export function serve(binding) {
  let bridge;
  try {
    bridge = new Bridge(binding, Channel.fromEnvironment());
    bridge.start();
  } catch (error) {
    if (error instanceof ChannelClosed) process.exit(0);
    process.stderr.write(`loopkit-wire-bridge: ${error?.stack ?? error}\n`);
    process.exit(70);
  }
}

const defaultApi = (spelling) => ({
  on: (s, event, fn) => s.on(event, fn),
  registerModel: (s, name, adapter) => s.registerModel(name, adapter),
  registerTool: (s, tool) => s.registerTool(tool),
  addSystemPromptSection: (s, name, text) => s.addSystemPromptSection(name, text),
  create: (s, id, options) => s.create(id, options),
  createAgent: (s, id, sessionId, meta, options) => s.createAgent(id, sessionId, meta, options),
  resume: (s, id, sessionId, options) => s.resume(id, sessionId, options),
  get: (s, id) => s.get(id),
  loadConfig: (s, config) => s.loadConfig(config),
  close: (s) => s.close(),
  modelAdapter: (stream) => ({ stream }),
  tool: ({ name, description, inputSchema, execute }) =>
    spelling === 'snake' ? { name, description, input_schema: inputSchema, execute } : { name, description, inputSchema, execute },
  agentId: (a) => a.id,
  status: (a) => a.status,
  session: (a) => a.session,
  send: (a, content, source) => (source === undefined ? a.send(content) : a.send(content, source)),
  steer: (a, content, source) => (source === undefined ? a.steer(content) : a.steer(content, source)),
  inject: (a, content, source) => (source === undefined ? a.inject(content) : a.inject(content, source)),
  abort: (a, reason) => (reason == null ? a.abort() : a.abort(reason)),
  cancel: (a, reason) => (reason == null ? a.cancel() : a.cancel(reason)),
  whenIdle: (a) => (a.whenIdle ?? a.when_idle).call(a),
  dispose: (a) => a.dispose(),
  sessionId: (s) => s.id,
  events: (s) => s.events,
  deriveMessages: (s) => (s.deriveMessages ?? s.derive_messages).call(s),
  append: (s, type, data) => s.append(type, data),
});

/** A seeded PRNG (mulberry32) standing in for Math.random: the same seed, the same numbers. */
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Bridge {
  /** @param {Binding} binding @param {Channel} channel */
  constructor(binding, channel) {
    this.binding = binding;
    this.channel = channel;
    this.spelling = binding.spelling ?? 'camel';
    this.api = { ...defaultApi(this.spelling), ...(binding.api ?? {}) };
    this.codec = new Codec(this.spelling, this);
    this.tripwire = new Tripwire();
    this.now = 0;
    this.random = seeded(0);
    this.settleHook = undefined;
    this.capture = null;
    this.runId = undefined;
    this.clear();
  }

  /** Forget every handle (a new simulation run starts from scratch: same ids, same bytes). */
  clear() {
    for (const s of this.services?.values() ?? []) s.dead = true;
    this.seq = 0;
    this.requestSeq = 0;
    /** @type {Map<string, any>} */ this.services = new Map();
    /** @type {Map<string, any>} */ this.persistences = new Map();
    /** @type {Map<string, any>} */ this.agents = new Map();
    this.agentIds = new WeakMap();
    this.sessionAgents = new WeakMap();
    /** @type {Map<string, AbortSignal>} */ this.signals = new Map();
    this.signalIds = new WeakMap();
    /** @type {Map<string, any>} */ this.calls = new Map();
    /** @type {Map<number, any>} */ this.passed = new Map();
    /** @type {Map<string, any>} */ this.streams = new Map();
    /** @type {Map<Promise<unknown>, {id: string, agent: string}[]>} */ this.waiters = new Map();
    this.deferred = [];
  }

  id(prefix) {
    this.seq += 1;
    return `${prefix}${this.seq}`;
  }

  // --------------------------------------------------------------------------- the loop

  start() {
    const b = this.binding;
    this.channel.send({
      type: 'hello',
      protocol: PROTOCOL,
      implementation: { name: String(b.name), version: String(b.version ?? '0') },
      runtime: { name: 'node', version: process.versions.node },
      bridge: BRIDGE,
      features: [...(b.features ?? [])],
    });
    const welcome = this.channel.read();
    if (welcome?.type !== 'welcome') throw new Error(`expected the driver's welcome, got ${JSON.stringify(welcome)}`);
    // The driver's clock and a seeded Math.random: code that reads them directly stays
    // reproducible (the bytes of a run depend only on what the driver sends).
    Date.now = () => this.now;
    Math.random = () => this.random();
    process.on('unhandledRejection', (reason) => {
      this.event({ ev: 'warning', message: `unhandled promise rejection: ${reason?.stack ?? reason}` });
    });
    this.tripwire.enable();
    this.serve();
  }

  /** Answer the driver until it says `run`; then return to the event loop. */
  serve() {
    for (;;) {
      let message;
      try {
        message = this.channel.read();
      } catch (error) {
        if (error instanceof ChannelClosed) process.exit(0);
        throw error;
      }
      if (message.type === 'call' && message.op === 'run') {
        this.beginRun(message.id);
        return;
      }
      this.handle(message);
    }
  }

  beginRun(id) {
    this.runId = id;
    for (const deferred of this.deferred.splice(0)) this.schedule(deferred);
    // A setImmediate callback runs once the microtask queue has drained: quiescence.
    this.tripwire.exempt(() => setImmediate(() => this.endRun()));
  }

  endRun() {
    const found = this.tripwire.take();
    if (found.length) this.event({ ev: 'tripwire', resources: found });
    if (this.settleHook && this.waiters.size === 0) {
      this.settleHook();
      this.settleHook = undefined;
    }
    const agents = {};
    for (const [id, agent] of this.agents) {
      const session = this.api.session(agent);
      agents[id] = [this.api.status(agent), this.api.events(session).length];
    }
    this.channel.send({ type: 'return', id: this.runId, value: { agents } });
    this.runId = undefined;
    try {
      this.serve();
    } catch (error) {
      process.stderr.write(`loopkit-wire-bridge: ${error?.stack ?? error}\n`);
      process.exit(70);
    }
  }

  handle(message) {
    switch (message.type) {
      case 'clock':
        this.now = message.now;
        return;
      case 'deliver':
        this.deliver(message);
        return;
      case 'post': {
        // A command without an answer (registrations, reset): a refusal is reported as an event.
        try {
          const op = POSTS.has(message.op) ? OPS[message.op] : undefined;
          if (!op) throw new Error(`${JSON.stringify(message.op)} cannot be posted`);
          op.call(this, message.args ?? {});
        } catch (error) {
          this.event({ ev: 'post_failed', op: message.op, error: encodeErrorInfo(error) });
        }
        return;
      }
      case 'call': {
        let reply;
        try {
          const op = OPS[message.op];
          if (!op) throw new Error(`unknown op ${JSON.stringify(message.op)}`);
          const value = op.call(this, message.args ?? {});
          reply = { type: 'return', id: message.id, value: value ?? null };
        } catch (error) {
          reply = { type: 'return', id: message.id, error: encodeErrorInfo(error) };
        }
        this.channel.send(reply);
        return;
      }
      default:
        throw new Error(`protocol violation: unexpected ${JSON.stringify(message.type)} message`);
    }
  }

  /** A round trip: ask the driver, serving its nested calls until the reply comes. */
  request(message) {
    this.requestSeq += 1;
    const id = this.requestSeq;
    this.channel.send({ type: 'request', id, ...message });
    for (;;) {
      const reply = this.channel.read();
      if (reply.type === 'reply') {
        if (reply.id !== id) throw new Error(`protocol violation: reply ${reply.id} to request ${id}`);
        return reply;
      }
      if (reply.type === 'call' && reply.op === 'run') throw new Error('protocol violation: run during a request');
      this.handle(reply);
    }
  }

  event(message) {
    this.channel.send({ type: 'event', ...message });
  }

  deliver(message) {
    if (message.op === 'edit' && message.call !== undefined) { // a tool consumed its arguments (§9.1)
      this.edited(this.calls.get(message.call), message.edit);
      return;
    }
    if (message.op === 'settle') {
      const call = this.calls.get(message.call);
      if (!call?.resolve) return; // a leftover of an earlier run
      this.edited(call, message.edit);
      this.calls.delete(message.call);
      if (message.error) call.reject(decodeError(message.error));
      else call.resolve(this.kept(message.passed, this.codec.decode(call.result, message.value), call.result));
      return;
    }
    const state = this.streams.get(message.stream);
    if (!state) return;
    if (message.op === 'edit') { // the model adapter converted the request in place (§9.1)
      this.edited({ value: state.request, shape: REQUEST }, message.edit);
      return;
    }
    if (message.op === 'chunk') state.push(this.codec.decode(CHUNK, message.chunk));
    else if (message.op === 'end') state.end();
    else if (message.op === 'fail') state.fail(decodeError(message.error));
    if (message.op !== 'chunk') this.streams.delete(message.stream);
  }

  // --------------------------------------------------------------------------- handles

  isAgent(value) { return this.agentIds.has(value); }
  isSession(value) { return this.sessionAgents.has(value); }

  /** The id of an agent object, announcing it (id, session, status, log) the first time. */
  agentRef(agent) {
    let id = this.agentIds.get(agent);
    if (id !== undefined) return id;
    id = this.id('a');
    this.agentIds.set(agent, id);
    this.agents.set(id, agent);
    const session = this.api.session(agent);
    this.sessionAgents.set(session, id);
    this.event({
      ev: 'agent', agent: id, id: String(this.api.agentId(agent)), session: String(this.api.sessionId(session)),
      status: this.api.status(agent), events: this.codec.encode(EVENTS, this.api.events(session)),
    });
    return id;
  }

  sessionRef(session) {
    const id = this.sessionAgents.get(session);
    if (id === undefined) throw new Error('a session the bridge has not seen an agent of');
    return id;
  }

  agent(id) {
    const agent = this.agents.get(id);
    if (!agent) throw new Error(`no agent ${id}`);
    return agent;
  }

  session(id) { return this.api.session(this.agent(id)); }

  signalRef(signal) {
    let id = this.signalIds.get(signal);
    if (id !== undefined) return id;
    id = this.id('g');
    this.signalIds.set(signal, id);
    this.signals.set(id, signal);
    const reason = () => String(signal.reason ?? 'aborted');
    if (signal.aborted) {
      this.event({ ev: 'abort', signal: id, reason: reason() }); // fired before the driver saw it
    } else {
      // A round trip, inside the loop's abort(): the driver's listeners on the signal (an adapter's
      // or a tool's abort observer) run before abort() returns, as an AbortSignal's own do (§10).
      signal.addEventListener('abort', () => {
        try {
          this.request({ op: 'abort', signal: id, reason: reason() });
        } catch {
          this.event({ ev: 'abort', signal: id, reason: reason() }); // the driver has gone: a note, at most
        }
      }, { once: true });
    }
    return id;
  }

  signal(id) {
    const signal = this.signals.get(id);
    if (!signal) throw new Error(`no signal ${id}`);
    return signal;
  }

  svc(id) {
    const s = this.services.get(id);
    if (!s) throw new Error(`no service ${id}`);
    return s;
  }

  /** A promise handed to the driver: settled as an event once it settles. */
  track(promise, shape) {
    const id = this.id('p');
    Promise.resolve(promise).then(
      (value) => this.event({ ev: 'settled', promise: id, value: this.codec.encode(shape, value) ?? null }),
      (error) => this.event({ ev: 'settled', promise: id, error: encodeErrorInfo(error) }),
    );
    return { promise: id };
  }

  /** A call the driver settles later (a tool, a pending listener). */
  newCall(extra) {
    const id = this.id('c');
    this.calls.set(id, { ...extra });
    return id;
  }

  pending(call, result) {
    return new Promise((resolve, reject) => Object.assign(this.calls.get(call), { resolve, reject, result }));
  }

  /** A send/steer/inject's content and source, decoded; kept under `passed` when the driver
   * says they are the caller's objects, which it may edit later (§9.1). */
  passing(passed, content, source) {
    const decoded = [this.codec.decode(CONTENT, content), source === undefined ? undefined : this.codec.decode(SOURCE, source)];
    if (passed !== undefined) {
      this.passed.set(passed, {
        content: { value: decoded[0], shape: CONTENT },
        source: { value: decoded[1], shape: SOURCE },
      });
    }
    return decoded;
  }

  /** Apply the driver's in-place edit (§9.1), if there is one, to the `{value, shape}` it is of. */
  edited(record, edit) {
    if (edit && record?.shape) applyEdit(this.codec, record.shape, record.value, edit);
  }

  settled(call, reply, shape) {
    this.edited(this.calls.get(call), reply.edit);
    if (reply.error) {
      this.calls.delete(call);
      throw decodeError(reply.error);
    }
    if (reply.pending) return this.pending(call, shape);
    this.calls.delete(call);
    return this.kept(reply.passed, this.codec.decode(shape, reply.value), shape);
  }

  /** A tool's result or a waterfall listener's own new value, decoded; kept under `passed` when
   * the driver says its code may edit it later (§9.1). */
  kept(passed, value, shape) {
    if (passed !== undefined) this.passed.set(passed, { result: { value, shape } });
    return value;
  }

  encodeArgs(shapes, args) {
    return args.map((arg, i) => this.codec.encode(shapes?.[i] ?? JSON_VALUE, arg) ?? null);
  }

  /** A waiter: the driver learns it settled when the promise settles (v8 promise hooks), not a
   * microtask later, so "released before agent/status(idle)" is observable (IDLE-3). */
  watchSettled() {
    if (this.settleHook) return;
    this.settleHook = promiseHooks.onSettled((promise) => {
      this.capture?.add(promise);
      if (this.waiters.has(promise)) this.releaseWaiters(promise);
    });
  }

  releaseWaiters(promise) {
    const waiters = this.waiters.get(promise) ?? [];
    this.waiters.delete(promise);
    for (const waiter of waiters) {
      const agent = this.agents.get(waiter.agent);
      this.event({ ev: 'settled', promise: waiter.id, agent: waiter.agent, status: agent ? this.api.status(agent) : null, value: null });
    }
  }

  schedule(deferred) {
    const fire = () => {
      let value = null;
      let error;
      try {
        value = OPS[deferred.op].call(this, deferred.args ?? {}) ?? null;
      } catch (e) {
        error = encodeErrorInfo(e);
      }
      this.event({ ev: 'deferred', defer: deferred.id, value, ...(error ? { error } : {}) });
    };
    if (deferred.ticks <= 0) {
      fire();
      return;
    }
    let left = deferred.ticks;
    const hop = () => {
      left -= 1;
      if (left > 0) queueMicrotask(hop);
      else fire();
    };
    queueMicrotask(hop);
  }

  // --------------------------------------------------------------------------- what the loop is given

  sources(s) {
    const bridge = this;
    return {
      clock: () => bridge.now,
      uuid: () => (s.dead ? '00000000-0000-4000-8000-000000000000' : String(bridge.request({ op: 'uuid' }).value)),
      nextId: (prefix) => (s.dead ? `${prefix}-0` : String(bridge.request({ op: 'next_id', prefix }).value)),
      logger: {
        warn: (message) => { if (!s.dead) bridge.event({ ev: 'warning', message: String(message) }); },
        warning: (message) => { if (!s.dead) bridge.event({ ev: 'warning', message: String(message) }); },
      },
    };
  }

  forwarder(s, event, listener, kind, passive) {
    const bridge = this;
    const codec = this.codec;
    if (kind === 'waterfall') {
      const w = WATERFALLS[event] ?? { args: [], value: JSON_VALUE, result: JSON_VALUE };
      return (...args) => {
        const next = args.pop();
        const value = args.pop();
        if (s.dead) return next();
        if (passive) { // an observer: the call travels as an event, the chain runs on at once
          bridge.event({ ev: 'notify', listener, args: [...bridge.encodeArgs(w.args, args), codec.encode(w.value, value) ?? null] });
          return next();
        }
        const call = bridge.newCall({ next, result: w.result, value, shape: w.value });
        const reply = bridge.request({
          op: 'waterfall', listener, call, args: bridge.encodeArgs(w.args, args), value: codec.encode(w.value, value) ?? null,
        });
        return bridge.settled(call, reply, w.result);
      };
    }
    const shapes = NOTIFICATION_ARGS[event];
    // The log of an agent the driver has not been handed yet travels in its announcement.
    const unseen = (args) => shapes?.[0]?.kind === 'session' && !bridge.sessionAgents.has(args[0]);
    if (kind === 'awaited') {
      return (...args) => {
        if (s.dead || unseen(args)) return undefined;
        const call = bridge.newCall({});
        const reply = bridge.request({ op: 'awaited', listener, call, args: bridge.encodeArgs(shapes, args) });
        return bridge.settled(call, reply, JSON_VALUE);
      };
    }
    if (passive) {
      return (...args) => {
        if (!s.dead && !unseen(args)) bridge.event({ ev: 'notify', listener, args: bridge.encodeArgs(shapes, args) });
      };
    }
    return (...args) => {
      if (s.dead || unseen(args)) return;
      const reply = bridge.request({ op: 'listener', listener, args: bridge.encodeArgs(shapes, args) });
      if (reply.error) throw decodeError(reply.error);
    };
  }

  openStream(s, model, request) {
    const bridge = this;
    const state = {
      request, queue: [], waiting: null, done: false, error: null, closed: false,
      push(chunk) { state.waiting ? state.take().resolve({ value: chunk, done: false }) : state.queue.push(chunk); },
      end() { state.done = true; state.waiting?.resolve && state.take().resolve({ value: undefined, done: true }); },
      fail(error) { state.error = error; state.waiting && state.take().reject(error); },
      take() { const w = state.waiting; state.waiting = null; return w; },
    };
    const iterator = {
      [Symbol.asyncIterator]() { return iterator; },
      next() {
        if (state.queue.length) return Promise.resolve({ value: state.queue.shift(), done: false });
        if (state.error) return Promise.reject(state.error);
        if (state.done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => { state.waiting = { resolve, reject }; });
      },
      return() {
        if (!state.done && !state.error && !state.closed && !s.dead) bridge.event({ ev: 'stream_closed', stream: id });
        state.closed = true;
        state.done = true;
        bridge.streams.delete(id);
        if (state.waiting) state.take().resolve({ value: undefined, done: true });
        return Promise.resolve({ value: undefined, done: true });
      },
    };
    const id = this.id('s');
    // The loop is handed an async generator, as most JavaScript model adapters are: its
    // return() waits behind a pending next(), so a loop that awaits return() on a stream it
    // stopped reading (an abort while a read is pending) waits as it would on a real adapter.
    const generator = (async function* stream() { yield* iterator; })();
    if (s.dead) return generator; // a leftover of an earlier run: it never yields
    this.streams.set(id, state);
    // An event, not a round trip: the driver hands the request to its model when it reads the
    // event, in order; a model that fails at once fails the first read (FINISH-2 allows both).
    this.event({ ev: 'stream', stream: id, model, request: this.codec.encode(REQUEST, request) });
    return generator;
  }

  runTool(s, tool, args, context) {
    if (s.dead) return new Promise(() => {});
    const call = this.newCall({ value: args, shape: JSON_VALUE });
    const promise = this.pending(call, CONTENT);
    this.event({ ev: 'tool', call, tool, arguments: this.codec.json(args), context: this.codec.encode(TOOL_CONTEXT, context) });
    return promise;
  }
}

/** The ops the driver may post (no answer): they return nothing and start no work. */
const POSTS = new Set(['reset', 'on', 'unregister', 'register_model', 'register_tool', 'add_section', 'hold_loads', 'edit_passed']);

/** The driver's calls: `{type: "call", id, op, args}` -> `{type: "return", id, value | error}`. */
const OPS = {
  reset({ seed = 0 }) {
    this.clear();
    this.random = seeded(seed);
    return null;
  },
  new_persistence() {
    if (!this.binding.newPersistence) throw new Error(`${this.binding.name} has no persistence`);
    const id = this.id('m');
    this.persistences.set(id, this.binding.newPersistence());
    return { persistence: id };
  },
  hold_loads({ persistence }) {
    // From now on each load() of this backend asks the driver first (a `load` request, §10): the
    // driver may let time pass, and callers act, inside a resume's load.
    const backend = this.persistences.get(persistence);
    if (!backend || typeof backend.load !== 'function') throw new Error(`no persistence ${persistence} with a load()`);
    if (backend.load.held) return null;
    const bridge = this;
    const load = backend.load;
    const held = async function load_(sessionId, ...rest) {
      const call = bridge.newCall({});
      const reply = bridge.request({ op: 'load', persistence, call, session: String(sessionId) });
      await bridge.settled(call, reply, JSON_VALUE);
      return load.call(this, sessionId, ...rest);
    };
    held.held = true;
    backend.load = held;
    return null;
  },
  service({ persistence = null }) {
    const id = this.id('v');
    const s = { id, dead: false, service: null, registrations: new Map() };
    const sources = this.sources(s);
    const backend = persistence === null ? null : this.persistences.get(persistence);
    if (persistence !== null && !backend) throw new Error(`no persistence ${persistence}`);
    s.service = this.binding.createService({ ...sources, persistence: backend });
    // The bridge's own listeners come first: the driver mirrors every status and log event.
    this.api.on(s.service, 'agent/status', (agent, status) => {
      if (!s.dead) this.event({ ev: 'status', agent: this.agentRef(agent), status });
    });
    this.api.on(s.service, 'session/event', (session, event) => {
      const agent = this.sessionAgents.get(session);
      if (!s.dead && agent !== undefined) this.event({ ev: 'log', agent, event: this.codec.encode(EVENT, event) });
    });
    this.services.set(id, s);
    return { service: id };
  },
  on({ service, event, listener, kind = 'notification', passive = false }) {
    const s = this.svc(service);
    s.registrations.set(listener, this.api.on(s.service, event, this.forwarder(s, event, listener, kind, passive)));
    return null;
  },
  unregister({ service, registration }) {
    const s = this.svc(service);
    const undo = s.registrations.get(registration);
    s.registrations.delete(registration);
    if (typeof undo === 'function') undo();
    return null;
  },
  register_model({ service, name, model }) {
    const s = this.svc(service);
    const adapter = this.api.modelAdapter((request) => this.openStream(s, model, request));
    s.registrations.set(model, this.api.registerModel(s.service, name, adapter));
    return null;
  },
  register_tool({ service, tool, name, description, input_schema: inputSchema }) {
    const s = this.svc(service);
    const execute = (args, context) => this.runTool(s, tool, args, context);
    const made = this.api.tool({ name, description, inputSchema: this.codec.unjson(inputSchema), execute });
    s.registrations.set(tool, this.api.registerTool(s.service, made));
    return null;
  },
  add_section({ service, section, name, text }) {
    const s = this.svc(service);
    s.registrations.set(section, this.api.addSystemPromptSection(s.service, name, text));
    return null;
  },
  create({ service, agent_id: id, options }) {
    const s = this.svc(service);
    return this.codec.encode(AGENT, this.api.create(s.service, id, this.codec.decode(AGENT_OPTIONS, options ?? {})));
  },
  create_agent({ service, agent_id: id, session_id: sessionId, meta, options }) {
    const s = this.svc(service);
    const agent = this.api.createAgent(s.service, id, sessionId, this.codec.unjson(meta ?? {}), this.codec.decode(AGENT_OPTIONS, options ?? {}));
    return this.codec.encode(AGENT, agent);
  },
  resume({ service, agent_id: id, session_id: sessionId, options }) {
    const s = this.svc(service);
    return this.track(this.api.resume(s.service, id, sessionId, this.codec.decode(AGENT_OPTIONS, options ?? {})), AGENT);
  },
  get({ service, agent_id: id }) {
    const found = this.api.get(this.svc(service).service, id);
    return found == null ? null : this.codec.encode(AGENT, found);
  },
  load_config({ service, config }) {
    const made = this.api.loadConfig(this.svc(service).service, this.codec.decode(CONFIG, config));
    return Array.isArray(made) ? made.map((agent) => this.codec.encode(AGENT, agent)) : null;
  },
  close({ service }) {
    return this.track(this.api.close(this.svc(service).service), JSON_VALUE);
  },
  send({ agent, content, source, passed }) {
    this.api.send(this.agent(agent), ...this.passing(passed, content, source));
    return null;
  },
  steer({ agent, content, source, passed }) {
    this.api.steer(this.agent(agent), ...this.passing(passed, content, source));
    return null;
  },
  inject({ agent, content, source, passed }) {
    const a = this.agent(agent);
    return this.track(this.api.inject(a, ...this.passing(passed, content, source)), JSON_VALUE);
  },
  edit_passed({ passed, field, edit }) {
    // the caller edited, in place, what it passed to a send/steer/inject (§9.1)
    this.edited(this.passed.get(passed)?.[field], edit);
    return null;
  },
  abort({ agent, reason }) {
    this.api.abort(this.agent(agent), reason);
    return null;
  },
  cancel({ agent, reason }) {
    this.api.cancel(this.agent(agent), reason);
    return null;
  },
  dispose({ agent }) {
    this.api.dispose(this.agent(agent));
    return null;
  },
  when_idle({ agent }) {
    const a = this.agent(agent);
    this.watchSettled();
    const capture = new Set();
    this.capture = capture;
    let promise;
    try {
      promise = Promise.resolve(this.api.whenIdle(a));
    } finally {
      this.capture = null;
    }
    const id = this.id('p');
    if (capture.has(promise)) return { promise: id, settled: true, status: this.api.status(a) };
    this.waiters.set(promise, [...(this.waiters.get(promise) ?? []), { id, agent }]);
    // A promise that had settled before this call never settles again: a then() catches it.
    const late = () => { if (this.waiters.has(promise)) this.releaseWaiters(promise); };
    promise.then(late, late);
    return { promise: id };
  },
  derive_messages({ agent }) {
    return this.codec.encode(MESSAGES, this.api.deriveMessages(this.session(agent)));
  },
  append({ agent, event_type: type, data, passed }) {
    const session = this.session(agent);
    const shape = { kind: 'event' };
    const decoded = this.codec.decode(shape, { type, data });
    if (passed !== undefined) this.passed.set(passed, { data: { value: decoded.data, shape: EVENT_DATA[type] ?? JSON_VALUE } });
    return this.codec.encode(EVENT, this.api.append(session, type, decoded.data));
  },
  events({ agent }) {
    return this.codec.encode(EVENTS, this.api.events(this.session(agent)));
  },
  next({ call, edit }) {
    const found = this.calls.get(call);
    if (!found?.next) throw new Error(`no pending waterfall call ${call}`);
    this.edited(found, edit); // the rest of the chain runs on the value as the listener left it
    let rest;
    try {
      rest = found.next();
    } catch (error) {
      rest = Promise.reject(error);
    }
    return this.track(rest, found.result ?? JSON_VALUE);
  },
  defer({ ticks = 0, op, args }) {
    if (!OPS[op] || op === 'run' || op === 'defer') throw new Error(`cannot defer ${JSON.stringify(op)}`);
    const id = this.id('d');
    this.deferred.push({ id, ticks: Number(ticks), op, args });
    return { defer: id };
  },
};
