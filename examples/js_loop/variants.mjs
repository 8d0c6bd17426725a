// Buggy variants of the loop, each one line of behaviour away from it, for the suite to kill
// (and for `loopkit explore` to find as race cassettes):
//
//   w2-settle-early        window 2 settles waiters as soon as the turn is dropped, even when the
//                          cancelling listener queued a replacement (the seed's bug: CANCEL-W2)
//   marker-not-reset       the cancel marker is reset only when the agent parks, not once per
//                          iteration, so it leaks onto a next turn run without going idle (MARKER-1)
//   thrown-unnormalised    a failure's message is read as `error.message`, so a plugin that throws
//                          a string logs an error event with no message (ERR-2; upstream's
//                          "normalizes non-Error throws")
//   log-keeps-callers-content  a logged message keeps the content array the caller passed, not a
//                          snapshot, so the caller's later edit rewrites the log (LOG-1)
//   log-keeps-tool-result  a logged tool result keeps the content array the tool returned (LOG-1)
//   log-keeps-step-result  a logged assistant message keeps the content array the
//                          agent/step-result waterfall returned, a plugin's own (LOG-1)
//   result-retried-on-type-error  any TypeError from logging a tool result is read as "the
//                          result was no JSON", a session/event listener's too: the call gets a
//                          second, failed tool/result (LOOP-5; round 42's note on this loop)

import { Agent } from './loop.mjs';

class W2SettleEarly extends Agent {
  dropInWindow2() {
    this.releaseWaiters(); // the bug: "the turn was dropped, so we are idle" (B is still queued)
    return super.dropInWindow2();
  }
}

class MarkerNotReset extends Agent {
  endIteration() {} // the bug: the marker survives into a turn that runs without going idle
}

class ThrownUnnormalised extends Agent {
  messageOf(error) {
    return error?.message; // the bug: undefined for `throw "text"`
  }
}

/** A loop whose log keeps the content array handed to `append` for events of `types` (all when
 * empty), not a snapshot of it. */
const keepingContent = (...types) => class extends Agent {
  constructor(init) {
    super(init);
    const session = init.session;
    const append = session.append;
    session.append = (type, data) => {
      const event = append.call(session, type, data);
      const kept = types.length === 0 || types.includes(type);
      if (kept && Array.isArray(data?.content)) event.data.content = data.content; // the bug: no copy
      return event;
    };
  }
};

class ResultRetriedOnTypeError extends Agent {
  logToolResult(data) {
    try {
      this.session.append('tool/result', data);
    } catch (error) {
      if (!(error instanceof TypeError)) throw error;
      // the bug: the result may already be logged (a listener threw after the push)
      this.session.append('tool/result', { ...data, isError: true, content: [{ type: 'text', text: `Error: ${error.message}` }] });
    }
  }
}

/** @type {Record<string, typeof Agent>} */
export const VARIANTS = {
  'w2-settle-early': W2SettleEarly,
  'marker-not-reset': MarkerNotReset,
  'thrown-unnormalised': ThrownUnnormalised,
  'log-keeps-callers-content': keepingContent('user/message'),
  'log-keeps-tool-result': keepingContent('tool/result'),
  'log-keeps-step-result': keepingContent('assistant/message'),
  'result-retried-on-type-error': ResultRetriedOnTypeError,
};
