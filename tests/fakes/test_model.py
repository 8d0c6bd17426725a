"""The scriptable fake LLM: builders, timing, faults, recording, script errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import simulator
from conformance.fakes import (
    FakeError,
    FakeModel,
    Gate,
    Response,
    ScriptExhausted,
    UnusedResponses,
    respond,
)
from conformance.fakes.model import history_digest
from reference_loop import vocabulary as v
from reference_loop.abort import AbortController, AbortError
from reference_loop.protocols import ModelAdapter, ModelRequest


def run_async(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``main`` under the simulator (FIFO); re-raise the error it ended with."""
    return simulator.run(main).unwrap()


def request(text: str = "hi", signal: Any = None, **extra: Any) -> ModelRequest:
    req: dict[str, Any] = {
        "model": "fake",
        "messages": [v.message("user", [v.text(text)])],
        **extra,
    }
    if signal is not None:
        req["signal"] = signal
    return req  # type: ignore[return-value]


async def collect(model: FakeModel, req: ModelRequest) -> list[tuple[float, dict[str, Any]]]:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out: list[tuple[float, dict[str, Any]]] = []
    async for chunk in model.stream(req):
        out.append((round(loop.time() - t0, 6), dict(chunk)))
    return out


def stream_of(response: Response, req: ModelRequest | None = None) -> list[dict[str, Any]]:
    model = FakeModel([response])

    async def main() -> list[dict[str, Any]]:
        return [c for _, c in await collect(model, req or request())]

    return run_async(main)


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return run_async(main)


# --------------------------------------------------------------------------- builders


def test_is_a_model_adapter() -> None:
    assert isinstance(FakeModel(), ModelAdapter)


def test_text_in_deltas() -> None:
    assert stream_of(respond.text("hello", deltas=3)) == [
        v.block_start(0, "text"),
        v.text_delta(0, "he"),
        v.text_delta(0, "ll"),
        v.text_delta(0, "o"),
        v.block_end(0, v.text("hello")),
        v.finish("stop"),
    ]


def test_text_with_explicit_pieces_and_more_deltas_than_characters() -> None:
    assert [c.get("text") for c in stream_of(respond.text(["Hel", "lo!"]))][1:3] == ["Hel", "lo!"]
    chunks = stream_of(respond.text("ab", deltas=5))
    assert [c["text"] for c in chunks if c["type"] == "text-delta"] == ["a", "b"]


def test_reasoning_then_text_then_tool_call_with_usage() -> None:
    response = (
        respond.reasoning("think", deltas=2)
        + respond.text("Looking.")
        + respond.tool_call("search", {"q": "cats"}, id="tc-1", fragments=3)
    ).usage(12, 7, cache_read_tokens=3)
    args = '{"q": "cats"}'
    assert stream_of(response) == [
        v.block_start(0, "reasoning"),
        v.reasoning_delta(0, "thi"),
        v.reasoning_delta(0, "nk"),
        v.block_end(0, v.reasoning("think")),
        v.block_start(1, "text"),
        v.text_delta(1, "Looking."),
        v.block_end(1, v.text("Looking.")),
        v.block_start(2, "tool-call"),
        v.tool_call_delta(2, "tc-1", args[0:5], "search"),
        v.tool_call_delta(2, "tc-1", args[5:9]),
        v.tool_call_delta(2, "tc-1", args[9:]),
        v.block_end(2, v.tool_call("tc-1", "search", args)),
        v.usage(12, 7, cache_read_tokens=3),
        v.finish("tool-calls"),
    ]


def test_tool_call_fragments_join_to_the_arguments_and_ids_are_numbered_per_model() -> None:
    model = FakeModel(
        [
            respond.tool_call("a", '{"x": 1}', fragments=["{", '"x": ', "1}"])
            + respond.tool_call("b"),
            respond.tool_call("c", "", fragments=3),
        ]
    )

    async def main() -> list[list[dict[str, Any]]]:
        return [[c for _, c in await collect(model, request())] for _ in range(2)]

    first, second = run(main)
    deltas = [c for c in first if c["type"] == "tool-call-delta"]
    assert [d["arguments_delta"] for d in deltas] == ["{", '"x": ', "1}", "{}"]
    assert [d["id"] for d in deltas] == ["call-1"] * 3 + ["call-2"]
    assert [("name" in d) for d in deltas] == [True, False, False, True]
    # an empty argument string still streams one delta (it carries the name), then the block
    assert second[1] == v.tool_call_delta(0, "call-3", "", "c")
    assert second[2] == v.block_end(0, v.tool_call("call-3", "c", ""))
    with pytest.raises(ValueError, match="do not join"):
        respond.tool_call("a", '{"x": 1}', fragments=["{", "}"])


def test_finish_inference_and_explicit_finishes() -> None:
    def finish_of(r: Response) -> dict[str, Any] | None:
        last = r.build()[-1]
        return dict(last) if last["type"] == "finish" else None

    assert finish_of(respond.text("x")) == v.finish("stop")
    assert finish_of(respond.text("x") + respond.tool_call("t")) == v.finish("tool-calls")
    assert finish_of(respond.tool_call("t").finish("stop")) == v.finish("stop")
    assert finish_of(respond.empty()) == v.finish("stop")
    assert finish_of(respond.error("overloaded", code="OVERLOADED")) == v.finish(
        "error", "overloaded", "OVERLOADED"
    )
    assert finish_of(respond.error("bad")) == {
        "type": "finish",
        "reason": {"kind": "error", "message": "bad"},
    }
    assert finish_of(respond.aborted()) == v.finish("aborted")
    assert finish_of(respond.text("x").finish("max-tokens")) == v.finish("max-tokens")
    assert finish_of(respond.text("x").no_finish()) is None
    assert finish_of(respond.text("x").finish("custom-kind")) == v.finish("custom-kind")


def test_usage_comes_before_finish_and_nothing_after_it() -> None:
    chunks = respond.text("x").usage(1, 2).build()
    assert [c["type"] for c in chunks][-2:] == ["usage", "finish"]
    with pytest.raises(ValueError, match="after finish"):
        stream_of(respond.text("x").raises("late", after=3))  # chunk 3 is the finish


def test_join_with_plus_and_call() -> None:
    a = respond.text("a").usage(1, 1) + respond.text("b")
    assert a.usage_value == {"input_tokens": 1, "output_tokens": 1}
    assert [c["index"] for c in a.build() if c["type"] == "block-start"] == [0, 1]
    b = respond("a", respond.tool_call("t", id="x"))
    assert [c["block_type"] for c in b.build() if c["type"] == "block-start"] == [
        "text",
        "tool-call",
    ]


def test_raw_chunks_stream_verbatim() -> None:
    r = respond.chunks(
        v.block_start(0, "text"),
        v.text_delta(0, "a"),
        v.block_end(0, v.text("a")),
        v.text_delta(0, "late"),
    )
    assert stream_of(r)[-1] == v.text_delta(0, "late")  # no finish added
    assert stream_of(r.finish("stop"))[-1] == v.finish("stop")


# --------------------------------------------------------------------------- truncation


def test_truncate_cuts_a_text_block_and_finishes_max_tokens() -> None:
    chunks = stream_of(respond.text("one two three four", deltas=4).truncate(2))
    assert chunks == [
        v.block_start(0, "text"),
        v.text_delta(0, "one t"),  # deltas are even character slices, clipped at the cut
        v.text_delta(0, "wo"),
        v.block_end(0, v.text("one two")),
        v.finish("max-tokens"),
    ]


def test_truncate_mid_tool_call_leaves_it_open_and_drops_later_blocks() -> None:
    r = (
        respond.text("a b")
        + respond.tool_call("t", '{"k": 1, "j": 2}', id="c", fragments=4)
        + respond.text("never")
    ).truncate(3)
    chunks = stream_of(r)
    assert chunks == [
        v.block_start(0, "text"),
        v.text_delta(0, "a b"),
        v.block_end(0, v.text("a b")),
        v.block_start(1, "tool-call"),
        v.tool_call_delta(1, "c", '{"k"', "t"),
        v.tool_call_delta(1, "c", ":"),  # token 3 is '{"k":'
        v.finish("max-tokens"),
    ]


def test_truncate_not_reached_keeps_the_inferred_finish_and_explicit_finish_wins() -> None:
    assert stream_of(respond.text("one two").truncate(2))[-1] == v.finish("stop")
    assert stream_of(respond.text("one two").truncate(1))[-1] == v.finish("max-tokens")
    assert stream_of(respond.text("one two").truncate(0)) == [v.finish("max-tokens")]
    assert stream_of(respond.text("one two").truncate(1).finish("stop"))[-1] == v.finish("stop")


# --------------------------------------------------------------------------- timing


def test_virtual_latency_first_and_between() -> None:
    model = FakeModel([respond.text("hi", deltas=2).timing(first=1.5, between=0.25)])

    async def main() -> list[float]:
        return [t for t, _ in await collect(model, request())]

    assert run(main) == [1.5, 1.75, 2.0, 2.25, 2.5]


def test_timing_none_does_not_suspend() -> None:
    model = FakeModel([respond.text("hi").timing(first=None, between=None)])
    ticks: list[str] = []

    async def other() -> None:
        ticks.append("other")

    async def main() -> list[str]:
        task = asyncio.ensure_future(other())
        async for chunk in model.stream(request()):
            ticks.append(chunk["type"])
        await task
        return ticks

    assert run(main) == ["block-start", "text-delta", "block-end", "finish", "other"]


def test_default_timing_yields_once_per_chunk() -> None:
    model = FakeModel([respond.text("hi")])
    ticks: list[str] = []

    async def other() -> None:
        ticks.append("other")

    async def main() -> list[str]:
        task = asyncio.ensure_future(other())
        async for chunk in model.stream(request()):
            ticks.append(chunk["type"])
        await task
        return ticks

    assert run(main)[0] == "other"


# --------------------------------------------------------------------------- faults


def test_raise_before_chunk_k_with_code() -> None:
    model = FakeModel(
        [respond.text("hello", deltas=2).raises("overloaded", code="OVERLOADED", before=2)]
    )
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        async for chunk in model.stream(request()):
            seen.append(dict(chunk))

    with pytest.raises(FakeError, match="overloaded") as info:
        run(main)
    assert info.value.code == "OVERLOADED"
    assert [c["type"] for c in seen] == ["block-start", "text-delta"]
    assert model.outcomes == ["raised"]


def test_a_raise_on_call_comes_from_stream_itself_before_any_stream() -> None:
    # FINISH-2: "an adapter may also fail by raising from stream()": by the call itself, as a
    # client refusing the request does, before it returns an iterator (session 61)
    model = FakeModel([respond.raises("no connection", code="E_CONNECT", on_call=True), respond.text("ok")])
    with pytest.raises(FakeError, match="no connection") as info:
        model.stream(request())  # no await, no iteration: the call raises
    assert info.value.code == "E_CONNECT"
    assert model.raised == [info.value] and model.outcomes == ["raised"] and len(model.requests) == 1
    seen: list[str] = []

    async def main() -> None:
        async for chunk in model.stream(request()):
            seen.append(str(chunk["type"]))

    run(main)
    assert "finish" in seen and model.outcomes == ["raised", "stop"]
    with pytest.raises(ValueError, match="no position"):
        respond.text("x").raises("y", on_call=True, after=0)


def test_raise_after_chunk_k_and_custom_exception_and_no_code() -> None:
    class Boom(Exception):
        pass

    model = FakeModel(
        [
            respond.text("x").raises(Boom("b"), after=0),
            respond.raises("plain"),
            respond.text("x").raises(Boom, before=-1),
        ]
    )
    counts: list[int] = []

    async def main() -> None:
        for _ in range(3):
            n = 0
            try:
                async for _chunk in model.stream(request()):
                    n += 1
            except Exception as exc:
                counts.append(n)
                assert not hasattr(exc, "code")

    run(main)
    assert counts == [1, 0, 3]  # after chunk 0; before chunk 0; just before finish


def test_hang_until_aborted_then_finish_aborted_at_the_abort_time() -> None:
    model = FakeModel([respond.text("hi").hang(after=0)])

    async def main() -> list[tuple[float, dict[str, Any]]]:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(30.0, ctrl.abort, "user")
        return await collect(model, request(signal=ctrl.signal))

    assert run(main) == [(0.0, v.block_start(0, "text")), (30.0, v.finish("aborted"))]
    assert model.outcomes == ["aborted"]


class _SignalWithoutDisposers:
    """A step signal whose ``add_listener`` returns nothing (the spec gives the signal no API)."""

    def __init__(self, signal: Any) -> None:
        self._signal = signal

    @property
    def aborted(self) -> bool:
        return bool(self._signal.aborted)

    @property
    def reason(self) -> Any:
        return self._signal.reason

    def add_listener(self, callback: Callable[[Any], object]) -> None:
        self._signal.add_listener(callback)


@pytest.mark.parametrize("response", [
    respond.text("hi").hang(after=0),
    respond.text("hi").timing(first=60.0),
    respond.text("hi").gate(Gate("never")),
], ids=["hang", "latency", "gate"])
def test_a_signal_whose_add_listener_returns_no_disposer_still_stops_the_stream(response: Response) -> None:
    model = FakeModel([response])

    async def main() -> list[tuple[float, dict[str, Any]]]:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(30.0, ctrl.abort, "user")
        return await collect(model, request(signal=_SignalWithoutDisposers(ctrl.signal)))

    out = run(main)
    assert out[-1] == (30.0, v.finish("aborted"))


def test_abort_between_chunks_is_honoured_promptly() -> None:
    model = FakeModel([respond.text("abcdef", deltas=6).timing(first=1.0, between=1.0)])

    async def main() -> list[tuple[float, dict[str, Any]]]:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(2.5, ctrl.abort)
        return await collect(model, request(signal=ctrl.signal))

    out = run(main)
    assert [t for t, _ in out] == [1.0, 2.0, 2.5]
    assert out[-1][1] == v.finish("aborted")


def test_abort_from_the_consumer_between_chunks_needs_no_wait() -> None:
    model = FakeModel([respond.text("abc", deltas=3).timing(first=None, between=None)])

    async def main() -> list[str]:
        ctrl = AbortController()
        kinds: list[str] = []
        async for chunk in model.stream(request(signal=ctrl.signal)):
            kinds.append(chunk["type"])
            if chunk["type"] == "text-delta":
                ctrl.abort("enough")
        return kinds

    assert run(main) == ["block-start", "text-delta", "finish"]


def test_on_abort_modes() -> None:
    async def play(response: Response) -> list[str]:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(1.0, ctrl.abort, "why")
        return [
            c["type"] for _, c in await collect(FakeModel([response]), request(signal=ctrl.signal))
        ]

    assert run(lambda: play(respond.hang().on_abort("return"))) == []
    with pytest.raises(AbortError, match="why"):
        run(lambda: play(respond.hang().on_abort("raise")))


def test_already_aborted_signal_stops_before_the_first_chunk() -> None:
    model = FakeModel([respond.text("x")])

    async def main() -> list[tuple[float, dict[str, Any]]]:
        ctrl = AbortController()
        ctrl.abort()
        return await collect(model, request(signal=ctrl.signal))

    assert run(main) == [(0.0, v.finish("aborted"))]


def test_gate_holds_the_stream_until_opened_then_latency_applies() -> None:
    gate = Gate("go")
    model = FakeModel([respond.text("x").gate(gate).timing(first=0.5, between=0)])

    async def main() -> list[float]:
        asyncio.get_running_loop().call_later(10.0, gate.open)
        return [t for t, _ in await collect(model, request())]

    assert run(main) == [10.5, 10.5, 10.5, 10.5]


def test_gate_mid_stream_with_an_asyncio_event_and_abort_while_waiting() -> None:
    event = asyncio.Event()
    model = FakeModel([respond.text("x").gate(event, before=1)])

    async def main() -> list[tuple[float, dict[str, Any]]]:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(4.0, ctrl.abort)
        return await collect(model, request(signal=ctrl.signal))

    assert run(main) == [(0.0, v.block_start(0, "text")), (4.0, v.finish("aborted"))]


# --------------------------------------------------------------------------- script


def test_records_requests_as_deep_copies_without_the_signal() -> None:
    model = FakeModel(["one", "two"])

    async def main() -> None:
        req = request("first", signal=AbortController().signal, system="be nice")
        await collect(model, req)
        req["messages"][0]["content"][0]["text"] = "mutated"  # type: ignore[typeddict-unknown-key]
        await collect(model, request("second"))

    run(main)
    assert model.calls == 2
    assert model.requests[0] == {
        "model": "fake",
        "messages": [v.message("user", [v.text("first")])],
        "system": "be nice",
    }
    assert "signal" not in model.requests[0]
    assert model.requests[1]["messages"][0]["content"][0]["text"] == "second"


def test_a_response_may_be_a_sync_or_async_function_of_the_request() -> None:
    async def later(req: ModelRequest) -> Response:
        await asyncio.sleep(1)
        return respond.text(f"async {req['model']}")

    model = FakeModel([lambda req: f"echo {req['messages'][-1]['content'][0]['text']}", later])  # type: ignore[typeddict-item]

    async def main() -> list[list[tuple[float, dict[str, Any]]]]:
        return [await collect(model, request("ping")), await collect(model, request())]

    first, second = run(main)
    assert first[2][1] == v.block_end(0, v.text("echo ping"))
    assert second[2] == (1.0, v.block_end(0, v.text("async fake")))


def test_call_past_the_end_of_the_script_fails_clearly() -> None:
    model = FakeModel(["only"], name="m")

    async def main() -> None:
        await collect(model, request())
        await collect(model, request("extra"))

    with pytest.raises(ScriptExhausted) as info:
        run(main)
    message = str(info.value)
    assert "fake model 'm': call #2 but the script has only 1 response(s)" in message
    assert "'extra'" in message
    assert model.problems() == [message]
    assert model.outcomes == ["stop", "exhausted"]
    with pytest.raises(ScriptExhausted):
        model.assert_all_used()


def test_unused_responses_on_demand_and_in_strict_mode() -> None:
    model = FakeModel(["a", "b", "c"], name="m")

    async def main() -> None:
        await collect(model, request())

    run(main)
    assert model.problems() == []
    with pytest.raises(
        UnusedResponses, match=r"2 of 3 scripted responses never requested \(responses #2..#3"
    ):
        model.assert_all_used()
    strict = FakeModel(["a"], strict=True)
    assert strict.problems() == [
        "fake model 'fake': 1 of 1 scripted responses never requested (responses #1..#1; the model was called 0 time(s))"
    ]
    model.push("late")
    assert model.remaining == 3


def test_consumer_closing_early_is_recorded() -> None:
    model = FakeModel([respond.text("abc", deltas=3)])

    async def main() -> None:
        gen = model.stream(request())
        async for chunk in gen:
            if chunk["type"] == "text-delta":
                break
        await gen.aclose()  # type: ignore[attr-defined]

    run(main)
    assert model.outcomes == ["closed"]


def test_deterministic_across_runs() -> None:
    script = [
        respond.text("hello world", deltas=4).timing(0.3, 0.1)
        + respond.tool_call("t", {"a": [1, 2]}, fragments=2)
    ]

    def once() -> list[tuple[float, dict[str, Any]]]:
        return run(lambda: collect(FakeModel(script), request()))

    assert once() == once()


def test_observed_events_show_model_activity() -> None:
    model = FakeModel([respond.text("a").timing(1.0, 0), respond.raises("x")], name="m")

    async def main() -> None:
        await collect(model, request(model="m"))
        try:
            await collect(model, request())  # a request naming another model: recorded (LOOP-10)
        except FakeError:
            pass

    result = simulator.run(main)
    digests = [e.pop("history") for e in result.timeline if e["kind"] == "model/request"]
    assert digests == [history_digest(request()["messages"])] * 2  # what the model was asked (LOG-7)
    assert result.timeline == [
        {"t": 0.0, "kind": "model/request", "model": "m", "call": 1, "messages": 1},
        {"t": 1.0, "kind": "model/done", "model": "m", "call": 1, "outcome": "stop", "chunks": 4},
        {"t": 1.0, "kind": "model/request", "model": "m", "call": 2, "messages": 1, "requested": "fake"},
        {"t": 1.0, "kind": "model/done", "model": "m", "call": 2, "outcome": "raised", "chunks": 0, "error": "x"},
    ]


def test_the_last_usage_streamed_is_in_model_done() -> None:
    model = FakeModel([respond.text("a").usage(7, 2)], name="m")
    result = simulator.run(lambda: collect(model, request()))
    done = [e for e in result.timeline if e["kind"] == "model/done"]
    assert done[0]["usage"] == {"input_tokens": 7, "output_tokens": 2} and done[0]["chunks"] == 5


def test_runs_unmodified_under_plain_asyncio() -> None:
    gate = Gate()
    model = FakeModel(
        [respond.text("hi", deltas=2).gate(gate).timing(0.001, 0.001), respond.hang()]
    )

    async def main() -> list[list[str]]:
        asyncio.get_running_loop().call_later(0.001, gate.open)
        first = [c["type"] for _, c in await collect(model, request())]
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(0.001, ctrl.abort)
        second = [c["type"] for _, c in await collect(model, request(signal=ctrl.signal))]
        return [first, second]

    assert asyncio.run(main()) == [
        ["block-start", "text-delta", "text-delta", "block-end", "finish"],
        ["finish"],
    ]


def test_outcomes_of_a_failing_response_function_and_a_cancelled_consumer() -> None:
    def broken(req: ModelRequest) -> Response:
        raise KeyError("no such thing")

    model = FakeModel([broken, respond.hang(), respond.text("x").no_finish()])

    async def main() -> None:
        try:
            await collect(model, request())
        except KeyError:
            pass
        task = asyncio.ensure_future(collect(model, request()))
        await asyncio.sleep(5)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await collect(model, request())

    run(main)
    assert model.outcomes == ["raised", "cancelled", "ended"]


# --------------------------------------------------------------------------- the suite's needs


def test_default_answers_past_the_script_without_a_problem() -> None:
    model = FakeModel([respond.text("first")], default=respond.text("ok"))

    async def main() -> list[list[dict[str, Any]]]:
        return [[c for _, c in await collect(model, request())] for _ in range(3)]

    streams = run(main)
    assert [s[1]["text"] for s in streams] == ["first", "ok", "ok"]
    assert model.problems() == [] and model.calls == 3


def test_max_calls_parks_a_runaway_loop_until_its_step_is_aborted() -> None:
    model = FakeModel([], default=respond.text("ok"), max_calls=2)

    async def main() -> tuple[list[dict[str, Any]], float]:
        for _ in range(2):
            await collect(model, request())
        assert not model.runaway
        controller = AbortController()
        asyncio.get_running_loop().call_later(5.0, controller.abort, "stop")
        timed = await collect(model, request(signal=controller.signal))
        return [c for _, c in timed], timed[-1][0]

    chunks, when = run(main)
    assert model.runaway and chunks == [v.finish("aborted")] and when == 5.0


def test_a_hook_runs_inside_the_stream_at_its_position() -> None:
    seen: list[str] = []
    response = (respond.text("hello", deltas=2).hook(lambda: seen.append("start"))
                .hook(lambda: seen.append("before-finish"), before=-1))
    model = FakeModel([response])

    async def main() -> list[str]:
        out: list[str] = []
        async for chunk in model.stream(request()):
            out.append(f"{chunk['type']}@{len(seen)}")
        return out

    assert run(main) == ["block-start@1", "text-delta@1", "text-delta@1", "block-end@1", "finish@2"]
    assert seen == ["start", "before-finish"]
    with pytest.raises(ValueError, match="hook: position 9 is outside the stream"):
        run(lambda: collect(FakeModel([respond.text("x").hook(lambda: None, before=9)]), request()))


def test_on_request_and_signals_are_recorded() -> None:
    calls: list[int] = []
    model = FakeModel(["a"], on_request=lambda: calls.append(len(model.requests)))
    controller = AbortController()
    run(lambda: collect(model, request(signal=controller.signal)))
    assert calls == [1] and model.signals == [controller.signal]


def test_a_request_records_tools_entries_not_of_0b_shape() -> None:
    # SVC-5, 0b: each tools entry is {name, description, input_schema}; more keys are not judged.
    good = {"name": "lookup", "description": "d", "input_schema": {"type": "object"}}
    cases = [
        ([good, {**good, "name": "extra", "cache": True}], None),
        ([{"name": "lookup", "description": "d", "parameters": {}}], ["lookup: no input_schema (its keys: description, name, parameters; 0b: description, input_schema, name)"]),
        ([{**good, "input_schema": "{}"}], ["lookup: input_schema is a str, not a JSON Schema object"]),
        (["lookup"], ["an entry that is not an object: str"]),
    ]
    for tools, shape in cases:
        model = FakeModel([respond.text("a")], name="fake")
        result = simulator.run(lambda model=model, tools=tools: collect(model, request(tools=tools)))  # type: ignore[misc]
        (seen,) = [e for e in result.timeline if e["kind"] == "model/request"]
        assert seen.get("tools_shape") == shape, (tools, seen)


def test_a_scripted_raise_is_a_fresh_error_each_time_and_the_script_keeps_no_traceback() -> None:
    scripted = FakeError("overloaded", code="OVERLOADED")
    model = FakeModel([respond.text("x").raises(scripted, after=0)], default=respond.text("x").raises(scripted, after=0))
    caught: list[BaseException] = []

    async def main() -> None:
        for _ in range(2):
            try:
                async for _chunk in model.stream(request()):
                    pass
            except FakeError as exc:
                caught.append(exc)

    run(main)
    assert len(caught) == 2 and caught[0] is not caught[1] and scripted not in caught
    assert [(str(e), getattr(e, "code", None)) for e in caught] == [("overloaded", "OVERLOADED")] * 2
    assert scripted.__traceback__ is None
