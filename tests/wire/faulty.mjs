// A wire child that misbehaves on request, for the driver's robustness tests: the kit's JS
// loop, whose send() crashes, hangs, corrupts the stream, starts a timer or prints when the
// prompt says so.
import fs from 'node:fs';
import { serve } from '../../examples/js_loop/bridge/index.mjs';
import { Agent, AgentLoopService } from '../../examples/js_loop/loop.mjs';

const OUT = Number(String(process.env.LOOPKIT_WIRE_FDS).split(',')[1]);

class Faulty extends Agent {
  send(content, source) {
    const text = typeof content === 'string' ? content : content?.[0]?.text;
    if (text === 'crash') {
      process.stderr.write('faulty: crashing on purpose\n');
      process.exit(3);
    }
    if (text === 'hang') for (;;) { /* busy, never answers */ }
    if (text === 'garbage') fs.writeSync(OUT, 'this is not JSON\n');
    if (text === 'timer') setTimeout(() => {}, 5);
    if (text === 'print') console.log('hello from the implementation on stdout');
    return super.send(content, source);
  }
}

serve({
  name: 'faulty',
  version: '0',
  createService: (sources) => new AgentLoopService({ ...sources, agentClass: Faulty }),
});
