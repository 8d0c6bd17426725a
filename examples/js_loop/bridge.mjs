#!/usr/bin/env node
// The JavaScript loop (loop.mjs) behind loopkit's wire protocol:
//
//   loopkit conformance --impl "wire:node examples/js_loop/bridge.mjs"
//   loopkit conformance --impl "wire:node examples/js_loop/bridge.mjs --variant w2-settle-early"
//
// All the binding says is how to build a service with the driver's clock, ids, logger and
// persistence; the bridge library does the rest (framing, quiescence, listener round trips,
// case translation by schema, the timer/I-O tripwire).

import { serve } from './bridge/index.mjs';
import { AgentLoopService, MemoryPersistence } from './loop.mjs';
import { VARIANTS } from './variants.mjs';

const args = process.argv.slice(2);
const at = args.indexOf('--variant');
const variant = at >= 0 ? args[at + 1] : undefined;
if (variant !== undefined && !(variant in VARIANTS)) {
  process.stderr.write(`unknown --variant ${JSON.stringify(variant)} (known: ${Object.keys(VARIANTS).join(', ')})\n`);
  process.exit(2);
}

serve({
  name: variant ? `js-loop/${variant}` : 'js-loop',
  version: '0.1.0',
  features: ['persistence', 'configuration', 'injection'],
  spelling: 'camel',
  createService: ({ clock, uuid, logger, persistence }) =>
    new AgentLoopService({ clock, uuid, logger, persistence, agentClass: variant ? VARIANTS[variant] : undefined }),
  newPersistence: () => new MemoryPersistence(),
});
