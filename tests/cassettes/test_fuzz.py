"""Fuzzing the LLM cassette format through ``loopkit cassette show`` (issue 13's input contract).

Hypothesis builds cassettes from the shipped ones (every provider, streams and whole answers,
Bedrock's binary frames) by applying mutations of two kinds: ones that keep the file well formed
(header casing, scalar header values, the plain format without timed events, duplicated
interactions, ``parsed_body``, gzip, our metadata...) and ones that break it (a bad status, uri,
method, header or body type, a stream cut mid-event, a corrupted frame, bad offsets, broken or
deeply nested YAML...). The oracle is which kind was applied: the command exits 0 exactly when
every mutation kept the file well formed, and otherwise exits 2 with one line on stderr naming
the file; never a traceback. CI-sized and derandomized: the same examples on every run.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import app

from .conftest import SHIPPED

TEMPLATES = {
    name: yaml.safe_load((SHIPPED / name).read_text())
    for name in ("openai-chat/tools.yaml", "anthropic/text.yaml", "gemini/tools.yaml", "bedrock/text.yaml",
                 "openai-chat/text_whole_response.yaml", "anthropic/error_401.yaml", "openai-responses/text.yaml")
}


def _interaction(data: dict[str, Any]) -> dict[str, Any]:
    return data["interactions"][0]  # type: ignore[no-any-return]


def _streamed(data: dict[str, Any]) -> bool:
    return bool(_interaction(data)["response"].get("events"))


def _plain(data: dict[str, Any]) -> None:
    """Our format to stock vcrpy's: the body alone (it already holds the joined events)."""
    for interaction in data["interactions"]:
        interaction["response"].pop("events", None)


# Mutations: (name, applies to this cassette?, mutate in place, keeps it well formed?)


def _set_status(value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        _interaction(data)["response"]["status"]["code"] = value
    return mutate


def _set_request(field: str, value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        _interaction(data)["request"][field] = value
    return mutate


def _header(where: str, value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        _interaction(data)[where].setdefault("headers", {})["x-fuzz"] = value
    return mutate


def _body(value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        _plain(data)
        _interaction(data)["response"]["body"] = {"string": value}
    return mutate


def _upper_headers(data: dict[str, Any]) -> None:
    for interaction in data["interactions"]:
        for part in ("request", "response"):
            headers = interaction[part].get("headers") or {}
            interaction[part]["headers"] = {k.title(): v for k, v in headers.items()}


def _scalar_headers(data: dict[str, Any]) -> None:
    for interaction in data["interactions"]:
        headers = interaction["response"].get("headers") or {}
        interaction["response"]["headers"] = {k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in headers.items()}


def _duplicate(data: dict[str, Any]) -> None:
    data["interactions"].append(copy.deepcopy(data["interactions"][0]))


def _meta(data: dict[str, Any]) -> None:
    data["loopkit"] = {"adapter": "whatever", "note": [1, {"a": None}]}


def _parsed_body(data: dict[str, Any]) -> None:
    response = _interaction(data)["response"]
    response["parsed_body"] = json.loads(response.pop("body")["string"])


def _gzip(data: dict[str, Any]) -> None:
    response = _interaction(data)["response"]
    response["body"] = {"string": gzip.compress(response["body"]["string"].encode())}
    response["headers"]["content-encoding"] = ["gzip"]


def _cut_stream(data: dict[str, Any]) -> None:
    _plain(data)
    body = _interaction(data)["response"]["body"]
    value = body["string"]
    if isinstance(value, bytes):  # frames: end mid-frame
        body["string"] = value[: len(value) - 7]
        return
    last = value.rstrip("\n").rfind("data: {")
    body["string"] = value[: last + 12]  # inside the last event's JSON, before its end


def _flip_frame_byte(data: dict[str, Any]) -> None:
    _plain(data)
    body = _interaction(data)["response"]["body"]
    value = bytearray(body["string"])
    value[20] ^= 0xFF
    body["string"] = bytes(value)


def _offset(value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        _interaction(data)["response"]["events"][-1]["offset"] = value
    return mutate


def _event_data(data: dict[str, Any]) -> None:
    _interaction(data)["response"]["events"][0]["data"] = 12


def _no_interactions(data: dict[str, Any]) -> None:
    data["interactions"] = []


def _deep(data: dict[str, Any]) -> None:
    nested: Any = "x"
    for _ in range(600):
        nested = [nested]
    _interaction(data)["response"]["status"] = nested


ANY = lambda data: True  # noqa: E731 - a table of one-liners
STREAM = _streamed
WHOLE = lambda data: not _streamed(data) and _interaction(data)["response"]["status"]["code"] < 400 and not isinstance(  # noqa: E731
    _interaction(data)["response"]["body"].get("string"), bytes)
FRAMES = lambda data: _streamed(data) and isinstance(_interaction(data)["response"]["events"][0]["data"], bytes)  # noqa: E731

MUTATIONS: list[tuple[str, Any, Any, bool]] = [
    ("upper-case header names", ANY, _upper_headers, True),
    ("scalar header values", ANY, _scalar_headers, True),
    ("plain vcrpy format", ANY, _plain, True),
    ("duplicated interaction", ANY, _duplicate, True),
    ("loopkit metadata", ANY, _meta, True),
    ("a harmless extra header", ANY, _header("response", ["ok"]), True),
    ("parsed_body", WHOLE, _parsed_body, True),
    ("gzip body", WHOLE, _gzip, True),
    *[(f"status {v!r}", ANY, _set_status(v), False) for v in (-1, 99999, 0, 600, "200", None, True, 1.5)],
    *[(f"uri {v!r}", ANY, _set_request("uri", v), False) for v in (5, "", "ftp://host/x", "not a url", None, [1])],
    *[(f"method {v!r}", ANY, _set_request("method", v), False) for v in (None, 5, "", "PO ST")],
    *[(f"{w} header value {v!r}", ANY, _header(w, v), False) for w in ("request", "response") for v in ([], {"a": 1}, [[1]])],
    ("a UTF-8 response header value", ANY, _header("response", ["caf\u00e9 \u2122"]), True),
    ("response headers not a mapping", ANY, lambda d: _interaction(d)["response"].__setitem__("headers", ["a"]), False),
    *[(f"body {v!r}", ANY, _body(v), False) for v in (5, [1, 2], 3.5, True)],
    ("stream cut mid-event", STREAM, _cut_stream, False),
    ("corrupted frame", FRAMES, _flip_frame_byte, False),
    *[(f"event offset {v!r}", STREAM, _offset(v), False) for v in (-1, "soon", float("inf"), float("nan"))],
    ("event data not text", STREAM, _event_data, False),
    ("no interactions", ANY, _no_interactions, False),
    ("600-deep status", ANY, _deep, False),
]
TEXT_BREAKS = [
    ("unterminated flow sequence", lambda text: text.replace("interactions:", "interactions: [", 1)),
    ("a tab indent", lambda text: text.replace("\n  ", "\n\t", 1)),
    ("not a mapping at the top", lambda text: "- " + text.replace("\n", "\n  ")),
    ("20000-deep YAML", lambda text: "interactions: " + "[" * 20000 + "]" * 20000 + "\n"),
]


@st.composite
def cassettes(draw: st.DrawFn) -> tuple[str, bool, list[str]]:
    """``(file text, well formed?, what was done)``."""
    data = copy.deepcopy(TEMPLATES[draw(st.sampled_from(sorted(TEMPLATES)))])
    done, valid = [], True
    for _ in range(draw(st.integers(0, 3))):
        name, applies, mutate, keeps = draw(st.sampled_from(MUTATIONS))
        if not applies(data):
            continue
        mutate(data)
        done.append(name)
        valid = valid and keeps
        if not keeps:
            break  # one defect per file: each later mutation assumes a well-formed cassette
    text = yaml.safe_dump(data, sort_keys=False, width=draw(st.sampled_from([80, 1 << 16])))
    if valid and draw(st.integers(0, 9)) == 0:
        name, breaks = draw(st.sampled_from(TEXT_BREAKS))
        text, valid = breaks(text), False
        done.append(name)
    return text, valid, done


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cassettes())
def test_show_exits_0_only_for_well_formed_cassettes_and_never_with_a_traceback(case: tuple[str, bool, list[str]], tmp_path: Path) -> None:
    text, valid, done = case
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["cassette", "show", str(path), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), (done, repr(result.exception))
    assert "Traceback" not in result.output, done
    if valid:
        assert result.exit_code == 0, (done, result.stderr)
        assert json.loads(result.stdout)["file"] == str(path)
    else:
        assert result.exit_code == 2, (done, result.stdout[:300])
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), (done, result.stderr)
