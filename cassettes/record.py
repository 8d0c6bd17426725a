"""Record LLM cassettes through a provider adapter, with vcrpy doing the recording.

The adapter talks to the real endpoint over its ordinary httpx client (no transport of ours), and
``LoopkitVCR`` (``cassettes.loopkit_vcr``) records what crosses vcrpy's patched httpx transport:
vcrpy scrubs, decodes and saves; loopkit's hooks add the per-event arrival offsets and erase every
secret value from the file. Each server-sent event is stored as its own record with its offset,
and the whole body as ``body.string``, so stock vcrpy can replay the file too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reference_loop.assembler import BlockAssembler
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk, Message, text, tool_result

from .errors import ProviderError
from .loopkit_vcr import FILTERED, SENSITIVE_HEADERS, LoopkitVCR, check_writable

__all__ = ["FILTERED", "SENSITIVE_HEADERS", "record_cassette"]


async def record_cassette(
    out: str | Path,
    *,
    adapter: str,
    request: ModelRequest,
    base_url: str | None = None,
    api_key: str | None = None,
    stream: bool = True,
    max_tokens: int | None = None,
    filter_headers: Iterable[str] = (),
    header: str = "",
    meta: dict[str, Any] | None = None,
    answer_tools: str | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[Path, list[Chunk], ProviderError | None]:
    """Send ``request`` through ``adapter`` to a real endpoint and write what went over the wire.

    ``out`` is replaced (vcrpy record mode ``all``, the old file ignored). Returns the file, the
    chunks the adapter yielded and the provider error it raised, if any (an error answer is
    recorded too: replaying it must give the same error). When nothing answered (connection
    refused...), vcrpy recorded nothing and saves nothing: the error is raised and no file written.
    An ``out`` no cassette can be written to raises ``CassetteError`` before any request.

    ``answer_tools`` records a second turn: when the answer called tools, its assistant message
    (every block as the adapter assembled it, ``provider_data`` included) and one result per call
    (that text) are sent back, and that exchange is recorded too; the chunks returned are both
    turns'. This is how a thinking-plus-tools round trip is recorded. ``options`` are the
    adapter's own (``{"platform": "bedrock"}``: Anthropic through Bedrock's InvokeModel).

    While recording, the adapter sees each response only once vcrpy has read all of it (vcrpy's
    httpx stub drains the stream before returning it), so the chunks arrive together; the
    arrival offsets written to the file are measured underneath vcrpy, at the network reads.
    """
    from .providers import ADAPTERS

    check_writable(out)  # before the request: a call made (and paid for) must not be lost to a bad path
    recorder = LoopkitVCR(record_mode="all", filter_headers=filter_headers)
    # The key is a secret wherever it travels (a header, the base URL, a request body).
    context = recorder.use_cassette(out, comment=header, meta={"adapter": adapter, **(meta or {})}, overwrite=True,
                                    secrets=[api_key] if api_key else [])
    model = ADAPTERS[adapter](base_url=base_url, api_key=api_key, stream=stream, max_tokens=max_tokens, **(options or {}))
    chunks: list[Chunk] = []
    error: ProviderError | None = None
    with context as cassette:
        try:
            async for chunk in model.stream(request):
                chunks.append(chunk)
            follow_up = _follow_up(request, chunks, answer_tools) if answer_tools is not None else None
            if follow_up is not None:
                async for chunk in model.stream(follow_up):
                    chunks.append(chunk)
        except ProviderError as exc:
            error = exc
    if error is not None and not len(cassette):
        raise error  # nothing came back: there is nothing to keep
    return Path(out), chunks, error


def _follow_up(request: ModelRequest, chunks: list[Chunk], answer: str) -> ModelRequest | None:
    """The next request of a conversation whose answer called tools (``None`` if it did not)."""
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.add(chunk)
    message = assembler.message()
    calls = [b for b in message["content"] if b["type"] == "tool-call"]
    if not calls:
        return None
    results: list[Message] = [{"role": "user", "content": [tool_result(str(c["id"]), [text(answer)])]} for c in calls]
    return {**request, "messages": [*request["messages"], message, *results]}
