"""The SSE parser: event boundaries, fields, line endings, partial input."""

from __future__ import annotations

from cassettes.sse import SSEEvent, SSEParser, split_events


def test_events_complete_only_at_blank_line_across_pieces() -> None:
    parser = SSEParser()
    assert parser.feed("event: a\nda") == []
    assert parser.feed("ta: {\"x\": 1}\n") == []
    assert parser.feed("\n") == [SSEEvent("a", '{"x": 1}')]
    assert parser.pending == ""


def test_crlf_comments_multiline_data_and_space_rule() -> None:
    parser = SSEParser()
    events = parser.feed(": keep-alive\r\n\r\ndata:first\r\ndata:  second\r\nid: 7\r\n\r\n")
    assert events == [SSEEvent(None, "first\n second", "7")]


def test_partial_event_is_reported_pending_and_closed() -> None:
    parser = SSEParser()
    parser.feed("data: [DONE]\n\ndata: {\"cut")
    assert parser.pending == 'data: {"cut'
    assert parser.close() == [SSEEvent(None, '{"cut')]


def test_split_events_round_trips_and_returns_remainder() -> None:
    text = "data: 1\n\n\ndata: 2\n\ndata: 3"
    raw, rest = split_events(text)
    assert raw == ["data: 1\n\n\n", "data: 2\n\n"]
    assert rest == "data: 3"
    assert "".join(raw) + rest == text
