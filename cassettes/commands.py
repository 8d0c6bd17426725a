"""``loopkit cassette ...``: show an LLM cassette's chunk stream, record a new one."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from reference_loop.protocols import ModelRequest

from .errors import CassetteError, ProviderError
from .names import ADAPTER_NAMES

TEST_SERVER_HEADER = (
    "Recorded through loopkit's {adapter} adapter, by vcrpy, against the local test server\n"
    "(cassettes/testserver.py, 127.0.0.1), which serves the provider's documented wire format.\n"
    "This is not traffic from the real provider. vcrpy recorded and scrubbed the exchange;\n"
    "loopkit (cassettes/loopkit_vcr.py) added each event's arrival offset.\n"
    "Regenerate: loopkit cassette record {out} --adapter {adapter} --model {model} --test-server{flags}"
)
LIVE_HEADER = "Recorded through loopkit's {adapter} adapter, by vcrpy, against {base_url}."


def show(
    file: Annotated[Path, typer.Argument(help="A vcrpy-style LLM cassette (ours or another project's).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Replay each interaction through the matching adapter and print its chunk stream."""
    from .replay import replay_file

    try:
        _, results = replay_file(str(file))
    except CassetteError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if results and not any(r.adapter for r in results):
        # nothing here is model traffic the kit reads: bad input, not an empty replay
        typer.echo(f"error: {file}: no interaction is an API loopkit's adapters speak (interaction 1: "
                   f"{results[0].method} {results[0].url})", err=True)
        raise typer.Exit(2)
    if as_json:
        typer.echo(json.dumps({"file": str(file), "interactions": [r.to_json() for r in results]}, indent=2))
        return
    for n, result in enumerate(results, 1):
        mode = "streaming" if result.streaming else "whole response"
        typer.echo(f"#{n} {result.method} {result.url} -> {result.status} ({result.adapter or 'no adapter'}, {mode})")
        for chunk in result.chunks:
            typer.echo("  " + json.dumps(chunk))
        if result.error is not None:
            typer.echo(f"  error: {result.error}")
        typer.echo("  " + _summary(result.report()))
        for warning in result.warnings():
            typer.echo(f"  warning: {warning}")


def _summary(report: dict[str, Any]) -> str:
    """One line: visible characters recorded vs streamed, usage, finish."""
    recorded = "-" if report["recorded_chars"] is None else report["recorded_chars"]
    usage = "usage " + json.dumps(report["usage"]) if report["usage"] else "no usage"
    finish = "finish " + json.dumps(report["finish"]) if report["finish"] else "no finish"
    return f"visible characters: {recorded} recorded, {report['stream_chars']} streamed; {usage}; {finish}"


def record(
    out: Annotated[Path, typer.Argument(help="Cassette file to write (e.g. cassettes/llm/openai-chat/hello.yaml).")],
    model: Annotated[str, typer.Option("--model", help="Provider model name (a scenario name for --test-server).")],
    adapter: Annotated[str, typer.Option("--adapter", help=f"One of: {', '.join(ADAPTER_NAMES)}.")] = "openai-chat",
    prompt: Annotated[str, typer.Option("--prompt", help="The user message.")] = "Say hello.",
    system: Annotated[str | None, typer.Option("--system", help="System prompt.")] = None,
    tools: Annotated[Path | None, typer.Option("--tools", help="JSON file: a list of {name, description, input_schema} (spec 0b).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="API root; default $LOOPKIT_BASE_URL or the provider's.")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="Environment variable holding the key.")] = None,
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="Streaming or whole-response API.")] = True,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens")] = None,
    filter_header: Annotated[list[str] | None, typer.Option("--filter-header", help="Another header to scrub (repeatable).")] = None,
    test_server: Annotated[bool, typer.Option("--test-server", help="Record against the local test server.")] = False,
    answer_tools: Annotated[str | None, typer.Option("--answer-tools", help="Answer every tool call with this text and record the next turn too.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS", help="Wall-clock seconds the whole recording may take (0: no limit); a server that never answers, or streams for ever, is cut off (exit 2).")] = 300.0,
    platform: Annotated[str | None, typer.Option("--platform", help="With --adapter anthropic: 'bedrock' speaks it through Amazon Bedrock's InvokeModel (--model: the Bedrock model id; key $AWS_BEARER_TOKEN_BEDROCK, else SigV4 with the local AWS credentials).")] = None,
) -> None:
    """Record one request through an adapter (key and base URL from the environment)."""
    # Imported here: the adapters load httpx and botocore, which other commands do not need.
    from .providers import ADAPTERS
    from .record import record_cassette
    from .scrub import redact_url
    from .testserver import SCENARIOS
    from .toolspecs import load_tools

    if adapter not in ADAPTERS:
        typer.echo(f"error: unknown adapter {adapter!r} (known: {', '.join(ADAPTERS)})", err=True)
        raise typer.Exit(2)
    if test_server and model not in SCENARIOS:
        typer.echo(f"error: unknown test-server scenario {model!r} for --model (known: {', '.join(SCENARIOS)})", err=True)
        raise typer.Exit(2)
    if not model.strip() or any(c.isspace() for c in model):
        typer.echo(f"error: --model {model!r} is not a model name", err=True)
        raise typer.Exit(2)
    if platform is not None and (adapter != "anthropic" or platform not in ("anthropic", "bedrock")):
        typer.echo(f"error: --platform {platform!r}: only 'bedrock' (or 'anthropic'), with --adapter anthropic", err=True)
        raise typer.Exit(2)
    bedrock = platform == "bedrock"
    options: dict[str, Any] = {"platform": platform} if platform else {}
    cls = ADAPTERS[adapter]
    scenario = model
    if test_server and bedrock:
        model = f"anthropic.{model}"  # a Bedrock id names its vendor; the test server reads the scenario after it
    request: ModelRequest = {"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}]}
    if system:
        request["system"] = system
    if tools is not None:
        try:
            request["tools"] = load_tools(tools)
        except (OSError, ValueError) as exc:
            typer.echo(f"error: {tools}: {exc}", err=True)
            raise typer.Exit(2) from exc
    key = os.environ.get(api_key_env or ("AWS_BEARER_TOKEN_BEDROCK" if bedrock else cls.api_key_env))

    if not 0 <= timeout < float("inf"):  # NaN too
        typer.echo(f"error: --timeout must be a finite number of seconds, at least 0 (got {timeout})", err=True)
        raise typer.Exit(2)
    if max_tokens is not None and max_tokens < 1:  # the provider would answer 400, after the call
        typer.echo(f"error: --max-tokens must be a positive whole number (got {max_tokens})", err=True)
        raise typer.Exit(2)

    async def run(url: str | None, header: str, meta: dict[str, Any]) -> None:
        try:
            # httpx's timeouts bound each read, not the whole answer: a stream without end is cut here
            chunks, error = await asyncio.wait_for(_record(url, header, meta), timeout or None)
        except TimeoutError:
            typer.echo(f"error: {redact_url(url or '')}: no complete answer within {timeout:g}s of wall time "
                       "(--timeout); nothing recorded", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"wrote {out}: {len(chunks)} chunks" + (f", error {error}" if error else ""))

    async def _record(url: str | None, header: str, meta: dict[str, Any]) -> tuple[list[Any], Any]:
        try:
            _, chunks, error = await record_cassette(
                out, adapter=adapter, request=request, base_url=url, api_key=key, stream=stream,
                max_tokens=max_tokens, filter_headers=filter_header or (), header=header, meta=meta,
                answer_tools=answer_tools, options=options,
            )
        except (ProviderError, CassetteError) as exc:  # nothing answered, or `out` cannot be written: no cassette
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        return chunks, error

    if test_server:
        from .testserver import WEATHER_TOOL, serve

        if scenario in ("tools", "thinking-tools") and "tools" not in request:
            request["tools"] = [WEATHER_TOOL]
        flags = (("" if stream else " --no-stream") + (f" --platform {platform}" if platform else "")
                 + (f" --answer-tools {json.dumps(answer_tools)}" if answer_tools is not None else ""))
        header = TEST_SERVER_HEADER.format(adapter=adapter, out=out.as_posix(), model=scenario, flags=flags)
        with serve(delay=0.02) as server:
            asyncio.run(run(server.base_url, header, {"recorded_against": "loopkit local test server"}))
        return
    url = base_url or os.environ.get("LOOPKIT_BASE_URL") or (None if bedrock else cls.default_base_url)
    if url is None:  # the adapter's own default: $AWS_REGION's Bedrock runtime
        url = cls(**options).base_url
    shown = redact_url(url)  # a key in the query or the userinfo never reaches the header
    asyncio.run(run(url, LIVE_HEADER.format(adapter=adapter, base_url=shown), {"recorded_against": shown}))


def _needs_a_command(ctx: typer.Context) -> None:
    """``loopkit cassette`` alone: one line on stderr and exit 2, like every other bad input."""
    if ctx.invoked_subcommand is None:
        typer.echo("error: loopkit cassette needs a command: show FILE, or record OUT (see loopkit cassette --help)", err=True)
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add the ``cassette`` sub-app (``show``, ``record``) to the ``loopkit`` app."""
    sub = typer.Typer(help="LLM cassettes: replay recorded provider traffic, record new traffic.", invoke_without_command=True)
    sub.callback()(_needs_a_command)
    sub.command("show")(show)
    sub.command("record")(record)
    app.add_typer(sub, name="cassette")
