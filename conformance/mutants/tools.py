"""Mutants of spec section 5: tool dispatch, results, aborts."""

from __future__ import annotations

from ._build import Mutant, Patch

_TOOL_LOOP = """\
            for call in calls:  # TOOL-1: one after another, in the model's order
                if signal.aborted:
                    break
                await self._run_tool(turn, step, call, signal)
"""

MUTANTS = [
    Mutant(
        "tool-calls-deduped-by-id",
        "each tool-call id is dispatched once per turn, as a guard against a provider replaying a call: "
        "a later step's call under an id an earlier step used (a provider numbering calls per "
        "response) never runs, and the step counts as having no tool calls",
        ("TOOL-1", "LOOP-5", "CONT-1"),
        "5",
        (
            Patch(
                "agent",
                "            calls = [\n"
                "                b\n"
                "                for b in message[\"content\"]\n"
                "                if isinstance(b, dict) and b.get(\"type\") == \"tool-call\"\n"
                "            ]\n",
                "            seen = turn.__dict__.setdefault(\"dispatched\", set())  # the ids this turn has run\n"
                "            calls = [\n"
                "                b\n"
                "                for b in message[\"content\"]\n"
                "                if isinstance(b, dict) and b.get(\"type\") == \"tool-call\"\n"
                "                and str(b.get(\"id\", \"\")) not in seen\n"
                "            ]\n"
                "            seen.update(str(b.get(\"id\", \"\")) for b in calls)\n",
            ),
        ),
        notes="Blind round 53 (session 45, 2026-12-06): the suite and the hunt missed it until "
              "`test_a_call_id_an_earlier_step_used_still_runs` and `failing-tool`'s second step, whose "
              "call reuses the first step's first id (TOOLS).",
    ),
    Mutant(
        "tool-result-listener-id",
        "tool/result is keyed on the call id a tools/execute listener returned instead of the "
        "model's call id",
        ("TOOL-4", "LOG-6"),
        "5",
        (
            Patch("agent", '        data["call_id"] = call_id\n', ""),
            Patch(
                "agent",
                '        data["error"] = dict(result["error"])\n    return data\n',
                '        data["error"] = dict(result["error"])\n'
                '    if result.get("call_id"):\n        data["call_id"] = str(result["call_id"])\n'
                "    return data\n",
            ),
        ),
    ),
    Mutant(
        "tool-result-id-read-back",
        "tool/result takes its call id back from the execution the tools/execute waterfall was "
        "given, once the chain returned: a plugin that edited the id in place before next() "
        "changes the id the result is logged under",
        ("TOOL-4",),
        "5",
        (
            Patch("agent", '        data["call_id"] = call_id\n',
                  '        data["call_id"] = str(execution.get("call_id", call_id))  # as the waterfall left it\n'),
        ),
        notes="Blind round O (session 61, 2026-12-07): the suite and the hunt missed it until "
              "`test_result_keyed_on_model_call_id[edited-in-place]` and the "
              "`tool-plugin` workload's editing plugin (session 62).",
    ),
    Mutant(
        "tools-concurrent",
        "the tool calls of one step run concurrently (gathered) instead of one after another",
        ("TOOL-1",),
        "5",
        (
            Patch(
                "agent",
                _TOOL_LOOP,
                "            await asyncio.gather(*(self._run_tool(turn, step, c, signal) for c in calls))\n",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "tool-abort-continues",
        "an abort during the step's last tool call only fails that call: the step is not ended, "
        "so the turn continues with a further model step and ends completed",
        ("TOOL-5", "ABORT-1"),
        "5",
        (
            Patch(
                "agent",
                "            if signal.aborted:  # TOOL-5: an abort during a tool ends the step\n"
                '                return _StepOutcome(aborted=_abort_reason(signal))\n',
                "",
            ),
        ),
    ),
    Mutant(
        "tool-error-not-contained",
        "only the loop's own errors become error results: a failing tool ends the turn error",
        ("TOOL-3",),
        "5",
        (
            Patch(
                "agent",
                "        except Exception as exc:  # TOOL-3: a failing/unknown tool or listener is a result\n",
                "        except LoopError as exc:  # a malformed tool result is a failed result\n",
            ),
        ),
    ),
    Mutant(
        "tool-error-content-string",
        "a failed tool's error result carries its content as the bare string 'Error: <message>' "
        "instead of a list holding one text block",
        ("TOOL-3",), "5",
        (Patch("tools",
               "    result: dict[str, Any] = {\"content\": [v.text(f\"Error: {error_message(exc)}\")], \"is_error\": True}\n",
               "    result: dict[str, Any] = {\"content\": f\"Error: {error_message(exc)}\", \"is_error\": True}\n"),),
    ),
    Mutant(
        "tool-args-invalid-empty",
        "arguments that are not JSON are replaced by {} (call the tool with no arguments) instead of "
        "being passed through as the raw string",
        ("TOOL-2",),
        "5",
        (
            Patch(
                "tools",
                "    except ValueError:\n        return raw\n",
                "    except ValueError:\n        return {}  # malformed arguments: call the tool with none\n",
            ),
        ),
    ),
    Mutant(
        "tools-reversed",
        "a step's tool calls run one at a time but last first, not in the model's order",
        ("TOOL-1",),
        "5",
        (
            Patch(
                "agent",
                "            for call in calls:  # TOOL-1: one after another, in the model's order\n",
                "            for call in reversed(calls):\n",
            ),
        ),
        notes="Blind check of 2026-12-03 (fourth round): the suite killed it; the hunt missed it until "
              "TOOLS compared the order of a step's tool/call events with its message's tool-call blocks.",
    ),
    Mutant(
        "tool-failure-not-flagged",
        "a failing tool's result carries the 'Error: <message>' text but is_error false",
        ("TOOL-3",),
        "5",
        (
            Patch(
                "tools",
                '    result: dict[str, Any] = {"content": [v.text(f"Error: {error_message(exc)}")], "is_error": True}',
                '    result: dict[str, Any] = {"content": [v.text(f"Error: {error_message(exc)}")], "is_error": False}',
            ),
        ),
        notes="Blind check of 2026-12-03 (fifth round): the suite killed it; the hunt missed it until "
              "TOOLS checked that a failed call's result is an is_error one.",
    ),
    Mutant(
        "tool-error-no-name",
        "a failing tool's result carries error{code} without the error's name (0b: {name, code})",
        ("TOOL-3",),
        "5",
        (
            Patch(
                "tools",
                '        result["error"] = {"name": type(exc).__name__, "code": code}',
                '        result["error"] = {"code": code}',
            ),
        ),
        notes="Blind check of 2026-12-03 (sixth round): the suite killed it; the hunt missed it until "
              "the DATA oracle checked every session event's data against spec 0/0b.",
    ),
    Mutant(
        "tool-args-empty-raw",
        "a tool call's empty arguments string reaches the tool as '' instead of {}",
        ("TOOL-2",),
        "5",
        (Patch("tools", "    if not raw.strip():\n        return {}", "    if not raw.strip():\n        return raw"),),
        notes="Blind check of 2026-12-03 (sixth round): the suite killed it; the hunt missed it until its "
              "tool-plugin workload's call had empty arguments.",
    ),
    Mutant(
        'tool-args-non-object-raw',
        'arguments that parse as JSON but not as an object (an array, a number) are passed through as the raw string',
        ('TOOL-2',),
        '5',
        (
            Patch('tools',
                  '        return json.loads(raw, parse_constant=_not_json)  # NaN, Infinity: not JSON (RFC 8259)\n',
                  '        parsed = json.loads(raw, parse_constant=_not_json)\n'
                  '        return parsed if isinstance(parsed, dict) else raw  # tool inputs are JSON objects\n'),
        ),
        notes="Round 12: the suite killed it; the hunt found it once failing-tool's arguments were a JSON array (ARGS).",
    ),
    Mutant(
        'tool-schemas-cached-past-dispose',
        'the tool schemas are cached and only a registration clears the cache: a tool removed mid-turn is still offered',
        ('SVC-5',),
        '11',
        (
            Patch('tools',
                  '        self._tools: dict[str, Tool] = {}\n',
                  '        self._tools: dict[str, Tool] = {}\n        self._schemas: list[ToolSchema] | None = None  # cache, rebuilt after a registration\n'),
            Patch('tools',
                  '        self._tools[name] = tool\n\n        def dispose() -> None:',
                  '        self._tools[name] = tool\n        self._schemas = None\n\n        def dispose() -> None:'),
            Patch('tools',
                  '        return [\n            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}\n            for t in self._tools.values()\n        ]',
                  '        if self._schemas is None:\n            self._schemas = [\n                {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}\n                for t in self._tools.values()\n            ]\n        return list(self._schemas)'),
        ),
        interleaving=True,
        notes='Round 15 (written blind): the suite passed it until test_sections_and_tools_changed_during_a_turn_reach_its_next_step[remove]; the hunt finds it through reconfigure in the tool workload (which removes its spare tool).',
    ),
    Mutant(
        'tool-args-memo-shared',
        'parsed tool arguments are memoised per agent by their text: two calls with the same arguments share one object, so a tool consuming its arguments in place leaves the next call an empty one',
        ('TOOL-2',),
        '5',
        (
            Patch('agent',
                  '            "arguments": parse_arguments(raw),  # TOOL-2\n',
                  '            "arguments": self.__dict__.setdefault("_parsed", {}).setdefault(raw, parse_arguments(raw)),  # TOOL-2, once per text\n'),
        ),
        interleaving=False,
        notes="The third independent loop's blind round (session 33) wrote it; the suite's test_each_call_gets_its_own_parsed_arguments killed it, the hunt missed it until its tool consumed its arguments in place and two-step's first step had two calls with one text (session 34, 2026-12-04).",
    ),
    Mutant(
        "unknown-tool-skips-waterfall",
        "a call of a tool nobody registered is failed UNKNOWN_TOOL before the tools/execute waterfall: a "
        "listener serving that tool itself is never asked",
        ("LOOP-5", "TOOL-3"),
        "5",
        (
            Patch(
                "agent",
                "        async def execute() -> None:\n",
                "        async def execute() -> None:\n"
                "            if self._service.tools.get(name) is None:\n"
                '                box["result"] = await self._service.tools.execute(execution)  # UNKNOWN_TOOL\n'
                "                return\n",
            ),
        ),
        notes="Round 45 (session 43, written blind in the reference): the suite passed it until "
              "test_a_listener_serves_a_tool_nobody_registered; the hunt found it once the failing-tool workload "
              "had a plugin serving a tool nobody registered (ANSWERED).",
    ),
    Mutant(
        "tool-args-too-deep-crash",
        "arguments nested past the JSON parser's depth raise RecursionError out of the argument parse: "
        "the step fails and the turn ends error, where TOOL-2 passes text the parser refuses through raw "
        "and nothing crashes",
        ("TOOL-2",),
        "5",
        (
            Patch("tools",
                  "    except RecursionError:  # nested past the parser's depth: not JSON to it (nothing crashes)\n"
                  "        return raw\n",
                  ""),
        ),
        notes="Session 49 (a reviewer's finding in an independent loop, which the reference shared): the suite "
              "passed it until test_arguments_nested_past_a_parsers_limit_crash_nothing; out of the hunt's reach "
              "(no workload's arguments are nested that deep: input robustness, not a race).",
    ),
]
