// Unit tests of the bridge library (node --test examples/js_loop/bridge/test).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import '../polyfill.mjs';
import {
  BLOCK, CHUNK, CONTENT, Codec, EVENT, JSON_VALUE, REQUEST, TOOL_RESULT, Unserializable, decodeError, encodeErrorInfo,
} from '../schema.mjs';
import { Tripwire } from '../tripwire.mjs';
import { applyEdit } from '../edits.mjs';

/** Refs for values that carry no live objects. */
const noRefs = { isAgent: () => false, isSession: () => false, agentRef: () => 'a1', sessionRef: () => 'a1', signalRef: () => 'g1' };
const camel = new Codec('camel', noRefs);
const snake = new Codec('snake', noRefs);

test('chunks are renamed by their type, both ways', () => {
  const chunk = { type: 'tool-call-delta', index: 1, id: 'c1', name: 'echo', argumentsDelta: '{"a":' };
  const wire = camel.encode(CHUNK, chunk);
  assert.deepEqual(wire, { type: 'tool-call-delta', index: 1, id: 'c1', name: 'echo', arguments_delta: '{"a":' });
  assert.deepEqual(camel.decode(CHUNK, wire), chunk);
  const usage = { type: 'usage', usage: { inputTokens: 3, outputTokens: 4, cacheReadTokens: 1 } };
  assert.deepEqual(camel.encode(CHUNK, usage), { type: 'usage', usage: { input_tokens: 3, output_tokens: 4, cache_read_tokens: 1 } });
});

test('opaque values keep their keys: provider data, tool arguments, input schemas', () => {
  const block = { type: 'tool-call', id: 'c', name: 'n', arguments: '{}', providerData: { gemini: { thoughtSignature: 'x', snake_key: [{ isError: 1 }] } } };
  const wire = camel.encode(BLOCK, block);
  assert.deepEqual(wire.provider_data, block.providerData);
  assert.deepEqual(camel.decode(BLOCK, wire), block);
  const request = { model: 'm', messages: [], tools: [{ name: 't', description: '', inputSchema: { type: 'object', properties: { callId: {} } } }] };
  assert.deepEqual(camel.encode(REQUEST, request).tools[0].input_schema, request.tools[0].inputSchema);
});

test('session events: the data shape follows the event type', () => {
  const event = { type: 'tool/result', seq: 4, time: 7, data: { turn: 1, step: 1, callId: 'c1', content: [{ type: 'text', text: 'x' }], isError: true, error: { name: 'ToolError', code: 'E' } } };
  const wire = camel.encode(EVENT, event);
  assert.deepEqual(wire.data, { turn: 1, step: 1, call_id: 'c1', content: [{ type: 'text', text: 'x' }], is_error: true, error: { name: 'ToolError', code: 'E' } });
  assert.deepEqual(camel.decode(EVENT, wire), event);
  const custom = { type: 'my/event', seq: 0, time: 0, data: { someKey: 1 } };
  assert.deepEqual(camel.encode(EVENT, custom), custom, 'an unknown event type renames nothing');
});

test('content blocks nest (a tool-result block holds blocks)', () => {
  const content = [{ type: 'tool-result', toolCallId: 'c', isError: false, content: [{ type: 'image', url: 'u', mimeType: 'image/png' }] }];
  const wire = camel.encode(CONTENT, content);
  assert.deepEqual(wire, [{ type: 'tool-result', tool_call_id: 'c', is_error: false, content: [{ type: 'image', url: 'u', mime_type: 'image/png' }] }]);
  assert.equal(camel.encode(CONTENT, 'plain text'), 'plain text');
});

test('a snake_case implementation is not renamed', () => {
  const result = { call_id: 'c', content: [], is_error: false };
  assert.deepEqual(snake.encode(TOOL_RESULT, result), result);
  assert.deepEqual(snake.decode(TOOL_RESULT, result), result);
});

test('special values travel as tags; a lone $ key is escaped', () => {
  assert.deepEqual(camel.json({ $agent: 'not a tag' }), { $$agent: 'not a tag' });
  assert.deepEqual(camel.unjson({ $$agent: 'x' }), { $agent: 'x' });
  assert.deepEqual(camel.unjson(camel.json({ $a: { $agent: 'y' } })), { $a: { $agent: 'y' } });
  assert.deepEqual(camel.json(() => 1), { $opaque: 'function' });
  assert.deepEqual(camel.json(10n), { $opaque: 'bigint' });
  const opaque = camel.unjson({ $opaque: 'object' });
  assert.ok(opaque instanceof Unserializable);
  assert.throws(() => JSON.stringify({ x: opaque }), TypeError, 'what Python could not send, JavaScript cannot serialise');
  assert.deepEqual(camel.encode(JSON_VALUE, [undefined, 1]), [null, 1]);
});

test('errors keep name, message, code and their origin', () => {
  const error = decodeError({ name: 'FakeError', message: 'boom', code: 'E_X', origin: 3 });
  assert.equal(error.message, 'boom');
  assert.equal(error.name, 'FakeError');
  assert.equal(error.code, 'E_X');
  assert.deepEqual(encodeErrorInfo(error), { name: 'FakeError', message: 'boom', code: 'E_X', origin: 3 });
  assert.deepEqual(encodeErrorInfo(new TypeError('t')), { name: 'TypeError', message: 't' });
});

test("a built-in error's name makes that class (a loop may treat a TypeError apart)", () => {
  const error = decodeError({ name: 'TypeError', message: 'x is undefined', origin: 1 });
  assert.ok(error instanceof TypeError);
  assert.equal(error.name, 'TypeError');
  assert.deepEqual(encodeErrorInfo(error), { name: 'TypeError', message: 'x is undefined', origin: 1 });
  assert.ok(!(decodeError({ name: 'toString', message: 'm' }) instanceof TypeError));
  assert.equal(decodeError({ name: 'toString', message: 'm' }).name, 'toString');
});

test('Promise.withResolvers exists (polyfilled on Node 20)', () => {
  const { promise, resolve } = Promise.withResolvers();
  resolve(5);
  return promise.then((v) => assert.equal(v, 5));
});

test('the tripwire sees timers and immediates, not promises or microtasks', async () => {
  const wire = new Tripwire();
  wire.enable();
  await Promise.resolve();
  queueMicrotask(() => {});
  process.nextTick(() => {});
  wire.exempt(() => setImmediate(() => {}));
  const harmless = wire.take();
  const timer = setTimeout(() => {}, 1);
  const found = wire.take();
  wire.disable();
  clearTimeout(timer);
  assert.deepEqual(harmless, []);
  assert.equal(found.length, 1);
  assert.equal(found[0].type, 'Timeout');
  assert.match(found[0].at, /bridge\.test\.mjs/);
});

test("the driver's in-place edit reaches the loop's own objects, and only those it kept (§9.1)", () => {
  // the loop's request shares its first block with its log (the bug an in-place edit shows)
  const logged = { type: 'text', text: 'first', providerData: { k: 1 } };
  const kept = { role: 'user', content: [{ type: 'text', text: 'second' }] };
  const request = { model: 'm', messages: [{ role: 'user', content: [logged] }, kept], maxTokens: 5 };
  const dropped = request.messages[0];
  // the driver redacted every text, dropped all but the last message, added a key: the kept
  // message moved from index 1 to 0, the dropped one is left as it was
  const edit = {
    value: { model: 'm', messages: [{ role: 'user', content: [{ type: 'text', text: 'X' }] }], maxTokens: 5, extra: true },
    moves: [[[], []], [['messages'], ['messages']], [['messages', 0], ['messages', 1]],
      [['messages', 0, 'content'], ['messages', 1, 'content']], [['messages', 0, 'content', 0], ['messages', 1, 'content', 0]]],
  };
  const out = applyEdit(camel, REQUEST, request, edit);
  assert.equal(out, request, 'the root kept');
  assert.equal(request.messages.length, 1);
  assert.equal(request.messages[0], kept, 'the kept message is the same object');
  assert.equal(kept.content[0].text, 'X');
  assert.equal(request.extra, true);
  assert.equal(dropped.content[0], logged, 'a message the edit dropped is untouched');
  assert.equal(logged.text, 'first');
  // an edit of the first block itself reaches the log's object when the loop shares it
  const shared = { messages: [{ role: 'user', content: [logged] }] };
  applyEdit(camel, REQUEST, shared, {
    value: { messages: [{ role: 'user', content: [{ type: 'text', text: 'R', provider_data: { k: 2 } }] }] },
    moves: [[[], []], [['messages'], ['messages']], [['messages', 0], ['messages', 0]],
      [['messages', 0, 'content'], ['messages', 0, 'content']], [['messages', 0, 'content', 0], ['messages', 0, 'content', 0]],
      [['messages', 0, 'content', 0, 'provider_data'], ['messages', 0, 'content', 0, 'provider_data']]],
  });
  assert.deepEqual(logged, { type: 'text', text: 'R', providerData: { k: 2 } }, 'renamed keys are found by the schema');
});
