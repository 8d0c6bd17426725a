"""The driver's value encoding (no child needed): tags, escaping, errors, what JSON cannot say."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.wire.protocol import (
    Decoder,
    Opaque,
    ProtocolError,
    RemoteError,
    encode,
    error_info,
    loads,
)


class _Refs:
    """Refs for plain values: no live objects, errors kept by origin."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def ref_of(self, value: Any) -> dict[str, Any] | None:
        return None

    def error_origin(self, error: BaseException) -> int:
        self.errors.append(error)
        return len(self.errors) - 1

    def agent(self, handle: str) -> Any:
        return ("agent", handle)

    def session(self, handle: str) -> Any:
        return ("session", handle)

    def signal(self, handle: str) -> Any:
        return ("signal", handle)

    def error(self, info: Any) -> BaseException:
        origin = info.get("origin")
        return self.errors[origin] if origin is not None else RemoteError(info["message"], info["name"], info.get("code"))


def test_plain_json_travels_unchanged() -> None:
    value = {"a": [1, 2.5, None, True, "é"], "b": {"c": {}}, "t": (1, 2)}
    assert encode(value, _Refs()) == {"a": [1, 2.5, None, True, "é"], "b": {"c": {}}, "t": [1, 2]}


def test_what_json_cannot_say_is_opaque() -> None:
    refs = _Refs()
    assert encode({"x": object()}, refs) == {"x": {"$opaque": "object"}}
    assert encode(float("nan"), refs) == {"$opaque": "float"}
    assert encode({object(): 1}, refs) == {"$opaque": "dict"}


def test_a_lone_dollar_key_is_escaped_and_read_back() -> None:
    refs = _Refs()
    wire = encode({"$agent": "user data"}, refs)
    assert wire == {"$$agent": "user data"}
    assert json.loads(json.dumps(wire), object_hook=Decoder(refs)) == {"$agent": "user data"}
    nested = encode({"$x": {"$agent": "a"}}, refs)
    assert json.loads(json.dumps(nested), object_hook=Decoder(refs)) == {"$x": {"$agent": "a"}}


def test_tags_become_live_objects() -> None:
    decoded = json.loads('[{"$agent": "a1"}, {"$session": "a1"}, {"$signal": "g2"}, {"$opaque": "function"}]',
                         object_hook=Decoder(_Refs()))
    assert decoded[:3] == [("agent", "a1"), ("session", "a1"), ("signal", "g2")]
    assert isinstance(decoded[3], Opaque) and decoded[3].type == "function"


def test_an_error_that_went_through_the_child_comes_back_as_itself() -> None:
    refs = _Refs()
    original = KeyError("boom")
    wire = encode({"e": original}, refs)
    assert wire == {"e": {"$error": {"name": "KeyError", "message": "'boom'", "origin": 0}}}
    assert json.loads(json.dumps(wire), object_hook=Decoder(refs))["e"] is original


def test_a_remote_error_keeps_message_name_and_code() -> None:
    error = Decoder(_Refs())({"$error": {"name": "LoopError", "message": "agent is disposed", "code": "DISPOSED"}})
    assert isinstance(error, RemoteError)
    assert (str(error), error.name, error.code) == ("agent is disposed", "LoopError", "DISPOSED")
    coded = type("Coded", (Exception,), {"code": "E_X"})("m")
    assert error_info(coded) == {"name": "Coded", "message": "m", "code": "E_X"}


@pytest.mark.parametrize("line", [b"not json", b"[1, 2]", b'{"no": "type"}'])
def test_lines_that_are_not_messages_are_protocol_errors(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        loads(line)


def test_a_waterfall_observer_records_whether_the_child_runs_the_chain_or_asks() -> None:
    # Wire protocol §9: a passive waterfall is delivered as a notify of (args..., value) after the
    # child ran the chain itself; a child that ignores `passive` asks as for any waterfall
    # (args..., value, next), and the observer passes the chain through unchanged.
    import asyncio

    from conformance.adapter import RECORD, waterfall_observer
    from conformance.wire.handles import _PassiveWaterfall

    seen: list[tuple[Any, ...]] = []
    listener = waterfall_observer(lambda *args: seen.append(args))
    delivered = _PassiveWaterfall(listener, getattr(listener, RECORD))
    assert delivered("agent", 1, False) is None
    assert seen == [("agent", 1, False)]

    async def rest() -> bool:
        return True

    assert asyncio.run(delivered("agent", 2, False, rest)) is True  # the chain's value, unchanged
    assert seen == [("agent", 1, False), ("agent", 2, False)]


def test_long_lines_and_lines_split_across_reads_are_read_whole() -> None:
    # The reader kept a partial line as bytes and copied it for every 64 KiB read: a 50 MB line
    # took half a minute and was blamed on the child. Lines longer than a read, several lines in
    # one read, and a line ending exactly at a read's end all come back whole and in order.
    import sys

    from conformance.wire.child import Child

    script = (
        "import os, json, time\n"
        "out = int(os.environ['LOOPKIT_WIRE_FDS'].split(',')[1])\n"
        "big = json.dumps({'type': 'big', 'text': 'x' * 3_000_000}).encode()\n"
        "os.write(out, big[:70000]); time.sleep(0.05)\n"
        "os.write(out, big[70000:] + b'\\n{\"type\": \"a\"}\\n\\n{\"type\": \"b\"}')\n"
        "time.sleep(0.05); os.write(out, b'\\n')\n"
        "edge = json.dumps({'type': 'edge', 'text': 'y' * (65536 - 30)}).encode() + b'\\n'\n"
        "os.write(out, edge); os.write(out, b'{\"type\": \"c\"}\\n')\n"
    )
    child = Child([sys.executable, "-c", script], timeout=30)
    try:
        got = [child.read() for _ in range(5)]
    finally:
        child.close()
    assert [m["type"] for m in got] == ["big", "a", "b", "edge", "c"]
    assert got[0]["text"] == "x" * 3_000_000 and got[3]["text"] == "y" * (65536 - 30)
