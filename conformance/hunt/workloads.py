"""The base workloads the hunt opens windows in: small, ordinary uses of an agent loop.

Each is a :class:`~conformance.scenario.model.Scenario` of the one scenario model: a caller
(actor ``caller``) queues the workload's prompts at time 0, registers a waiter ``done`` and
awaits it; models answer ``ok`` past their scripts (a window's own prompts cost model calls
too). A window's listener may ``raise`` at any point, so one failing plugin is a window; a
workload has a plugin of its own only where a second failure is what it sets up (``turn-end-throws``:
every turn fails late, ERR-9/ERR-10). ``features`` names the optional feature a
workload needs (the hunt skips those the implementation does not declare).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from conformance.fakes import Response, fails, hangs, respond, returns

from ..scenario.model import (
    Action,
    Actor,
    AgentSpec,
    Limits,
    Listener,
    ModelSpec,
    Scenario,
    ToolSpec,
)

LIMITS = Limits(idle_timeout=30.0, max_time=600.0)
OK = respond.text("ok")
PERSIST = Listener(on="session/flush", do=(), name="persist", times="always", hold=0.01, optional=True)
"""A persistence plugin: every flush takes 10 virtual ms, and the world records when each starts
and ends (the FLUSH oracle judges that the driver awaits it, LOOP-4)."""


@dataclass(frozen=True)
class Workload:
    """A base workload: its scenario and the optional features it needs."""

    name: str
    scenario: Scenario
    features: frozenset[str] = frozenset()
    cross: tuple[tuple[str, str], ...] = ()
    """``(from, to)`` agent pairs: windows at ``from``'s points also act on ``to``
    (:func:`~conformance.hunt.windows.cross_windows`)."""
    own: bool = True
    """Whether windows act on their point's own agent (``False``: only the ``cross`` windows,
    where another workload has the same run's own windows already)."""

    def lacking(self, impl: object) -> frozenset[str]:
        """The features it needs that ``impl`` does not declare (empty: ``impl`` can run it)."""
        return self.features - set(getattr(impl, "features", ()))


def _caller(*prompts: str, agent: str | None = None, name: str = "caller", waiter: str = "done") -> Actor:
    do = [Action("send", agent=agent, text=p) for p in prompts]
    do += [Action("when_idle", agent=agent, name=waiter), Action("wait_idle", name=waiter)]
    return Actor(tuple(do), name=name, at=0.0)


def _scenario(name: str, script: tuple[Response, ...], *, tools: tuple[ToolSpec, ...] = (),
              listeners: tuple[Listener, ...] = (), actors: tuple[Actor, ...] | None = None,
              description: str = "", system_prompt: str | None = None,
              sections: tuple[tuple[str, str], ...] = (), configured: bool = False,
              routed: tuple[Response, ...] | None = None, record_continuations: bool = True) -> Scenario:
    """A one-agent workload on model ``fake`` answering ``script``; ``routed``: the script of
    model ``fake-routed`` too, where a plugin sends some requests (:data:`STEP_ROUTING_PLUGIN`);
    ``record_continuations``: see :attr:`~conformance.scenario.model.Scenario.record_continuations`."""
    return Scenario(
        name=f"hunt-{name}",
        description=description,
        agents=(AgentSpec("a", system_prompt=system_prompt, configured=configured),),
        models=(_model("fake", script), *(() if routed is None else (_model("fake-routed", routed),))),
        tools=tools,
        sections=sections,
        listeners=(PERSIST, *listeners),
        actors=actors if actors is not None else (_caller("A"),),
        limits=LIMITS,
        record_continuations=record_continuations,
    )


FAILING_PLUGIN = Listener(on="agent/turn-end", do=(Action("raise", message="plugin failed"),), name="failing-plugin",
                          times="always", optional=True)
"""A plugin whose ``agent/turn-end`` listener throws every time: every turn has a late failure
(ERR-10), so a window's own throw or failing flush is a second one (ERR-9), and a window's
dispose makes one happen during disposal."""

REKEYING_PLUGIN = Listener(on="tools/execute", do=(), name="rekeying-plugin", times="always", when="after",
                           rewrite={"call_id": "plugin-id"}, optional=True)
"""A plugin's ``tools/execute`` listener that returns the tool's result under an id of its own
(TOOL-4: the log keeps the model's call id)."""

EDITING_PLUGIN = Listener(on="tools/execute", do=(), name="editing-plugin", times="always",
                          edit={"call_id": "plugin-edit"}, optional=True)
"""A plugin's ``tools/execute`` listener that sets the call's id in place on the execution before
``next()``, as a plugin adjusting a call does (TOOL-4: the log keeps the model's call id, not
what the waterfall's value says once the chain returns)."""

def _model(name: str, script: tuple[Response, ...] = ()) -> ModelSpec:
    """A workload's fake model: answering ``OK`` past its script, and editing the requests it
    receives in place, as an adapter may (LOG-1, LOG-7: a loop sharing log objects shows it)."""
    return ModelSpec(name, script, OK, edits_requests=True)


PERMISSION_PLUGIN = Listener(on="agent/step-result", do=(), name="permission-plugin", where={"step": 1},
                             times="always", when="after", optional=True,
                             rewrite={"content": [{"type": "tool-call", "id": "c1", "name": "lookup", "arguments": "{}"}]})
"""A plugin's ``agent/step-result`` listener that keeps only the first tool call of each turn's
first step, denying the second (LOOP-6: the log records the message it returns, and dispatch
uses that same message)."""

REATTACHING_PLUGIN = Listener(on="agent/step-result", do=(), name="reattaching-plugin", where={"turn": 1, "step": 1},
                              times="always", when="after", optional=True,
                              rewrite={"content": [{"type": "text", "text": "calling"},
                                                   {"type": "tool-call", "id": "c1", "name": "lookup",
                                                    "arguments": '{"q": "x"}'},
                                                   {"type": "text", "text": "and after"}]})
"""A plugin's ``agent/step-result`` listener handing back the first step's message with the tool
call the stream carried: a max-tokens step's calls are removed before the waterfall *and again
from what it returns* (MAXTOK-5), so none runs."""

SHORTENING_PLUGIN = Listener(on="agent/step-result", do=(), name="shortening-plugin", where={"turn": 1, "step": 1},
                             times="always", when="after", optional=True,
                             rewrite={"content": [{"type": "tool-call", "id": "c9", "name": "lookup",
                                                   "arguments": "{}"}]})
"""A plugin's ``agent/step-result`` listener replacing a max-tokens step's text with a tool call:
the call is removed from what it returns (MAXTOK-5), nothing remains, and no ``assistant/message``
is logged (a loop deciding from the streamed text logs an empty one: MESSAGE)."""

NOTING_PLUGIN = Listener(on="agent/step-result", do=(), name="noting-plugin", where={"turn": 1, "step": 2},
                         times="always", when="after", optional=True,
                         rewrite={"content": [{"type": "text", "text": "(cut)"},
                                              {"type": "tool-call", "id": "c1", "name": "lookup",
                                               "arguments": '{"q": "x"}'}]})
"""A plugin's ``agent/step-result`` listener adding a note to the second step of the first turn (a
window's steering brings it about), a max-tokens step that streamed a tool call alone: the note
remains once the call is removed, and is logged (LOOP-6, MAXTOK-5: a loop deciding from the
streamed content logs nothing: MESSAGE)."""

ABORT_OBSERVER = Listener(on="model/aborted", do=(Action("send", text="R", source={"kind": "plugin",
                                                                                 "plugin": "abort-observer"}),),
                          name="abort-observer", times="always", optional=True)
"""A plugin listening on the step's abort signal that queues a follow-up prompt as the signal
fires, inside the loop's ``cancel()`` (or ``abort()``, ``dispose()``): work queued after the cancel
was called, which the cancel must not drop (CANCEL-1 clears what is queued when it is called;
MARKER-1: never a later prompt). A loop that aborts the step before it clears its queues drops
it (upstream's "replays replacement work queued synchronously by an abort observer")."""

SYSTEM_PLUGIN = Listener(on="system-prompt", do=(), name="system-plugin", times="once",
                         rewrite={"system": "Cite your sources."}, optional=True)
"""A plugin's ``system-prompt`` listener adding a paragraph to the first step's assembled prompt
(0a: a listener rewrites by returning something else; SYSTEM: the request carries it; session
62's blind round Q kept the value it passed in)."""

STEP_ROUTING_PLUGIN = Listener(on="agent/request", do=(), name="step-routing-plugin", where={"step": 2},
                               times="always", rewrite={"model": "fake-routed"}, optional=True)
"""A plugin's ``agent/request`` listener sending each turn's second step, and only that one, to
another model, as one routing the answer after a tool to a cheaper model would (LOOP-10: each
request routes its own call; a loop that looked the adapter up once per turn sends the second
step to the first step's model: ROUTED; session 58's blind round H)."""

ROUTING_PLUGIN = Listener(on="agent/request", do=(), name="routing-plugin", where={"agent": "b"}, times="always",
                          rewrite={"model": "fake-routed", "system": "b, routed", "metadata": {"route": "b"}},
                          optional=True)
"""A plugin's ``agent/request`` listener sending agent ``b``'s model calls to another model with a
system prompt of its own and a provider option (LOOP-10: the adapter the returned request names is
called, with the request the waterfall returned; a loop attaching the prompt after the waterfall
overwrites it, one rebuilding the request from 0b's keys loses the option)."""

FAILING_FLUSH = Listener(on="session/flush", do=(Action("raise", message="flush failed"),), name="failing-flush",
                         times="always", optional=True)
"""A persistence plugin whose every flush fails (ERR-6: reported through ``agent/error`` for the
turn flushed, ERR-9: exactly once): where a window's idle ``inject()`` writes a one-shot turn
while the driver's turn is being flushed, each turn's failure is announced under its own number
(a loop naming the flushed turn by the log's newest announces one twice, the other never:
session 58's blind round I, v02 and v05)."""

FAILING_REPORTER = Listener(on="agent/error", do=(Action("raise", message="reporter failed"),), name="failing-reporter",
                            times="always", optional=True)
"""An error-reporting plugin whose ``agent/error`` listener throws every time (ERR-5: contained):
beside :data:`FAILING_FLUSH`, a window's idle ``inject()`` whose one-shot turn's flush fails must
return all the same (INJ-2: never raised into the caller; session 61's blind round M announced it
straight on the bus, and the reporter's throw reached the caller)."""

REVIEWING_PLUGIN = Listener(on="agent/step-end", do=(Action("steer", text="F", source={"kind": "plugin",
                                                                                   "plugin": "reviewing-plugin"}),),
                            name="reviewing-plugin", where={"turn": 1, "step": 1}, optional=True)
"""A plugin steering the turn from its first ``agent/step-end`` listener, as a reviewing plugin
does: the steering comes after the step's own drain, so the turn goes on (CONT-2) and it waits
for the next step's opening; windows at its ``agent/steering`` act in that drain, where a loop
may treat a throw as the step failing to open (session 61's blind round M: a throwing
``agent/steering`` listener there silenced ``agent/turn-end``, LOOP-4)."""

IDLE_PLUGIN = Listener(on="agent/status", do=(Action("send", text="F", source={"kind": "plugin", "plugin": "idle-plugin"}),),
                       name="idle-plugin", where={"status": "idle"}, nth=1, optional=True)
"""A plugin queueing a follow-up prompt from the agent's first ``idle`` status listener, as an
auto-continue plugin does: work queued during that transition counts as arriving after it
(IDLE-2) and runs (LOOP-1), whatever ended the running period before it: a turn, or a cancel
that dropped the turn about to start (CANCEL-W2: a real transition; a loop that parks at once
after it strands the prompt, blind round J's v02)."""

FOLLOW_UP_PLUGIN = Listener(on="session/flush", do=(Action("send", agent="a", text="A2", source={
    "kind": "plugin", "plugin": "follow-up"}),), name="follow-up-plugin", where={"agent": "a"}, nth=1, optional=True)
"""A plugin queueing a follow-up prompt on agent ``a`` inside its first turn's flush: the turn
ends with work queued, and the next runs back to back with no idle transition (LOOP-8), while
agent ``b`` of the same service runs its own; a listener of ``b`` then acts on ``a`` between the
two (the workload's ``cross`` windows: a service driving both from one task parked ``a`` running
once that listener's cancel had emptied its queue, blind round H's v01, IDLE-2)."""

# A tool takes time (two calls could overlap: TOOL-1) and empties the arguments it is given, as
# one popping what it reads does: they are its own (TOOL-2; a loop sharing one parsed object
# between calls, or with its log, shows it).
TOOL = ToolSpec("lookup", returns("found"), latency=0.01, consumes_args=True)
BLOCKS_TOOL = ToolSpec("lookup", returns([{"type": "text", "text": "found"}]), latency=0.01, consumes_args=True)
"""The same tool returning a list of blocks, its own object: a loop logging it rather than a
snapshot shows it once the world edits what its tools returned (LOG-1)."""
SPARE = ToolSpec("notes", returns("noted"))  # never called: a window's reconfigure removes it (SVC-5)
HANGING = respond.text("partial then nothing").hang(after=1).on_abort("ignore")
"""A stream that hangs after its first chunk and never looks at the step's signal."""
FAILING_TOOL = ToolSpec("lookup", fails("no such page", code="E_TOOL"))
STUCK_TOOL = ToolSpec("lookup", hangs(), abort_aware=False)
"""A tool that never returns and never looks at its call's signal (a blocking client call)."""
TOOL_PLUGIN = Listener(on="tools/execute", do=(), name="tool-plugin", times="always", hold=0.001, optional=True)
"""A plugin's ``tools/execute`` listener that takes a millisecond, then passes every call on
(``await next()``), as a metering plugin does: the call's abort must stop the wait for the tool
through it as well."""
VIRTUAL_TOOL = Listener(on="tools/execute", do=(Action("answer"),), name="virtual-tool", where={"name": "virtual"},
                        times="always", optional=True)
"""A plugin serving a tool nobody registered: its ``tools/execute`` listener answers every call of
``virtual`` itself (LOOP-5: every call goes through the waterfall, whose end, the unknown-tool
error, TOOL-3, a listener may answer before; a loop failing unknown tools ahead of the waterfall
never asks it: ANSWERED)."""


def _two_agents(name: str, description: str, plugins: tuple[Listener, ...] = ()) -> Scenario:
    """Two agents on one service, each with its caller; ``b`` on a model of its own whose calls a
    plugin routes to a third (ROUTING_PLUGIN)."""
    return Scenario(
        name=f"hunt-{name}", description=description,
        agents=(AgentSpec("a"), AgentSpec("b", model="fake-b", system_prompt="b's own")),
        models=(_model("fake", (respond.text("for a"),)), _model("fake-b"),
                _model("fake-routed", (respond.text("for b"),))),
        listeners=(PERSIST, ROUTING_PLUGIN, *plugins),
        actors=(_caller("A", agent="a", name="caller"), _caller("B", agent="b", name="caller-b", waiter="done-b")),
        limits=LIMITS)


def workloads() -> tuple[Workload, ...]:
    """The hunt's base workloads, in their stable order."""
    call = respond.tool_call("lookup", {"q": "x"}, id="c1")
    two_calls = respond.chunks(
        {"type": "block-start", "index": 0, "block_type": "tool-call"},
        {"type": "tool-call-delta", "index": 0, "id": "c1", "name": "lookup", "arguments_delta": '{"q": "x"}'},
        {"type": "block-end", "index": 0, "block": {"type": "tool-call", "id": "c1", "name": "lookup",
                                                     "arguments": '{"q": "x"}'}},
        # the second built from deltas alone, never closed (ASM-2); not JSON: passed through raw (TOOL-2)
        {"type": "block-start", "index": 1, "block_type": "tool-call"},
        {"type": "tool-call-delta", "index": 1, "id": "c2", "name": "lookup", "arguments_delta": '{"q": '},
        {"type": "tool-call-delta", "index": 1, "id": "c2", "arguments_delta": '"y"'},
        # the third's arguments the first's, character for character: each call parses its own
        {"type": "block-start", "index": 2, "block_type": "tool-call"},
        {"type": "block-end", "index": 2, "block": {"type": "tool-call", "id": "c3", "name": "lookup",
                                                     "arguments": '{"q": "x"}'}})
    # no finish chunk: the step counts as `stop` (ASM-4), and its calls run all the same (LOOP-5)
    bare = respond.tool_call("lookup", "", id="c1")  # empty: the tool receives {} (TOOL-2)
    listed = respond.tool_call("lookup", '["x", 2]', id="c1")  # JSON, not an object: parsed all the same
    ghost = respond.tool_call("ghost", "{}", id="c2")  # a tool nobody registered: UNKNOWN_TOOL (TOOL-3)
    # one nobody registered that a plugin serves, in the next step under the id the first step's first call
    # had, as a provider numbering calls per response does: it still runs (TOOL-1)
    virtual = respond.tool_call("virtual", '{"q": "v"}', id="c1")
    pair = respond.tool_call("lookup", "{}", id="c1") + respond.tool_call("lookup", '{"all": true}', id="c2")
    out = [
        # the one workload whose continuation waterfall the world leaves to the windows: a loop
        # asking no gate when nobody listens must still end a cancelled turn aborted (session
        # 61's blind round M: a cancel from agent/step-end ended the turn completed)
        Workload("reply", _scenario("reply", (respond.text("the reply"),), record_continuations=False,
                                    description="a plain reply (the world recording no continuation)")),
        Workload("tool", _scenario("tool", (call.usage(4, 2), respond.chunks(
            {"type": "block-start", "index": 0, "block_type": "text"},
            # an empty delta, as a provider's first or keep-alive chunk: logged all the same (LOG-3:
            # assistant/chunk events are never filtered out; session 61's blind round N)
            {"type": "text-delta", "index": 0, "text": ""},
            {"type": "text-delta", "index": 0, "text": "done"},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "done"}},
            # a field the last usage does not report: not the step's (session 61's round O merged them)
            {"type": "usage", "usage": {"input_tokens": 10, "output_tokens": 1, "reasoning_tokens": 2}},
            {"type": "finish", "reason": {"kind": "stop"}},
            # ASM-4: the last is the step's, every field of it (0b's optional ones too); after the
            # finish, as providers report it in a last chunk (LOOP-5: every chunk is logged)
            {"type": "usage", "usage": {"input_tokens": 12, "output_tokens": 3, "cache_read_tokens": 5,
                                        "cache_write_tokens": 1}})), tools=(TOOL, SPARE),
            description="a tool call reporting its usage, the answer reporting its own twice, the second "
                        "after its finish (ASM-4: each step's usage is its own)")),
        Workload("two-step", _scenario("two-step", (two_calls,), routed=(respond.text("done"),), tools=(BLOCKS_TOOL,),
                                       listeners=(STEP_ROUTING_PLUGIN, SYSTEM_PLUGIN), system_prompt="Answer briefly.",
                                       configured=True,
                                       sections=(("tools", "Look things up."), ("style", "Be kind.")),
                                       description="a two-step tool turn, three tool calls in its first step (the "
                                                   "second's arguments not JSON, the third's the first's; no finish "
                                                   "chunk, so a stop that still runs them), the agent created from "
                                                   "configuration (where the implementation has the feature) with a "
                                                   "system prompt after two sections, a plugin routing its second "
                                                   "step to another model (LOOP-10), another adding a paragraph to "
                                                   "the first step's system prompt (SYSTEM)")),
        Workload("failing-tool", _scenario("failing-tool", (listed + ghost, virtual, respond.text("done")),
                                           tools=(FAILING_TOOL,), listeners=(VIRTUAL_TOOL,),
                                           description="a tool that fails (its arguments a JSON array: parsed, "
                                                       "TOOL-2), then one nobody registered (TOOL-3: an "
                                                       "UNKNOWN_TOOL error result): a step whose calls all failed, "
                                                       "which goes on (CONT-1); then, a step later, a call of one "
                                                       "nobody registered that a plugin's tools/execute listener "
                                                       "serves itself")),
        Workload("hang", _scenario("hang", (HANGING, HANGING),
                                   actors=(_caller("A"), Actor((Action("abort"), Action("send", text="B"),
                                                                Action("sleep", seconds=1.0), Action("dispose")),
                                                               name="stopper", at=1.0, optional=True)),
                                   description="a model stream that hangs after its first chunk (a network read "
                                               "that never returns) and ignores the step's abort: the loop has to "
                                               "stop waiting for it once the step is aborted (ABORT-1, CANCEL-MID); "
                                               "then a second prompt's, stopped by a dispose() (a signal firing "
                                               "inside dispose(), where a window's listener on it throws: DISP-2)")),
        Workload("hang-tool", _scenario("hang-tool", (call, respond.text("done")), tools=(STUCK_TOOL,),
                                        listeners=(TOOL_PLUGIN,),
                                        actors=(_caller("A"), Actor((Action("abort"), Action("send", text="B")),
                                                                    name="stopper", at=1.0, optional=True)),
                                        description="a tool that never returns and ignores its call's signal, "
                                                    "behind a plugin passing the call on: the loop has to stop "
                                                    "waiting for it once the step is aborted, and answers the next "
                                                    "prompt (TOOL-5, CANCEL-MID; "
                                                    "session 60's blind round L waited for the waterfall, "
                                                    "not its abort)")),
        Workload("hang-close", _scenario("hang-close", (HANGING,),
                                         actors=(_caller("A"), Actor((Action("close"),), name="closer", at=1.0,
                                                                     optional=True)),
                                         description="a model stream that hangs and ignores the step's abort, "
                                                     "stopped by the service's close(): SVC-7 disposes the running "
                                                     "agent, not once its turn ends (it never would)")),
        Workload("max-tokens", _scenario(
            # a second step (a window's steering brings it about, CONT-2) or turn: empty and clean, its
            # empty message logged all the same (LOOP-5; MAXTOK-5's "only when content remains" is the
            # max-tokens step's alone)
            "max-tokens", (respond.text("a long answer that is cut").truncate(2), respond.chunks(
                {"type": "finish", "reason": {"kind": "stop"}})), tools=(TOOL,), listeners=(SHORTENING_PLUGIN,),
            description="a step cut at max-tokens, whose text a plugin's agent/step-result listener replaces with "
                        "a tool call (which must not run, and leaves no message); the next step empty")),
        Workload("max-tokens-tools", _scenario(
            # MAXTOK-5: the call removed, the text on both sides of it kept
            "max-tokens-tools", ((respond.text("calling") + call + respond.text("and after")).finish("max-tokens"),
                                 call.finish("max-tokens").usage(9, 4)),  # nothing left, usage still logged (LOOP-5)
            tools=(TOOL,), listeners=(REATTACHING_PLUGIN, NOTING_PLUGIN),
            description="a max-tokens step with a tool call that must not run, even handed back by a plugin's "
                        "agent/step-result listener (and, in a step a window brings about, one with nothing "
                        "else, whose message is empty, unless a plugin notes it: in turn 1's second step)")),
        Workload("finish-aborted", _scenario("finish-aborted", (respond.text("partial").finish("aborted"),),
                                             description="a step the model finishes aborted, nobody having aborted")),
        Workload("model-error", _scenario("model-error", (
            respond.error("overloaded", "OVERLOADED"),
            # coded ABORTED with nobody aborting: a failure all the same (FINISH-2; only the step's
            # own signal makes it an abort, FINISH-1)
            respond.text("half an answer").raises("connection aborted by peer", code="ABORTED", before=-1)),
            description="a model error (and, for a window's prompt, a stream that raises once its text is out, "
                        "its error coded ABORTED with nobody aborting)")),
        Workload("call-raises", _scenario("call-raises", (
            # FINISH-2's other form: the adapter's stream() raises before it returns a stream (a
            # client refusing the request, no connection): a loop handling it apart from a failed
            # read must still end the turn error with its message and code, and announce it
            respond.raises("service unavailable", code="UNAVAILABLE", on_call=True),
            # for a window's prompt, a model error whose code is the empty string: a code all the
            # same, carried into the error event and the turn's end alike (ERR-7; session 62's
            # round Q dropped it from the event only)
            respond.error("refused", "")),
            description="a model call whose adapter raises from stream() itself, before any stream (and, for a "
                        "window's prompt, a model error coded with the empty string)")),
        Workload("turn-end-throws", _scenario("turn-end-throws", (respond.text("the reply"),),
                                             listeners=(FAILING_PLUGIN,),
                                             description="a plain reply, a plugin's agent/turn-end listener throwing")),
        Workload("flush-throws", _scenario("flush-throws", (respond.text("the reply"),),
                                           listeners=(FAILING_FLUSH, FAILING_REPORTER),
                                           description="a plain reply, a plugin's session/flush listener throwing, "
                                                       "and another's agent/error listener")),
        Workload("idle-plugin", _scenario("idle-plugin", (respond.text("the reply"),), listeners=(IDLE_PLUGIN,),
                                          description="a plain reply, a plugin's idle status listener queueing a "
                                                      "follow-up")),
        Workload("two-prompts", _scenario("two-prompts", (respond.text("one").finish("content-filter"),
                                                          respond.text("two")),
                                          actors=(_caller("A", "B"),),
                                          description="two queued prompts, the first answer finishing with a "
                                                      "kind no rule names (section 0: a success)")),
        Workload("bad-source", _scenario("bad-source", (respond.text("two"),),
                                         actors=(Actor((Action("send", text="X", bad_source=True),
                                                        Action("when_idle", name="done"), Action("wait_idle", name="done")),
                                                       name="caller", at=0.0),),
                                         description="a prompt whose source cannot be logged (ERR-8: its turn/start "
                                                     "is rejected, announced with step 0, no turn owed; a window's "
                                                     "prompt still runs)")),
        Workload("steer", _scenario(
            # its adapter fails the pending read once the step's signal fires, as an HTTP client
            # does (ABORT-1: still `aborted{reason}`, not a failure)
            "steer", (respond.text("thinking").timing(first=1.0).on_abort("raise"), respond.text("steered")),
            # two steering messages: both wait at the next drain, where a window throwing in the
            # first one's agent/steering listener shows what becomes of the second (LOOP-8)
            actors=(_caller("A"), Actor((Action("steer", text="S"), Action("steer", text="S2")), name="steerer",
                                        after="model/request", where={"call": 1})),
            listeners=(ABORT_OBSERVER,),
            description="two steers during a step (its adapter raising once the step's signal fires; a plugin "
                        "listening on the signal queues a follow-up prompt as it fires, CANCEL-1, MARKER-1)")),
        Workload("step-end-steer", _scenario(
            "step-end-steer", (respond.text("the reply"), respond.text("the reviewed reply")),
            listeners=(REVIEWING_PLUGIN,),
            description="a plain reply a plugin's agent/step-end listener steers, so that a second step opens "
                        "with the steering waiting")),
        Workload("two-agents", _two_agents("two-agents", "two agents on one service, a plugin routing b's model calls")),
        Workload("hand-off", _two_agents(
            "hand-off", "two-agents with a plugin queueing a follow-up on a in its first flush; windows of "
                        "one agent's listeners acting on the other", (FOLLOW_UP_PLUGIN,)),
            cross=(("a", "b"), ("b", "a")), own=False),
        Workload("out-of-order", _scenario("out-of-order", (respond.chunks(
            {"type": "block-start", "index": 1, "block_type": "reasoning"},  # a later index opens first (ASM-3)
            {"type": "block-start", "index": 0, "block_type": "text"},
            {"type": "reasoning-delta", "index": 1, "text": "think"},
            {"type": "block-end", "index": 1, "block": {"type": "reasoning", "text": "think"}},
            {"type": "text-delta", "index": 0, "text": "part"},
            {"type": "block-end", "index": 0,
             "block": {"type": "text", "text": "FULL", "provider_data": {"signature": "s1"}}},  # kept (0b, LOG-7)
            {"type": "text-delta", "index": 0, "text": " late"},
            {"type": "reasoning-delta", "index": 2, "text": "still"},  # no block-start, never closes: the
            {"type": "reasoning-delta", "index": 2, "text": " going"},  # block its deltas build is kept (ASM-2)
            # eleven blocks: "by index" is the number's order, 10 after 9 (not after 1, as text sorts it)
            *({"type": "text-delta", "index": i, "text": f"t{i}"} for i in range(3, 10)),
            {"type": "block-start", "index": 10, "block_type": "text"},
            {"type": "block-end", "index": 10, "block": {"type": "text", "text": "t10"}},
            # an empty text block carrying only provider_data (a thought signature on an empty part):
            # kept in the message and in history like any block (0b, LOG-7)
            {"type": "block-start", "index": 11, "block_type": "text"},
            {"type": "block-end", "index": 11, "block": {"type": "text", "text": "", "provider_data": {"signature": "s2"}}},
            {"type": "finish", "reason": {"kind": "stop"}}).timing(first=0, between=None),),
            description="blocks opening and closing out of order, one carrying provider_data, a reasoning block of deltas "
                        "alone never closing, an empty one carrying provider_data only, twelve blocks in all; the "
                        "chunks in one burst (one network read: no suspension between)")),
        Workload("inject", _scenario(
            # a long answer: the inject lands after some 70 of the turn's events (chunk 68 of 72;
            # INJ-1: a turn is open however far back its turn/start lies)
            # its adapter ends the stream silently once the step's signal fired (ABORT-1: `aborted`)
            "inject", (respond.text("word " * 72, deltas=72).timing(first=0.2, between=0.01).on_abort("return"),
                       respond.text("two")),
            actors=(_caller("A"), Actor((Action("inject", text="C", wait=True),), name="injector", at=0.875),
                    Actor((Action("inject", text="D", wait=True),), name="idle-injector", at=5.0),
                    # INJ-4: bad input to an idle inject raises once its one-shot turn is closed, whose
                    # flush still runs (FLUSH: before the service closes)
                    # ... and a waiter taken as it raises, released only once that turn's flush ran
                    Actor((Action("inject", text="E", wait=True, unserialisable=True),
                           Action("when_idle", name="after-bad"), Action("wait_idle", name="after-bad")),
                          name="bad-injector", at=6.0),
                    # INJ-4: a source JSON cannot encode raises and writes nothing
                    Actor((Action("inject", text="F", wait=True, bad_source=True),), name="bad-source-injector",
                          at=7.0)),
            description="context injected during a long turn (after some 70 of its events) and while idle, "
                        "then content JSON cannot encode injected while idle"),
            features=frozenset({"injection"})),
        Workload("resume", Scenario(
            name="hunt-resume", description="an agent resumed from a persisted session of one turn and one more "
                                            "its process died in, the model streaming (the resume repairs it)",
            agents=(AgentSpec("a", resume="sess-1", history=("H1",), interrupted=True),),
            models=(_model("fake", (respond.text("resumed"),)),), listeners=(PERSIST,),
            actors=(replace(_caller("A"), at=None, after="agent/created", where={"agent": "a"}),),
            limits=LIMITS), features=frozenset({"persistence"})),
        Workload("step-result-plugin", _scenario(
            "step-result-plugin", (pair, respond.text("done")),
            tools=(TOOL,), listeners=(PERMISSION_PLUGIN,),
            description="two tool calls, of which a plugin's agent/step-result listener keeps the first")),
        Workload("tool-plugin", _scenario("tool-plugin", (bare, respond.text("done")), tools=(TOOL,),
                                          listeners=(EDITING_PLUGIN, REKEYING_PLUGIN),
                                          description="a tool call (with empty arguments: TOOL-2's {}) whose id one "
                                                      "plugin edits in place before next() and whose result another "
                                                      "returns under an id of its own")),
    ]
    return tuple(out)


def by_name(names: list[str] | None = None) -> tuple[Workload, ...]:
    """The workloads named (all of them when ``names`` is empty); unknown names raise ``ValueError``."""
    every = workloads()
    if not names:
        return every
    table = {w.name: w for w in every}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown workload {unknown[0]!r} (choose from {', '.join(table)})")
    return tuple(table[n] for n in names)
