// An agent loop in JavaScript, written from the contract (../shared/spec/agent-loop-spec.md),
// the way a JavaScript team would write it: camelCase data, promises, AbortController, an event
// bus of plain functions. It knows nothing about loopkit: bridge.mjs exposes it over the wire.
//
// Comments cite the rule ids they implement. Shapes (camelCase spellings of section 0b):
//   blocks   {type:'text', text} {type:'reasoning', text} {type:'tool-call', id, name, arguments}
//            {type:'tool-result', toolCallId, content, isError} {type:'image', url, mimeType?}
//            any block may carry providerData (opaque, carried unchanged)
//   sources  {kind:'user'} {kind:'plugin', plugin} {kind:'agent', agentId}
//   chunks   block-start{index, blockType} text-delta{index, text} reasoning-delta{index, text}
//            tool-call-delta{index, id, name?, argumentsDelta} block-end{index, block}
//            usage{usage:{inputTokens, outputTokens, ...}} finish{reason:{kind, message?, code?}}
//   events   {type, seq, time, data} with camelCase data keys (callId, isError, ...)

/** @typedef {{kind: string, [key: string]: unknown}} Source */
/** @typedef {{type: string, [key: string]: unknown}} Block */
/** @typedef {{type: string, seq: number, time: number, data: any}} SessionEvent */
/** @typedef {{warn(message: string): void}} Logger */

const USER = Object.freeze({ kind: 'user' });
const ABORTED = Symbol('aborted');

/** An error with an optional machine-readable code (ERR-7). */
export class LoopError extends Error {
  /** @param {string} message @param {string} [code] */
  constructor(message, code) {
    super(message);
    this.name = 'LoopError';
    if (code !== undefined) this.code = code;
  }
}

// ----------------------------------------------------------------------------- JSON values

/** Throw unless `value` is plain JSON (LOG-1): null, booleans, finite numbers, strings, arrays
 * and plain objects, all the way down. `JSON.stringify` alone would silently drop functions and
 * undefined, so check the shape first. */
function assertJson(value, path = 'data') {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`${path} is not JSON: ${value}`);
    return;
  }
  if (Array.isArray(value)) {
    value.forEach((item, i) => assertJson(item, `${path}[${i}]`));
    return;
  }
  if (typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    for (const [key, item] of Object.entries(value)) assertJson(item, `${path}.${key}`);
    return;
  }
  const kind = typeof value === 'object' ? value.constructor?.name ?? 'object' : typeof value;
  throw new TypeError(`${path} is not JSON-serialisable (${kind})`);
}

/** A deep copy of checked JSON data (the log keeps a snapshot, LOG-1). */
const snapshot = (value) => JSON.parse(JSON.stringify(value));

/** @param {unknown} content @returns {Block[]} */
function toBlocks(content) {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (Array.isArray(content)) return content;
  throw new TypeError(`content must be a string or a list of blocks, got ${typeof content}`);
}

const errorMessage = (e) => (e instanceof Error ? e.message : String(e));
const errorCode = (e) => (e && typeof e.code === 'string' ? e.code : undefined);
const errorName = (e) => (e instanceof Error ? e.name : typeof e);

/** Resolve with `promise`'s value, or with ABORTED as soon as `signal` fires (a model, a tool or
 * a listener that ignores the signal still stops the step, TOOL-5). */
function abortable(promise, signal) {
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.resolve(ABORTED);
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(ABORTED);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => { signal.removeEventListener('abort', onAbort); resolve(value); },
      (error) => { signal.removeEventListener('abort', onAbort); signal.aborted ? resolve(ABORTED) : reject(error); },
    );
  });
}

// ----------------------------------------------------------------------------- the event bus

/** One bus per service: notifications (sync), waterfalls (async chains) and parallel awaits. */
export class EventBus {
  /** @type {Map<string, Function[]>} */
  #listeners = new Map();

  /** @param {string} event @param {Function} listener @returns {() => void} */
  on(event, listener) {
    const list = this.#listeners.get(event) ?? [];
    this.#listeners.set(event, [...list, listener]);
    return () => {
      this.#listeners.set(event, (this.#listeners.get(event) ?? []).filter((fn) => fn !== listener));
    };
  }

  /** Call every listener synchronously, in registration order; the first error is rethrown
   * once all have run (the emitter contains it). */
  emit(event, ...args) {
    let failure;
    for (const listener of this.#listeners.get(event) ?? []) {
      try {
        listener(...args);
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure) throw failure.error;
  }

  /** Each listener gets `(...args, value, next)`; `next()` runs the rest of the chain, ending
   * in `fallback(value)`; a listener rewrites by returning something else. */
  waterfall(event, args, value, fallback) {
    const chain = this.#listeners.get(event) ?? [];
    const run = async (i) => (i >= chain.length ? fallback(value) : chain[i](...args, value, () => run(i + 1)));
    return run(0);
  }

  /** Start every listener at once and wait for all; the first failure is rethrown. */
  async parallel(event, ...args) {
    const runs = (this.#listeners.get(event) ?? []).map((listener) => {
      try {
        return Promise.resolve(listener(...args));
      } catch (error) {
        return Promise.reject(error);
      }
    });
    const results = await Promise.allSettled(runs);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }
}

// ----------------------------------------------------------------------------- the session log

export class Session {
  #id;
  #bus;
  #clock;
  #onAppend;
  /** @type {SessionEvent[]} */
  #events;

  constructor({ id, bus, clock, events = [], onAppend = () => {} }) {
    this.#id = id;
    this.#bus = bus;
    this.#clock = clock;
    this.#events = events.map(snapshot);
    this.#onAppend = onAppend;
  }

  get id() { return this.#id; }
  get events() { return this.#events.slice(); }
  get length() { return this.#events.length; }

  /** LOG-1: reject non-JSON up front and store a snapshot; LOG-2: push, then notify (a throwing
   * listener leaves the event in the log and reaches the caller). */
  append(type, data) {
    assertJson(data);
    const event = { type, seq: this.#events.length, time: this.#clock(), data: snapshot(data) };
    this.#events.push(event);
    this.#onAppend(event);
    this.#bus.emit('session/event', this, event);
    return event;
  }

  /** LOOP-3: the number of the last turn/start (0 when there is none). */
  lastTurn() {
    for (let i = this.#events.length - 1; i >= 0; i--) {
      if (this.#events[i].type === 'turn/start') return this.#events[i].data.turn;
    }
    return 0;
  }

  /** INJ-1: whether a turn is open, decided from the log. */
  turnOpen() {
    for (let i = this.#events.length - 1; i >= 0; i--) {
      const { type } = this.#events[i];
      if (type === 'turn/end') return false;
      if (type === 'turn/start') return true;
    }
    return false;
  }

  /** LOG-5: the step still open in the last turn, or undefined. */
  openStep() {
    for (let i = this.#events.length - 1; i >= 0; i--) {
      const { type, data } = this.#events[i];
      if (type === 'step/end' || type === 'turn/end' || type === 'turn/start') return undefined;
      if (type === 'step/start') return data.step;
    }
    return undefined;
  }

  /** LOG-7: the conversation the log describes. */
  deriveMessages() {
    const wrap = (tag, data) => [
      { type: 'text', text: `<${tag} source="${data.source?.kind ?? 'user'}">` },
      ...data.content,
      { type: 'text', text: `</${tag}>` },
    ];
    const out = [];
    for (const { type, data } of this.#events) {
      if (type === 'user/message') out.push({ role: 'user', content: snapshot(data.content) });
      else if (type === 'assistant/message') out.push({ role: 'assistant', content: snapshot(data.content) });
      else if (type === 'tool/result') {
        out.push({ role: 'user', content: [{ type: 'tool-result', toolCallId: data.callId, content: snapshot(data.content), isError: data.isError }] });
      } else if (type === 'steering/message') out.push({ role: 'user', content: snapshot(wrap('steering', data)) });
      else if (type === 'context/message') out.push({ role: 'user', content: snapshot(wrap('context', data)) });
    }
    return out;
  }
}

// ----------------------------------------------------------------------------- assembling a message

/** ASM-1..4: a step's message from its chunks. */
class Assembler {
  /** @type {Map<number, {block?: Block, kind: string, text: string, id?: string, name?: string, args: string}>} */
  #blocks = new Map();
  usage = undefined;
  finish = undefined;

  add(chunk) {
    const slot = (index, kind) => {
      if (!this.#blocks.has(index)) this.#blocks.set(index, { kind, text: '', args: '' });
      return this.#blocks.get(index);
    };
    switch (chunk.type) {
      case 'block-start': slot(chunk.index, chunk.blockType); break;
      case 'text-delta':
      case 'reasoning-delta': {
        const b = slot(chunk.index, chunk.type === 'text-delta' ? 'text' : 'reasoning');
        if (!b.block) b.text += chunk.text; // ASM-1: ignored after block-end
        break;
      }
      case 'tool-call-delta': {
        const b = slot(chunk.index, 'tool-call');
        if (b.block) break;
        b.id ??= chunk.id;
        if (chunk.name !== undefined) b.name ??= chunk.name;
        b.args += chunk.argumentsDelta ?? '';
        break;
      }
      case 'block-end': slot(chunk.index, chunk.block?.type ?? 'text').block = snapshot(chunk.block); break;
      case 'usage': this.usage = snapshot(chunk.usage); break; // ASM-4: the last one wins
      case 'finish': this.finish = chunk.reason; break;
      default: break; // an unknown chunk type carries nothing the message needs
    }
  }

  /** ASM-3: index order; ASM-2: unclosed blocks as built from their deltas. */
  message() {
    const content = [...this.#blocks.entries()].sort(([a], [b]) => a - b).map(([, b]) => {
      if (b.block) return b.block;
      if (b.kind === 'tool-call') return { type: 'tool-call', id: b.id ?? '', name: b.name ?? '', arguments: b.args };
      return { type: b.kind === 'reasoning' ? 'reasoning' : 'text', text: b.text };
    });
    return { role: 'assistant', content };
  }
}

const withoutToolCalls = (message) => ({ ...message, content: (message.content ?? []).filter((b) => b?.type !== 'tool-call') });

/** TOOL-2: JSON arguments parsed; '' is {}; anything else passes through raw. */
function parseArguments(raw) {
  if (raw === '' || raw === undefined) return {};
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** TOOL-3: a failure as a tool result. */
function errorResult(callId, error) {
  const result = { callId, content: [{ type: 'text', text: `Error: ${errorMessage(error)}` }], isError: true };
  const code = errorCode(error);
  if (code !== undefined) result.error = { name: errorName(error), code };
  return result;
}

// ----------------------------------------------------------------------------- the agent

class Turn {
  constructor(number) {
    this.number = number;
    this.step = 0;
    this.opened = false;
    this.closed = false;
    this.stepOpen = false;
    this.notifyEnd = true;
    this.failure = undefined;
    this.aborted = undefined;
    this.maxTokens = false;
  }
}

export class Agent {
  #id;
  #service;
  #bus;
  #options;
  #logger;
  #status = 'idle';
  /** @type {{content: Block[], source: Source}[]} */ #queued = [];
  /** @type {{content: Block[], source: Source}[]} */ #steering = [];
  /** CANCEL-1: the turn-scoped cancel marker: the reason, or undefined when not armed. */
  #marker = undefined;
  /** @type {AbortController | undefined} */ #step = undefined;
  // DISP-2: aborted by dispose(), so a waterfall awaited outside a step (the continuation) whose
  // listener never returns cannot keep the driver alive
  #lifetime = new AbortController();
  /** @type {Turn | undefined} */ #turn = undefined;
  /** @type {(() => void)[]} */ #waiters = [];
  #wake = undefined;
  #disposed = false;
  #exited;
  #exit;

  constructor({ id, session, service, bus, options, logger }) {
    this.#id = id;
    this.session = session;
    this.#service = service;
    this.#bus = bus;
    this.#options = { ...options };
    this.#logger = logger;
    ({ promise: this.#exited, resolve: this.#exit } = Promise.withResolvers());
    // LOOP-1: one driver for the agent's whole life. It starts on a later microtask, so the
    // caller's synchronous code after creation runs before it (the window CANCEL-W0 names).
    queueMicrotask(() => {
      this.drive()
        .catch((error) => this.#warn(this.session.lastTurn(), 'the driver failed', error))
        .finally(() => this.#finish());
    });
  }

  get id() { return this.#id; }
  get status() { return this.#status; }

  // --------------------------------------------------------------------------- verbs

  /** Queue a prompt for the next turn (LOOP-9: agent/queued). */
  send(content, source = USER) {
    this.#live('send');
    const item = { content: toBlocks(content), source };
    this.#queued.push(item);
    this.#emitQueued(item, false);
    this.#wakeDriver();
  }

  /** STEER-1: like send() when not running; else steering for the running turn. */
  steer(content, source = USER) {
    this.#live('steer');
    if (this.#status !== 'running') return this.send(content, source);
    const item = { content: toBlocks(content), source };
    this.#steering.push(item);
    this.#emitQueued(item, true);
  }

  /** INJ-1..4: context without running the model. */
  async inject(content, source = USER) {
    this.#live('inject');
    const blocks = toBlocks(content);
    assertJson(source, 'source'); // INJ-4: a bad source raises and writes nothing
    const session = this.session;
    if (session.turnOpen()) {
      const before = session.length;
      try {
        session.append('context/message', { content: blocks, source });
      } catch (error) {
        if (session.length === before) throw error; // bad content: nothing written
        this.#warn(session.lastTurn(), 'a session/event listener failed', error);
      }
      return;
    }
    // INJ-2: a one-shot turn, balanced whatever throws, then flushed.
    const turn = new Turn(session.lastTurn() + 1);
    let badInput;
    try {
      this.#appendContained(turn, 'turn/start', { turn: turn.number, trigger: { kind: 'injection', source } });
      const before = session.length;
      try {
        session.append('context/message', { content: blocks, source });
      } catch (error) {
        if (session.length === before) badInput = error; // INJ-4: raised once the turn is closed
        else this.#lateFailure(turn, error, 'a session/event listener on context/message');
      }
    } finally {
      this.#appendContained(turn, 'turn/end', { turn: turn.number, reason: { kind: 'completed' } });
      await this.#flush(turn);
    }
    if (badInput) throw badInput;
  }

  /** ABORT-1: abort the in-flight step only. */
  abort(reason = 'aborted') {
    if (this.#disposed) return;
    this.#step?.abort(reason);
  }

  /** CANCEL-1: clear both FIFOs, abort the step, arm the marker (CANCEL-3: only when there is
   * something to cancel). */
  cancel(reason = 'cancelled') {
    if (this.#disposed) return;
    const pending = this.#status === 'running' || this.#step || this.#queued.length || this.#steering.length;
    if (!pending) return;
    this.#queued = [];
    this.#steering = [];
    this.#marker = reason;
    this.#step?.abort(reason);
  }

  /** IDLE-1..4: resolves at quiescence; on a disposed agent, once its driver has exited. */
  whenIdle() {
    if (this.#disposed) return this.#exited.then(() => {});
    if (this.#status !== 'running' && this.#queued.length === 0) return Promise.resolve();
    const { promise, resolve } = Promise.withResolvers();
    this.#waiters.push(resolve);
    return promise;
  }

  /** DISP-1..5: synchronous, idempotent, cannot fail. */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    try {
      this.#queued = [];
      this.#steering = [];
      this.#service.forget(this); // SVC-6: before the status, which a listener may break
      this.#setStatus('disposed');
      this.#step?.abort('disposed');
      this.#lifetime.abort('disposed');
      this.#wakeDriver();
    } catch (error) {
      this.#warn(this.session.lastTurn(), 'disposal', error);
    }
  }

  // --------------------------------------------------------------------------- the driver

  /** LOOP-1: wait (idle) for work, run a turn, repeat; the cancel windows on the way. */
  async drive() {
    let woken = true; // the first iteration is like a wake-up (window 0 before it)
    while (!this.#disposed) {
      // LOOP-8: steering found between turns (too late for the last one, or added while a
      // dropped turn was being set up, CANCEL-W2) is never stranded: it becomes prompts.
      for (const item of this.#steering.splice(0)) this.#queued.push(item);
      if (this.#queued.length === 0) {
        // Quiescent. An armed marker here governs nothing any more (window 0, CANCEL-W0;
        // MARKER-1): reset it, settle (IDLE-2), park until something is queued.
        this.quiesce();
        if (this.#queued.length === 0 && !this.#disposed) {
          // An idle listener may have queued work, taken a waiter for it and cancelled it: the
          // waiter came after the release before the event, and nothing is queued (CANCEL-W0).
          this.releaseWaiters();
          await this.#park();
        }
        woken = true;
        continue;
      }
      // Window 1 (CANCEL-W1): woken from the idle wait, not yet running. cancel() cleared the
      // queue, so what is queued now came after it: the marker governs nothing; run it.
      if (woken && this.#marker !== undefined) this.#marker = undefined;
      woken = false;
      if (this.#status !== 'running') {
        this.#setStatus('running');
        if (this.#disposed) break;
        if (this.#marker !== undefined && this.dropInWindow2()) continue;
      }
      await this.#runTurn();
      if (this.#turn?.opened) await this.#flush(this.#turn);
      this.#turn = undefined;
      // After the turn returns, flush included: a cancel made while the turn flushed governed
      // it (it cleared what was queued then), not the prompts sent after it.
      this.endIteration();
    }
  }

  /** Nothing queued: reset the marker and go idle (releasing waiters first, IDLE-3). */
  quiesce() {
    this.#marker = undefined;
    if (this.#status === 'running') this.#setStatus('idle');
    else this.releaseWaiters();
  }

  /** CANCEL-W2: an agent/status('running') listener cancelled. The turn is dropped (no
   * turn/start). Returns true when no prompt is queued: the driver starts over (steering the
   * listeners added becomes the replacement; with nothing at all it goes back to idle, a real
   * transition). Otherwise the replacement runs in this same running period, and waiters wait
   * for it. */
  dropInWindow2() {
    this.#marker = undefined;
    return this.#queued.length === 0;
  }

  /** MARKER-1: a cancel governs exactly one turn: reset once per iteration. */
  endIteration() {
    this.#marker = undefined;
  }

  #park() {
    return new Promise((resolve) => { this.#wake = resolve; });
  }

  #wakeDriver() {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** The driver has exited (disposal): waiters are released only now (IDLE-4). */
  #finish() {
    this.#exit();
    this.releaseWaiters();
  }

  async #runTurn() {
    const batch = this.#queued.splice(0); // LOOP-2: a burst is one turn
    const turn = new Turn(this.session.lastTurn() + 1); // LOOP-3
    this.#turn = turn;
    try {
      await this.#openTurn(turn, batch);
    } catch (error) {
      this.#fail(turn, error, turn.step); // ERR-1: a throwing plugin ends the turn, not the loop
    }
    if (turn.opened) this.#closeTurn(turn);
  }

  async #openTurn(turn, batch) {
    const session = this.session;
    const before = session.length;
    try {
      session.append('turn/start', { turn: turn.number, trigger: { kind: 'message', source: batch[0].source } });
    } catch (error) {
      if (session.length === before) {
        // ERR-8: nothing was opened: announce with step 0; no turn is owed.
        turn.failure = error;
        this.#warn(turn.number, 'turn/start was rejected', error);
        this.#announce(turn.number, 0, error);
        return;
      }
      // ERR-11 / LOOP-4: a session/event listener threw on turn/start: the turn ends error and
      // its prompt is consumed; no agent/turn-end (announced through agent/error).
      turn.opened = true;
      turn.notifyEnd = false;
      throw error;
    }
    turn.opened = true;
    for (const item of batch) session.append('user/message', { content: item.content, source: item.source });
    try {
      this.#bus.emit('agent/turn-start', this, turn.number);
    } catch (error) {
      turn.notifyEnd = false; // LOOP-4: a boundary failure
      throw error;
    }
    await this.#steps(turn);
  }

  async #steps(turn) {
    for (;;) {
      if (this.#disposed) return;
      turn.step += 1;
      // LOOP-5 / STEER-2: steering joins this step's request, unless an agent/turn-start listener
      // cancelled the turn: steering given after that is late, re-queued after it (CANCEL-4, LOOP-8)
      if (this.#marker === undefined) this.#drainSteering(turn);
      this.#stepEvent(turn, 'step/start');
      try {
        this.#bus.emit('agent/step-start', this, turn.number, turn.step);
      } catch (error) {
        turn.notifyEnd = false;
        throw error;
      }
      // CANCEL-STEP: cancelled from agent/turn-start or agent/step-start: an empty step.
      if (this.#marker !== undefined) {
        turn.aborted = this.#marker;
        this.#endStep(turn);
        return;
      }
      if (this.#disposed) return;
      const outcome = await this.#runStep(turn);
      if (outcome.aborted !== undefined) {
        // ABORT-1 / CANCEL-MID / TOOL-5: the step ends and no further step runs; steering that
        // came during it stays in the FIFO and is re-queued after the turn (STEER-3).
        turn.aborted = outcome.aborted;
        this.#endStep(turn);
        return;
      }
      const steered = this.#drainSteering(turn);
      this.#endStep(turn); // ERR-3: a throw here ends the turn error
      if (this.#disposed) return;
      const fallback = outcome.hadToolCalls || steered; // CONT-1
      let decision = await abortable(
        this.#bus.waterfall('agent/turn-continuation', [this, turn.number], fallback, (v) => v), this.#lifetime.signal);
      if (this.#marker !== undefined) { // CANCEL-CONT: the cancel wins over "continue"
        turn.aborted = this.#marker;
        return;
      }
      if (this.#disposed || decision === ABORTED) return;
      if (!decision && this.#steering.length) decision = true; // CONT-2
      if (!decision) return;
    }
  }

  async #runStep(turn) {
    const service = this.#service;
    // The step is open (step/start is logged): from here on abort()/cancel()/dispose() abort it,
    // the system-prompt waterfall included (a dispose there must not leave a model call waiting).
    const controller = new AbortController();
    this.#step = controller;
    const signal = controller.signal;
    const aborted = () => ({ aborted: String(signal.reason ?? 'aborted') });
    try {
      const assembly = await abortable(this.#bus.waterfall('system-prompt', [this], {
        system: service.sections().join('\n\n'),
        tools: service.toolSchemas(),
      }, (v) => v), signal);
      if (this.#marker !== undefined) return { aborted: this.#marker };
      if (assembly === ABORTED || signal.aborted || this.#disposed) return aborted();
      let request = { messages: this.session.deriveMessages() };
      if (this.#options.model) request = { model: this.#options.model, ...request };
      const system = [assembly?.system, this.#options.systemPrompt].filter(Boolean).join('\n\n');
      if (system) request.system = system;
      if (assembly?.tools?.length) request.tools = assembly.tools;
      request.signal = signal;
      request = await abortable(this.#bus.waterfall('agent/request', [this, turn.number, turn.step], request, (v) => v), signal);
      if (request === ABORTED) return aborted();
      if (!request?.model) { // LOOP-7
        throw new LoopError(`agent "${this.#id}" has no model: set one in its options (model) or through an agent/request listener`, 'NO_MODEL');
      }
      const adapter = service.model(request.model);
      if (!adapter) throw new LoopError(`no model adapter registered for model "${request.model}"`, 'NO_ADAPTER');
      const assembler = new Assembler();
      if (await this.#stream(turn, adapter, request, signal, assembler) === ABORTED || signal.aborted) return aborted();
      const finish = assembler.finish ?? { kind: 'stop' }; // ASM-4
      if (finish.kind === 'error') throw new LoopError(String(finish.message ?? 'model error'), finish.code); // FINISH-1
      if (finish.kind === 'aborted') throw new LoopError('model stream aborted', 'ABORTED');
      const maxTokens = finish.kind === 'max-tokens';
      if (maxTokens) turn.maxTokens = true; // MAXTOK-1/2: sticky for the turn
      let message = assembler.message();
      if (maxTokens) message = withoutToolCalls(message); // MAXTOK-5: before agent/step-result
      message = await abortable(this.#bus.waterfall('agent/step-result', [this, turn.number, turn.step], message, (v) => v), signal);
      if (message === ABORTED) return aborted();
      if (!message || !Array.isArray(message.content)) throw new LoopError('agent/step-result must return a message', 'BAD_MESSAGE');
      if (maxTokens) message = withoutToolCalls(message); // ... and again after it
      // LOOP-6: the log records what agent/step-result returned; tools use that same message.
      if (message.content.length || !maxTokens) {
        this.session.append('assistant/message', { turn: turn.number, step: turn.step, content: message.content });
      }
      if (assembler.usage !== undefined) this.session.append('usage', { turn: turn.number, step: turn.step, usage: assembler.usage });
      const calls = message.content.filter((b) => b?.type === 'tool-call');
      for (const call of calls) { // TOOL-1: one after another, in order
        if (signal.aborted) break;
        await this.#runTool(turn, call, signal);
      }
      if (signal.aborted) return aborted(); // TOOL-5
      return { hadToolCalls: calls.length > 0 };
    } finally {
      this.#step = undefined;
    }
  }

  /** LOOP-5: each chunk logged as assistant/chunk and emitted as agent/stream-chunk. */
  async #stream(turn, adapter, request, signal, assembler) {
    const iterator = adapter.stream(request)[Symbol.asyncIterator](); // FINISH-2: may throw
    try {
      for (;;) {
        const next = await abortable(iterator.next(), signal);
        if (next === ABORTED) return ABORTED;
        if (next.done) return undefined;
        const event = this.session.append('assistant/chunk', { turn: turn.number, step: turn.step, chunk: next.value });
        this.#bus.emit('agent/stream-chunk', this, turn.number, turn.step, event.data.chunk);
        assembler.add(event.data.chunk);
      }
    } finally {
      // Close the stream (a provider stops sending); never wait on one that ignores it.
      Promise.resolve(iterator.return?.()).catch(() => {});
    }
  }

  async #runTool(turn, call, signal) {
    const callId = String(call.id ?? '');
    const name = String(call.name ?? '');
    this.session.append('tool/call', { turn: turn.number, step: turn.step, callId, name, arguments: call.arguments ?? '' });
    const execution = { callId, name, arguments: parseArguments(call.arguments), agent: this, signal };
    let result;
    try {
      const value = await abortable(this.#bus.waterfall('tools/execute', [], execution, (ex) => this.#service.execute(ex, this)), signal);
      result = value === ABORTED ? errorResult(callId, new LoopError(String(signal.reason ?? 'aborted'), 'ABORTED')) : toolResult(callId, value);
    } catch (error) { // TOOL-3: failing tools, unknown tools and throwing listeners are results
      this.#warn(turn.number, `tool "${name}" (call ${callId}) failed`, error);
      result = errorResult(callId, error);
    }
    this.logToolResult({ turn: turn.number, step: turn.step, ...result, callId }); // TOOL-4: the model's id
  }

  /** The call's one tool/result (LOOP-5). Content that is not JSON (LOG-1: rejected before it
   * enters the log) is still a failed result; a session/event listener's throw, once the result
   * is logged, is not: it fails the turn like any other, and the call keeps its one result. */
  logToolResult(data) {
    const before = this.session.length;
    try {
      this.session.append('tool/result', data);
    } catch (error) {
      if (error instanceof TypeError && this.session.length === before) {
        this.session.append('tool/result', { ...data, ...errorResult(data.callId, error) });
      } else throw error;
    }
  }

  /** The steering waiting now, one message at a time: a throwing listener ends the turn with the
   * rest still waiting, re-queued after it (LOOP-8); a cancel() (a fresh FIFO) dropped them, and
   * what came after it is late for this turn (CANCEL-4). */
  #drainSteering(turn) {
    const fifo = this.#steering;
    const waiting = fifo.length;
    for (let i = 0; i < waiting && this.#steering === fifo; i++) {
      const item = fifo.shift();
      this.session.append('steering/message', { turn: turn.number, content: item.content, source: item.source });
      this.#bus.emit('agent/steering', this, turn.number, item.content, item.source);
    }
    return waiting > 0;
  }

  /** step/start or step/end, tracking whether the step is open (the event stays logged when a
   * session/event listener throws). */
  #stepEvent(turn, type) {
    const before = this.session.length;
    try {
      this.session.append(type, { turn: turn.number, step: turn.step });
    } finally {
      if (this.session.length > before) turn.stepOpen = type === 'step/start';
    }
  }

  #endStep(turn) {
    this.#stepEvent(turn, 'step/end');
    this.#bus.emit('agent/step-end', this, turn.number, turn.step);
  }

  /** A failure's message: a thrown value that is no Error (`throw "text"`) is its text (ERR-2). */
  messageOf(error) {
    return errorMessage(error);
  }

  /** MAXTOK-3: disposed, aborted and error win over max-tokens. */
  #endReason(turn) {
    if (this.#disposed) return { kind: 'disposed' };
    if (turn.aborted !== undefined) return { kind: 'aborted', reason: turn.aborted };
    if (turn.failure !== undefined) {
      const reason = { kind: 'error', message: this.messageOf(turn.failure) };
      const code = errorCode(turn.failure);
      if (code !== undefined) reason.code = code; // ERR-7
      return reason;
    }
    return turn.maxTokens ? { kind: 'max-tokens' } : { kind: 'completed' };
  }

  /** LOG-4/5: the open step's step/end, one turn/end, then agent/turn-end. */
  #closeTurn(turn) {
    if (turn.stepOpen) {
      try {
        this.#stepEvent(turn, 'step/end');
      } catch (error) {
        this.#fail(turn, error, turn.step);
      }
      turn.stepOpen = false;
    }
    const reason = this.#endReason(turn);
    try {
      this.session.append('turn/end', { turn: turn.number, reason });
    } catch (error) {
      this.#lateFailure(turn, error, 'a session/event listener on turn/end'); // ERR-4 / DISP-4
    }
    turn.closed = true;
    if (!turn.notifyEnd) return;
    try {
      this.#bus.emit('agent/turn-end', this, turn.number, reason);
    } catch (error) {
      this.#lateFailure(turn, error, 'an agent/turn-end listener'); // ERR-10
    }
  }

  /** LOOP-4: the awaited session/flush; a failure is announced, never logged (ERR-6). */
  async #flush(turn) {
    try {
      await this.#bus.parallel('session/flush', this.session);
    } catch (error) {
      this.#lateFailure(turn, error, 'a session/flush listener');
    }
  }

  #appendContained(turn, type, data) {
    try {
      this.session.append(type, data);
    } catch (error) {
      this.#lateFailure(turn, error, `a session/event listener on ${type}`);
    }
  }

  /** ERR-9: the first failure of a turn wins: one error event, one agent/error. */
  #fail(turn, error, step) {
    if (turn.failure !== undefined || this.#disposed) { // DISP-5: disposal is not a failure
      this.#warn(turn.number, 'a further failure was ignored', error);
      return;
    }
    turn.failure = error;
    this.#warn(turn.number, 'turn failed', error);
    if (turn.opened && !turn.closed) {
      const data = { turn: turn.number, step, message: this.messageOf(error) };
      const code = errorCode(error);
      if (code !== undefined) data.code = code;
      try {
        this.session.append('error', data);
      } catch (inner) { // ERR-4
        this.#warn(turn.number, 'a session/event listener on error failed', inner);
      }
    }
    this.#announce(turn.number, step, error);
  }

  /** A failure after turn/end: announced once unless disposing or already failed (ERR-10). */
  #lateFailure(turn, error, what) {
    this.#warn(turn.number, `${what} failed`, error);
    if (this.#disposed || turn.failure !== undefined) return;
    turn.failure = error;
    this.#announce(turn.number, turn.step, error);
  }

  #announce(turn, step, error) {
    try {
      this.#bus.emit('agent/error', this, turn, step, error);
    } catch (inner) { // ERR-5
      this.#warn(turn, 'an agent/error listener failed', inner);
    }
  }

  /** ERR-12: every contained failure is a warning naming the agent and the turn. */
  #warn(turn, what, error) {
    this.#logger.warn(`agent ${this.#id} turn ${turn}: ${what}: ${errorName(error)}: ${errorMessage(error)}`);
  }

  /** STATUS-1: legal transitions only; the same status again emits nothing. */
  #setStatus(status) {
    if (status === this.#status || this.#status === 'disposed') return;
    this.#status = status;
    if (status === 'idle') this.releaseWaiters(); // IDLE-3: before the event
    try {
      this.#bus.emit('agent/status', this, status);
    } catch (error) { // STATUS-2: the transition stands
      const turn = this.#turn?.number ?? this.session.lastTurn();
      this.#warn(turn, `an agent/status(${status}) listener failed`, error);
      this.#announce(turn, 0, error);
    }
  }

  /** Resolve every pending when_idle() waiter. */
  releaseWaiters() {
    for (const release of this.#waiters.splice(0)) release();
  }

  #emitQueued(item, steering) {
    try {
      this.#bus.emit('agent/queued', this, item.content, { source: item.source, steering });
    } catch (error) { // a UI listener must not lose the caller's prompt
      this.#warn(this.session.lastTurn(), 'an agent/queued listener failed', error);
    }
  }

  #live(verb) {
    if (this.#disposed) throw new LoopError(`${verb}() on agent "${this.#id}", which is disposed`, 'DISPOSED'); // DISP-3
  }

}

function toolResult(callId, value) {
  if (value && typeof value === 'object' && !Array.isArray(value) && 'content' in value) {
    const result = { callId, content: toBlocks(value.content), isError: Boolean(value.isError) };
    if (value.error !== undefined) result.error = value.error;
    return result;
  }
  return { callId, content: toBlocks(value), isError: false };
}

// ----------------------------------------------------------------------------- persistence

/** An in-memory persistence backend: session id -> {meta, events}. */
export class MemoryPersistence {
  #sessions = new Map();

  create(sessionId, meta) {
    if (!this.#sessions.has(sessionId)) this.#sessions.set(sessionId, { meta: snapshot(meta ?? {}), events: [] });
  }

  append(sessionId, event) {
    this.#sessions.get(sessionId)?.events.push(snapshot(event));
  }

  /** The persisted events of a session (undefined when it is unknown). */
  async load(sessionId) {
    const found = this.#sessions.get(sessionId);
    return found ? found.events.map(snapshot) : undefined;
  }
}

// ----------------------------------------------------------------------------- the service

export class AgentLoopService {
  #bus = new EventBus();
  #clock;
  #uuid;
  #persistence;
  #logger;
  /** @type {Map<string, any>} */ #models = new Map();
  /** @type {Map<string, any>} */ #tools = new Map();
  /** @type {Map<string, {text: string}>} */ #sections = new Map();
  /** @type {Map<string, Agent>} */ #agents = new Map();
  #all = new Set();
  #closed = false;
  /** The agent class (a buggy variant plugs in a subclass). */
  AgentClass;

  /** @param {{clock?: () => number, uuid?: () => string, persistence?: MemoryPersistence | null, logger?: Logger, agentClass?: typeof Agent}} [options] */
  constructor({ clock = () => Date.now(), uuid = () => crypto.randomUUID(), persistence = null, logger = console, agentClass = Agent } = {}) {
    this.#clock = clock;
    this.#uuid = uuid;
    this.#persistence = persistence;
    this.#logger = logger;
    this.AgentClass = agentClass;
  }

  on(event, listener) { return this.#bus.on(event, listener); }

  registerModel(name, adapter) {
    this.#models.set(name, adapter);
    return () => { if (this.#models.get(name) === adapter) this.#models.delete(name); };
  }

  registerTool(tool) {
    this.#tools.set(tool.name, tool);
    return () => { if (this.#tools.get(tool.name) === tool) this.#tools.delete(tool.name); };
  }

  addSystemPromptSection(name, text) {
    const section = { text }; // its own identity: releasing it leaves a later section of the name
    this.#sections.set(name, section);
    return () => { if (this.#sections.get(name) === section) this.#sections.delete(name); };
  }

  model(name) { return this.#models.get(name); }
  sections() { return [...this.#sections.values()].map((section) => section.text); }
  /** SVC-5: what the model is told about every registered tool. */
  toolSchemas() {
    return [...this.#tools.values()].map((t) => ({ name: t.name, description: t.description ?? '', inputSchema: t.inputSchema ?? { type: 'object' } }));
  }

  /** The default of tools/execute: run the tool by name (TOOL-3: UNKNOWN_TOOL). */
  async execute(execution, agent) {
    const tool = this.#tools.get(execution.name);
    if (!tool) throw new LoopError(`unknown tool "${execution.name}"`, 'UNKNOWN_TOOL');
    const content = await tool.execute(execution.arguments, { callId: execution.callId, agentId: agent.id, signal: execution.signal });
    return { callId: execution.callId, content: toBlocks(content), isError: false };
  }

  /** SVC-1: a fresh session id `{id}-session-{uuid}`. */
  create(id, options = {}) {
    this.#checkFree(id);
    return this.createAgent(id, `${id}-session-${this.#uuid()}`, {}, options);
  }

  /** SVC-2: the caller's session id, as given; a live id in use is rejected first. */
  createAgent(id, sessionId, meta = {}, options = {}) {
    this.#checkFree(id);
    this.#persistence?.create(sessionId, meta);
    return this.#adopt(id, sessionId, [], options);
  }

  /** SVC-3: continue a persisted session (turns and history continue from its log). */
  async resume(id, sessionId, options = {}) {
    if (!this.#persistence) throw new LoopError(`cannot resume "${id}": this service has no persistence backend`, 'NO_PERSISTENCE');
    this.#checkFree(id);
    const events = await this.#persistence.load(sessionId);
    if (events === undefined) throw new LoopError(`cannot resume "${id}": no persisted session "${sessionId}"`, 'NO_SESSION');
    this.#checkFree(id);
    const agent = this.#adopt(id, sessionId, events, options);
    // A log whose process died mid-turn is repaired (LOG-4/5): its open step ends, then the turn, `interrupted`.
    if (agent.session.turnOpen()) {
      const turn = agent.session.lastTurn();
      const step = agent.session.openStep();
      if (step !== undefined) agent.session.append('step/end', { turn, step });
      agent.session.append('turn/end', { turn, reason: { kind: 'interrupted' } });
    }
    return agent;
  }

  /** SVC-6: live agents by id. */
  get(id) { return this.#agents.get(id); }

  /** SVC-4: agents from configuration; a bad one is rejected naming the field, before any. */
  loadConfig(config) {
    if (!config || typeof config !== 'object' || !Array.isArray(config.agents)) {
      throw new LoopError('configuration: "agents" must be a list of agents', 'BAD_CONFIG');
    }
    config.agents.forEach((entry, i) => {
      if (!entry || typeof entry !== 'object') throw new LoopError(`configuration: agents[${i}] must be an object`, 'BAD_CONFIG');
      if (typeof entry.id !== 'string' || !entry.id) throw new LoopError(`configuration: agents[${i}].id is required (a non-empty string)`, 'BAD_CONFIG');
      for (const field of ['model', 'systemPrompt']) {
        if (entry[field] !== undefined && typeof entry[field] !== 'string') {
          throw new LoopError(`configuration: agents[${i}].${field} must be a string`, 'BAD_CONFIG');
        }
      }
    });
    return config.agents.map((entry) => {
      const options = {};
      if (entry.model !== undefined) options.model = entry.model;
      if (entry.systemPrompt !== undefined) options.systemPrompt = entry.systemPrompt;
      return this.create(entry.id, options);
    });
  }

  /** SVC-7: dispose every agent, wait for their drivers; pending waiters resolve. */
  async close() {
    // SVC-7: closing disposes every agent the service created, so none is made from now on (a
    // status listener re-creating an agent as one is disposed would otherwise outlive the close).
    this.#closed = true;
    const agents = [...this.#all];
    for (const agent of agents) agent.dispose();
    await Promise.all(agents.map((agent) => agent.whenIdle()));
  }

  /** @internal disposal removes the agent from the registry. */
  forget(agent) {
    if (this.#agents.get(agent.id) === agent) this.#agents.delete(agent.id);
  }

  #checkFree(id) {
    if (this.#closed) throw new LoopError('the service is closed', 'SERVICE_CLOSED');
    if (this.#agents.has(id)) throw new LoopError(`an agent with id "${id}" already exists`, 'DUPLICATE_AGENT');
  }

  #adopt(id, sessionId, events, options) {
    const persistence = this.#persistence;
    const session = new Session({
      id: sessionId, bus: this.#bus, clock: this.#clock, events,
      onAppend: persistence ? (event) => persistence.append(sessionId, event) : undefined,
    });
    const agent = new this.AgentClass({ id, session, service: this, bus: this.#bus, options, logger: this.#logger });
    this.#agents.set(id, agent);
    this.#all.add(agent);
    return agent;
  }
}
