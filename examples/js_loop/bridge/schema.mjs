// The spec's data shapes (section 0b), as schemas: what is renamed between a JavaScript loop's
// camelCase and the wire's snake_case, and what is opaque (provider data, tool arguments, input
// schemas, metadata: carried byte for byte, never renamed). Translation walks a value with its
// schema; it never renames keys blindly.
//
// Values that are not plain JSON travel as one-key tagged objects (see docs/wire-protocol.md,
// "Values"): {"$agent": id}, {"$session": id}, {"$signal": id}, {"$error": {...}},
// {"$opaque": "TypeName"}. A plain object whose only key starts with "$" is sent with one more
// "$" in front of it ({"$$agent": ...}), so it is never mistaken for a tag.

/** @typedef {{kind: string, [k: string]: any}} Shape */

/** A value carried as JSON with its keys untouched. */
export const JSON_VALUE = { kind: 'json' };
export const AGENT = { kind: 'agent' };
export const SESSION = { kind: 'session' };
export const SIGNAL = { kind: 'signal' };
export const ERROR = { kind: 'error' };

/** An object whose listed fields are renamed (camel key -> [snake key, shape]); other keys keep
 * their name and are carried as JSON. */
const object = (fields) => ({ kind: 'object', fields });
const list = (item) => ({ kind: 'list', item });
/** An object whose shape depends on a discriminating key (`type`, `kind`). */
const tagged = (key, variants, fallback = object({})) => ({ kind: 'tagged', key, variants, fallback });

const PROVIDER_DATA = { providerData: ['provider_data', JSON_VALUE] };

export const BLOCK = tagged('type', {
  text: object(PROVIDER_DATA),
  reasoning: object(PROVIDER_DATA),
  'tool-call': object(PROVIDER_DATA),
  image: object({ mimeType: ['mime_type', JSON_VALUE], ...PROVIDER_DATA }),
});
// tool-result blocks nest content: defined after BLOCK exists.
BLOCK.variants['tool-result'] = object({
  toolCallId: ['tool_call_id', JSON_VALUE], isError: ['is_error', JSON_VALUE],
  content: ['content', { kind: 'content' }], ...PROVIDER_DATA,
});
/** A string, or a list of blocks. */
export const CONTENT = { kind: 'content' };
export const SOURCE = tagged('kind', { agent: object({ agentId: ['agent_id', JSON_VALUE] }) });
export const USAGE = object({
  inputTokens: ['input_tokens', JSON_VALUE], outputTokens: ['output_tokens', JSON_VALUE],
  cacheReadTokens: ['cache_read_tokens', JSON_VALUE], cacheWriteTokens: ['cache_write_tokens', JSON_VALUE],
  reasoningTokens: ['reasoning_tokens', JSON_VALUE],
});
export const CHUNK = tagged('type', {
  'block-start': object({ blockType: ['block_type', JSON_VALUE] }),
  'tool-call-delta': object({ argumentsDelta: ['arguments_delta', JSON_VALUE] }),
  'block-end': object({ block: ['block', BLOCK] }),
  usage: object({ usage: ['usage', USAGE] }),
});
export const MESSAGE = object({ content: ['content', CONTENT] });
export const TOOL_SCHEMA = object({ inputSchema: ['input_schema', JSON_VALUE] });
export const TRIGGER = object({ source: ['source', SOURCE] });
const TOOL_ERROR = object({});
const TURN_STEP = object({});
export const EVENT_DATA = {
  'turn/start': object({ trigger: ['trigger', TRIGGER] }),
  'turn/end': TURN_STEP,
  'user/message': object({ content: ['content', CONTENT], source: ['source', SOURCE] }),
  'context/message': object({ content: ['content', CONTENT], source: ['source', SOURCE] }),
  'steering/message': object({ content: ['content', CONTENT], source: ['source', SOURCE] }),
  'assistant/chunk': object({ chunk: ['chunk', CHUNK] }),
  'assistant/message': object({ content: ['content', CONTENT] }),
  'tool/call': object({ callId: ['call_id', JSON_VALUE] }),
  'tool/result': object({
    callId: ['call_id', JSON_VALUE], content: ['content', CONTENT], isError: ['is_error', JSON_VALUE],
    error: ['error', TOOL_ERROR],
  }),
  usage: object({ usage: ['usage', USAGE] }),
};
/** A session event: its data's shape depends on its type. */
export const EVENT = { kind: 'event' };
export const REQUEST = object({
  messages: ['messages', list(MESSAGE)], tools: ['tools', list(TOOL_SCHEMA)], signal: ['signal', SIGNAL],
});
export const EXECUTION = object({
  callId: ['call_id', JSON_VALUE], arguments: ['arguments', JSON_VALUE], agent: ['agent', AGENT], signal: ['signal', SIGNAL],
});
export const TOOL_RESULT = object({
  callId: ['call_id', JSON_VALUE], content: ['content', CONTENT], isError: ['is_error', JSON_VALUE], error: ['error', TOOL_ERROR],
});
export const TOOL_CONTEXT = object({ callId: ['call_id', JSON_VALUE], agentId: ['agent_id', JSON_VALUE], signal: ['signal', SIGNAL] });
export const AGENT_OPTIONS = object({ systemPrompt: ['system_prompt', JSON_VALUE] });
export const CONFIG = object({ agents: ['agents', list(object({ systemPrompt: ['system_prompt', JSON_VALUE] }))] });
export const QUEUED_INFO = object({ source: ['source', SOURCE] });
export const ASSEMBLY = object({ tools: ['tools', list(TOOL_SCHEMA)] });
export const MESSAGES = list(MESSAGE);
export const EVENTS = list(EVENT);

/** The argument shapes of every event a listener can be registered on (after the agent, for the
 * agent/* notifications), and the value and result shapes of the waterfalls. */
export const NOTIFICATION_ARGS = {
  'agent/status': [AGENT, JSON_VALUE],
  'agent/queued': [AGENT, CONTENT, QUEUED_INFO],
  'agent/turn-start': [AGENT, JSON_VALUE],
  'agent/turn-end': [AGENT, JSON_VALUE, JSON_VALUE],
  'agent/step-start': [AGENT, JSON_VALUE, JSON_VALUE],
  'agent/step-end': [AGENT, JSON_VALUE, JSON_VALUE],
  'agent/stream-chunk': [AGENT, JSON_VALUE, JSON_VALUE, CHUNK],
  'agent/steering': [AGENT, JSON_VALUE, CONTENT, SOURCE],
  'agent/error': [AGENT, JSON_VALUE, JSON_VALUE, ERROR],
  'session/event': [SESSION, EVENT],
  'session/flush': [SESSION],
};
export const WATERFALLS = {
  'agent/request': { args: [AGENT, JSON_VALUE, JSON_VALUE], value: REQUEST, result: REQUEST },
  'agent/step-result': { args: [AGENT, JSON_VALUE, JSON_VALUE], value: MESSAGE, result: MESSAGE },
  'agent/turn-continuation': { args: [AGENT, JSON_VALUE], value: JSON_VALUE, result: JSON_VALUE },
  'tools/execute': { args: [], value: EXECUTION, result: TOOL_RESULT },
  'system-prompt': { args: [AGENT], value: ASSEMBLY, result: ASSEMBLY },
};

// ----------------------------------------------------------------------------- translation

/**
 * Encodes JavaScript values to wire JSON and back, by schema.
 *
 * `refs` turns live objects into handle ids and back: `agentRef(agent)`, `sessionRef(session)`,
 * `signalRef(signal)` (each returns an id, announcing a new handle first when needed),
 * `agent(id)`, `session(id)`, `signal(id)`, and `isAgent(obj)` / `isSession(obj)` for values
 * met where the schema says "any JSON".
 */
export class Codec {
  /** @param {'camel' | 'snake'} spelling the implementation's own spelling of the shapes
   * @param {any} refs */
  constructor(spelling, refs) {
    this.camel = spelling !== 'snake';
    this.refs = refs;
  }

  /** JavaScript -> wire. */
  encode(shape, value) {
    if (value === undefined) return undefined;
    switch (shape.kind) {
      case 'agent': return value == null ? null : { $agent: this.refs.agentRef(value) };
      case 'session': return value == null ? null : { $session: this.refs.sessionRef(value) };
      case 'signal': return value == null ? null : { $signal: this.refs.signalRef(value) };
      case 'error': return this.encodeError(value);
      case 'content': return typeof value === 'string' || !Array.isArray(value) ? this.json(value) : value.map((b) => this.encode(BLOCK, b));
      case 'list': return Array.isArray(value) ? value.map((v) => this.encode(shape.item, v)) : this.json(value);
      case 'event': return this.event(value, true);
      case 'tagged': return this.isPlain(value) ? this.encode(shape.variants[value[shape.key]] ?? shape.fallback, value) : this.json(value);
      case 'object': return this.isPlain(value) ? this.fields(shape, value, true) : this.json(value);
      default: return this.json(value);
    }
  }

  /** Wire -> JavaScript. */
  decode(shape, value) {
    if (value === undefined) return undefined;
    switch (shape.kind) {
      case 'content': return Array.isArray(value) ? value.map((b) => this.decode(BLOCK, b)) : this.unjson(value);
      case 'list': return Array.isArray(value) ? value.map((v) => this.decode(shape.item, v)) : this.unjson(value);
      case 'event': return this.event(value, false);
      case 'tagged': return this.isWireObject(value) ? this.decode(shape.variants[value[shape.key]] ?? shape.fallback, value) : this.unjson(value);
      case 'object': return this.isWireObject(value) ? this.fields(shape, value, false) : this.unjson(value);
      default: return this.unjson(value);
    }
  }

  /** The object or array at wire path `path` (keys and indexes as on the wire) of the
   * JavaScript value `value` of shape `shape`, or undefined: where a driver's in-place edit
   * (docs/wire-protocol.md §9.1) finds the loop's own objects. */
  locate(shape, value, path, at = 0) {
    if (at === path.length) return value;
    if (value === null || typeof value !== 'object') return undefined;
    const step = path[at];
    switch (shape.kind) {
      case 'content':
      case 'list':
        return Array.isArray(value) ? this.locate(shape.kind === 'content' ? BLOCK : shape.item, value[step], path, at + 1)
          : this.locate(JSON_VALUE, value, path, at);
      case 'event':
        return step === 'data' ? this.locate(EVENT_DATA[value.type] ?? TURN_STEP, value.data, path, at + 1)
          : this.locate(JSON_VALUE, value[step], path, at + 1);
      case 'tagged':
        return this.isPlain(value) ? this.locate(shape.variants[value[shape.key]] ?? shape.fallback, value, path, at)
          : this.locate(JSON_VALUE, value, path, at);
      case 'object': {
        const spec = this.isPlain(value) ? this.#table(shape, false)[step] : undefined;
        return spec ? this.locate(spec[1], value[spec[0]], path, at + 1) : this.locate(JSON_VALUE, value[step], path, at + 1);
      }
      default:
        return this.locate(JSON_VALUE, value[step], path, at + 1);
    }
  }

  event(value, out) {
    if (!value || typeof value !== 'object') return out ? this.json(value) : this.unjson(value);
    const data = EVENT_DATA[value.type] ?? TURN_STEP;
    const result = { type: value.type, seq: value.seq, time: value.time };
    result.data = out ? this.encode(data, value.data) : this.decode(data, value.data);
    return result;
  }

  fields(shape, value, out) {
    const table = this.#table(shape, out);
    const result = {};
    for (const [key, item] of Object.entries(value)) {
      if (item === undefined) continue;
      const spec = table[key];
      if (!spec) {
        result[key] = out ? this.json(item) : this.unjson(item);
        continue;
      }
      const [name, inner] = spec;
      result[name] = out ? this.encode(inner, item) : this.decode(inner, item);
    }
    return result;
  }

  /** The field table of a shape for one direction: own key -> [other side's key, shape]. A
   * snake_case implementation renames nothing but still walks the shapes (tags, nesting). */
  #table(shape, out) {
    if (!shape.tables) {
      const camelOut = shape.fields;
      const camelIn = {};
      const same = {};
      for (const [camel, [snake, inner]] of Object.entries(camelOut)) {
        camelIn[snake] = [camel, inner];
        same[snake] = [snake, inner];
      }
      shape.tables = { camelOut, camelIn, same };
    }
    if (!this.camel) return shape.tables.same;
    return out ? shape.tables.camelOut : shape.tables.camelIn;
  }

  isPlain(value) {
    return value !== null && typeof value === 'object' && !Array.isArray(value) && !this.refs.isAgent(value) && !this.refs.isSession(value);
  }

  isWireObject(value) {
    return value !== null && typeof value === 'object' && !Array.isArray(value) && !isTag(value);
  }

  /** Any JavaScript value as wire JSON (keys untouched, live objects as tags). */
  json(value) {
    if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
    if (typeof value === 'number') return Number.isFinite(value) ? value : { $opaque: String(value) };
    if (value === undefined) return null;
    if (typeof value !== 'object') return { $opaque: typeof value };
    if (Array.isArray(value)) return value.map((v) => (v === undefined ? null : this.json(v)));
    if (value instanceof Error) return this.encodeError(value);
    if (value instanceof AbortSignal) return { $signal: this.refs.signalRef(value) };
    if (this.refs.isAgent(value)) return { $agent: this.refs.agentRef(value) };
    if (this.refs.isSession(value)) return { $session: this.refs.sessionRef(value) };
    if (value instanceof Unserializable) return { $opaque: value.type };
    const out = {};
    for (const [key, item] of Object.entries(value)) {
      if (item !== undefined && typeof item !== 'function') out[key] = this.json(item);
    }
    const keys = Object.keys(out);
    return keys.length === 1 && keys[0].startsWith('$') ? { [`$${keys[0]}`]: out[keys[0]] } : out;
  }

  /** Wire JSON as a JavaScript value (tags become live objects). */
  unjson(value) {
    if (value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) return value.map((v) => this.unjson(v));
    if (isTag(value)) {
      if ('$agent' in value) return this.refs.agent(value.$agent);
      if ('$session' in value) return this.refs.session(value.$session);
      if ('$signal' in value) return this.refs.signal(value.$signal);
      if ('$error' in value) return decodeError(value.$error);
      if ('$opaque' in value) return new Unserializable(String(value.$opaque));
    }
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0].startsWith('$$')) return { [keys[0].slice(1)]: this.unjson(value[keys[0]]) };
    return this.unjsonFields(value);
  }

  unjsonFields(value) {
    const out = {};
    for (const [key, item] of Object.entries(value)) out[key] = this.unjson(item);
    return out;
  }

  encodeError(error) {
    return { $error: encodeErrorInfo(error) };
  }
}

const TAGS = new Set(['$agent', '$session', '$signal', '$error', '$opaque']);

function isTag(value) {
  const keys = Object.keys(value);
  return keys.length === 1 && TAGS.has(keys[0]);
}

const ORIGIN = Symbol('loopkit.wire.origin');

/** `{name, message, code?, origin?}` of a thrown value (`origin`: the driver's id of an error
 * that came from the driver, so it is handed back as the same object). */
export function encodeErrorInfo(error) {
  if (!(error instanceof Error)) return { name: typeof error, message: String(error) };
  const info = { name: error.name, message: error.message };
  if (typeof error.code === 'string') info.code = error.code;
  if (error[ORIGIN] !== undefined) info.origin = error[ORIGIN];
  return info;
}

/** An Error carrying a driver-side failure's name, message and code. */
/** The built-in error classes an error info's `name` selects (§6.3); anything else is an Error. */
const BUILT_IN = { TypeError, RangeError, ReferenceError, SyntaxError, EvalError, URIError };

export function decodeError(info) {
  if (info?.thrown) return String(info.message ?? ''); // a plugin threw a value, not an Error (§6.3)
  const name = String(info?.name ?? 'Error');
  const error = new (Object.hasOwn(BUILT_IN, name) ? BUILT_IN[name] : Error)(String(info?.message ?? 'error'));
  error.name = name;
  if (typeof info?.code === 'string') error.code = info.code;
  if (info?.origin !== undefined) error[ORIGIN] = info.origin;
  return error;
}

/** A value the driver could not send as JSON (a Python object): rejected by `JSON.stringify`
 * and by a strict JSON check, as the original would have been. */
export class Unserializable {
  constructor(type) { this.type = type; }
  toJSON() { throw new TypeError(`a ${this.type} is not JSON-serialisable`); }
}
