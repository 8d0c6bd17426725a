// A wire child that misbehaves on request, for the driver's robustness tests: the kit's JS
// loop, whose send() crashes, hangs, corrupts the stream, starts a timer, prints, or stops
// forwarding session/event notifications (so the driver's mirror misses log events, wire §7.2)
// when the prompt says so.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { serve } from '../../examples/js_loop/bridge/index.mjs';
import { Agent, AgentLoopService } from '../../examples/js_loop/loop.mjs';

const OUT = Number(String(process.env.LOOPKIT_WIRE_FDS).split(',')[1]);
let unmirrored = false;

class Faulty extends Agent {
  send(content, source) {
    const text = typeof content === 'string' ? content : content?.[0]?.text;
    if (text === 'crash') {
      process.stderr.write('faulty: crashing on purpose\n');
      process.exit(3);
    }
    if (text === 'hang') for (;;) { /* busy, never answers */ }
    if (text === 'orphan' || text === 'orphan-detached') {
      // exits, leaving a process of its own that holds the pipes and never answers
      const fds = String(process.env.LOOPKIT_WIRE_FDS).split(',').map(Number);
      spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'loopkit-faulty-orphan'],
        { stdio: ['ignore', 'ignore', 'ignore', ...fds], detached: text === 'orphan-detached' }).unref();
      process.exit(0);
    }
    if (text === 'garbage') fs.writeSync(OUT, 'this is not JSON\n');
    if (text === 'timer') setTimeout(() => {}, 5);
    if (text === 'print') console.log('hello from the implementation on stdout');
    if (text === 'unmirrored') unmirrored = true;
    return super.send(content, source);
  }
}

serve({
  name: 'faulty',
  version: '0',
  createService: (sources) => {
    unmirrored = false;  // a fresh service per scenario
    return new AgentLoopService({ ...sources, agentClass: Faulty });
  },
  api: { on: (s, event, fn) => s.on(event, event === 'session/event' ? (...args) => (unmirrored ? undefined : fn(...args)) : fn) },
});
