"""Mutants of spec sections 1 and 1b: the session log, derived history, chunk assembly."""

from __future__ import annotations

from ._build import Mutant, Patch

MUTANTS = [
    Mutant(
        "log-notify-before-push",
        "append notifies session/event listeners before pushing the event, so a throwing listener "
        "loses the event",
        ("LOG-2",),
        "1",
        (
            Patch(
                "session",
                '        self._events.append(event)\n        self._bus.emit("session/event", self, event)\n',
                '        self._bus.emit("session/event", self, event)\n        self._events.append(event)\n',
            ),
        ),
    ),
    Mutant(
        "derive-context-as-steering",
        "derived history wraps injected context in <steering> tags like steering messages",
        ("LOG-7",),
        "1",
        (
            Patch(
                "session",
                '            tag = "steering" if kind == "steering/message" else "context"\n',
                '            tag = "steering" if kind.endswith("/message") else "context"\n',
            ),
        ),
    ),
    Mutant(
        "asm-close-order",
        "the assembled message lists closed blocks in the order they closed, not by stream index",
        ("ASM-3",),
        "1b",
        (
            Patch(
                "assembler",
                "        for index in sorted(set(self._closed) | set(self._open)):\n",
                "        for index in [*self._closed, *sorted(set(self._open) - set(self._closed))]:\n",
            ),
        ),
    ),
    Mutant(
        "asm-delta-after-end",
        "deltas arriving after a block's block-end are folded into a fresh partial block that "
        "replaces the authoritative one",
        ("ASM-1",),
        "1b",
        (
            Patch(
                "assembler",
                "        if not isinstance(index, int) or index in self._closed:\n",
                "        if not isinstance(index, int):\n",
            ),
            Patch(
                "assembler",
                "            if index in self._closed:\n                blocks.append(self._closed[index])\n",
                "            if index in self._closed and index not in self._open:\n"
                "                blocks.append(self._closed[index])\n",
            ),
        ),
    ),
    Mutant(
        "asm-unclosed-delta-block-as-text",
        "a block first seen through its deltas (no block-start) is built as text whatever its deltas "
        "are, so a reasoning block that never closes is kept as text",
        ("ASM-2",),
        "1b",
        (
            Patch(
                "assembler",
                '            partial = self._open.setdefault(index, _Partial(kind.removesuffix("-delta")))',
                '            partial = self._open.setdefault(index, _Partial("text"))',
            ),
        ),
    ),
    Mutant(
        "usage-chunk-unlogged",
        "usage chunks are folded into the assembler but not appended as assistant/chunk (nor emitted as "
        "agent/stream-chunk), since the step's usage gets its own usage event anyway",
        ("LOG-3",), "1",
        (Patch("agent",
               "                if signal.aborted:\n"
               "                    break\n"
               "                event = self._session.append(\n",
               "                if signal.aborted:\n"
               "                    break\n"
               "                if isinstance(chunk, dict) and chunk.get(\"type\") == \"usage\":\n"
               "                    assembler.add(chunk)  # logged once, as the step's usage event\n"
               "                    continue\n"
               "                event = self._session.append(\n"),),
    ),
    Mutant(
        "asm-usage-summed",
        "usage chunks are accumulated (counts summed key by key) instead of the last one being the "
        "step's usage, as if each chunk reported an increment",
        ("ASM-4",),
        "1b",
        (
            Patch(
                "assembler",
                '            self.usage = chunk["usage"]  # ASM-4: the last one wins\n',
                "            # providers report usage in pieces (input first, output at the end): add them up\n"
                "            merged = dict(self.usage or {})\n"
                '            for key, count in chunk["usage"].items():\n'
                "                merged[key] = merged.get(key, 0) + count if isinstance(count, int) else count\n"
                "            self.usage = merged  # type: ignore[assignment]\n",
            ),
        ),
    ),
    Mutant(
        "derive-strips-provider-data",
        "derived history drops provider_data from assistant blocks (to keep the history portable "
        "across providers), so a thinking signature never goes back to the model",
        ("LOG-7",),
        "1",
        (
            Patch(
                "session",
                '            messages.append({"role": "assistant", "content": _blocks(data["content"])})\n',
                "            # provider_data is one provider's bookkeeping: keep the history portable\n"
                '            messages.append({"role": "assistant", "content": [_portable(b) for b in _blocks(data["content"])]})\n',
            ),
            Patch(
                "session",
                "def _loaded_event(event",
                "def _portable(block: Any) -> Any:\n"
                "    if isinstance(block, dict) and \"provider_data\" in block:\n"
                "        return {k: val for k, val in block.items() if k != \"provider_data\"}\n"
                "    return block\n\n\n"
                "def _loaded_event(event",
            ),
        ),
    ),
    Mutant(
        "derive-tool-results-merged",
        "derived history folds consecutive tool/result events into one user message holding all the "
        "step's tool-result blocks (as provider APIs want), not one user message per result",
        ("LOG-7",),
        "1",
        (
            Patch(
                "session",
                '            messages.append({"role": "user", "content": [block]})\n',
                "            # providers want all of a step's tool results in one user message\n"
                "            last = messages[-1] if messages else None\n"
                "            if (\n"
                '                last is not None and last["role"] == "user" and last["content"]\n'
                '                and all(b.get("type") == "tool-result" for b in last["content"])\n'
                "            ):\n"
                '                last["content"].append(block)\n'
                "            else:\n"
                '                messages.append({"role": "user", "content": [block]})\n',
            ),
        ),
    ),
    Mutant(
        "step-numbers-continue",
        "a turn's first step is numbered after the turn (turn 2 starts at step 2), not from 1",
        ("LOG-5",),
        "1",
        (
            Patch(
                "agent",
                "            turn.step += 1\n            step = turn.step\n",
                "            turn.step = turn.step + 1 if turn.step else turn.number\n            step = turn.step\n",
            ),
        ),
        notes="Blind check of 2026-12-03 (fourth round): the suite killed it; the hunt missed it until "
              "the log invariants checked that steps count from 1, one by one, within their turn (0b).",
    ),
    Mutant(
        'asm-delta-name-overwritten',
        "every tool-call delta overwrites the call's name, so a tool call built from deltas alone (the name on the first only) gets the name ''",
        ('ASM-2',),
        '1b',
        (
            Patch('assembler',
                  '            if chunk.get("name"):\n                partial.name = str(chunk["name"])',
                  '            partial.name = str(chunk.get("name", ""))'),
        ),
        notes="Round 13: the suite killed it; the hunt found it once two-step's second call was built from deltas alone and ASSEMBLY built such a tool call from its deltas.",
    ),
    Mutant(
        'derive-errors-as-assistant',
        "derived history turns error events into assistant 'Error: ...' messages: the request after a failed turn carries a message the log never had",
        ('LOG-7',),
        '1',
        (
            Patch('session',
                  '        elif kind in ("steering/message", "context/message"):',
                  '        elif kind == "error":\n            messages.append({"role": "assistant", "content": [v.text(f"Error: {data.get(\'message\', \'\')}")]})\n        elif kind in ("steering/message", "context/message"):'),
        ),
        notes='Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_errors_derive_nothing; the hunt found it (HISTORY).',
    ),
    Mutant(
        'log-snapshot-shallow',
        "append validates the whole event but keeps only a top-level copy: a block the caller passed to send() is the logged block, and the caller's later edit changes the log",
        ('LOG-1',),
        '1',
        (
            Patch('session',
                  '    try:\n        return _plain_copy(value, 0)\n    except _NotPlain:',
                  '    try:\n        _plain_copy(value, 0)  # validates; the caller passed a fresh dict already\n        return value\n    except _NotPlain:'),
        ),
        notes="Session 33: no mutant broke LOG-1's snapshot before; the hunt's world edits what it passed once the run is over and compares every log entry with its notification.",
    ),
    Mutant(
        'derive-shares-log-blocks',
        "derived history copies each message's block list but hands out the log's own blocks: a plugin or an adapter editing the request's messages in place rewrites the log and every later history",
        ('LOG-7', 'LOG-1'),
        '1',
        (
            Patch('session',
                  '    out: list[Any] = json_snapshot(content, "content")\n    return out',
                  '    return list(content)  # the blocks are the log\'s snapshots already'),
        ),
        interleaving=False,
        notes="Session 33: the reference itself did this until round 15 (a helper's derive-memo-shared-list and the third loop's derive_shares_log_objects, written blind, both edited the request in place): test_a_plugin_editing_the_request_in_place_changes_neither_log_nor_history; the hunt's fake model edits every request it receives.",
    ),
    Mutant(
        'derive-shares-tool-result-blocks',
        "derived history copies a tool result's block list but not its blocks: an adapter or a plugin "
        "shortening a tool's output in the request in place rewrites the logged tool/result and every later history",
        ('LOG-7', 'LOG-1'),
        '1',
        (
            Patch('session',
                  '            block = v.tool_result(data["call_id"], _blocks(data["content"]), bool(data["is_error"]))\n',
                  '            block = v.tool_result(data["call_id"], list(data["content"]), bool(data["is_error"]))\n'),
        ),
        interleaving=False,
        notes="Blind round Q (session 62, r01): the hunt's fake model edited the texts of a request's top-level "
              "blocks only; it edits nested ones now (a tool result's blocks, provider_data).",
    ),
    Mutant(
        'derive-shares-provider-data',
        "derived history copies an assistant message's blocks one level deep: their provider_data objects are the "
        "log's, so an adapter converting them in place rewrites the logged assistant/message",
        ('LOG-7', 'LOG-1'),
        '1',
        (
            Patch('session',
                  '            messages.append({"role": "assistant", "content": _blocks(data["content"])})\n',
                  '            messages.append({"role": "assistant", "content": [dict(b) for b in data["content"]]})\n'),
        ),
        interleaving=False,
        notes="Blind round Q (session 62, r06): as derive-shares-tool-result-blocks, through the out-of-order "
              "workload's block carrying provider_data.",
    ),
    Mutant(
        'derive-drops-empty-text-blocks',
        "derived history leaves out an assistant message's empty text blocks (providers reject empty text): "
        "one carrying only provider_data, a thought signature on an empty part, is lost to the next request",
        ('LOG-7',),
        '1',
        (
            Patch('session',
                  '            messages.append({"role": "assistant", "content": _blocks(data["content"])})\n',
                  '            kept = [b for b in _blocks(data["content"]) if b.get("type") != "text" or b.get("text")]\n'
                  '            messages.append({"role": "assistant", "content": kept})\n'),
        ),
        interleaving=False,
        notes="Blind round Q (session 62, r03): the suite and the hunt missed it until the provider_data test's "
              "empty text block and the out-of-order workload's.",
    ),
    Mutant(
        'open-turn-memo-skipped-on-throw',
        'the session memoises its open turn after the session/event listeners: a throwing turn/end listener skips the update and a later idle inject lands in the closed turn',
        ('INJ-2', 'ERR-4', 'LOG-4'),
        '10',
        (
            Patch('session',
                  '        self._header["id"] = session_id\n',
                  '        self._header["id"] = session_id\n        self._open = _scan_open_turn(self._events)  # open_turn() memo, kept by append()\n'),
            Patch('session',
                  '        self._events.append(event)\n        self._bus.emit("session/event", self, event)\n        return event',
                  '        self._events.append(event)\n        self._bus.emit("session/event", self, event)\n        if type == "turn/start":\n            self._open = int(snapshot.get("turn", 0))\n        elif type == "turn/end":\n            self._open = None\n        return event'),
            Patch('session',
                  '        """The turn whose ``turn/start`` has no ``turn/end`` yet, if any (INJ-1)."""\n        for event in reversed(self._events):\n            if event["type"] == "turn/end":\n                return None\n            if event["type"] == "turn/start":\n                return int(event["data"].get("turn", 0))\n        return None',
                  '        """The turn whose ``turn/start`` has no ``turn/end`` yet, if any (INJ-1)."""\n        return self._open  # memo: no scan of the log on every inject()'),
            Patch('session',
                  'def derive_messages(events: Iterable[Mapping[str, Any]]) -> list[v.Message]:',
                  'def _scan_open_turn(events: list[Any]) -> int | None:\n    for event in reversed(events):\n        if event["type"] == "turn/end":\n            return None\n        if event["type"] == "turn/start":\n            return int(event["data"].get("turn", 0))\n    return None\n\n\ndef derive_messages(events: Iterable[Mapping[str, Any]]) -> list[v.Message]:'),
        ),
        interleaving=True,
        notes='Round 15 (written blind): the suite passed it until test_an_idle_inject_after_a_throwing_boundary_listener_opens_its_own_turn.',
    ),
    Mutant(
        'snapshot-no-depth-guard',
        "the log's fast copy loses its depth guard: cyclic data raises RecursionError instead of being rejected as not JSON",
        ('LOG-1', 'INJ-4', 'TOOL-3'),
        '1',
        (
            Patch('session',
                  '    if depth >= _MAX_PLAIN_DEPTH:\n        raise _NotPlain\n',
                  ''),
        ),
        notes='Round 15 (written blind): the suite passed it until test_bad_inject_input[cycle].',
    ),
    Mutant(
        'derive-memo-shared-list',
        'derive_messages() extends a cached list and returns the cache itself: a plugin compacting a request in place loses history the log still has',
        ('LOG-7', 'INJ-3'),
        '1',
        (
            Patch('session',
                  '        self._header["id"] = session_id\n',
                  '        self._header["id"] = session_id\n        self._derived: list[v.Message] = []  # derive_messages() cache: history of _events[:_upto]\n        self._upto = 0\n'),
            Patch('session',
                  '        return derive_messages(self._events)',
                  '        if self._upto < len(self._events):  # derive only what was appended since last time\n            self._derived.extend(derive_messages(self._events[self._upto:]))\n            self._upto = len(self._events)\n        return self._derived'),
        ),
        interleaving=True,
        notes='Round 15 (written blind): the suite passed it until test_a_plugin_editing_the_request_in_place_changes_neither_log_nor_history; the hunt finds it since the fake model edits every request it receives.',
    ),
    Mutant(
        'open-turn-lookback-window',
        'whether a turn is open is decided from the last 64 events only: an inject late in a long turn writes a one-shot turn inside it',
        ('INJ-1', 'LOG-4'),
        '10',
        (
            Patch('session',
                  '        """The turn whose ``turn/start`` has no ``turn/end`` yet, if any (INJ-1)."""\n        for event in reversed(self._events):',
                  '        """The turn whose ``turn/start`` has no ``turn/end`` yet, if any (INJ-1)."""\n        for event in reversed(self._events[-64:]):  # a turn/start is never far back'),
        ),
        interleaving=True,
        notes="The third independent loop's blind round (session 33) wrote it; the suite's test_inject_into_a_long_open_turn killed it, the hunt missed it until the inject workload's turn grew past 64 events (session 34, 2026-12-04).",
    ),
    Mutant(
        'repair-message-closes-step',
        "the backend's repair of a log whose writer died mid-turn takes a step's assistant/message for its end: a writer that died inside a tool call leaves the step open under turn/end{interrupted}",
        ('LOG-5', 'SVC-3'),
        '1',
        (
            Patch('persistence',
                  '        elif kind == "step/end":\n            open_step = None\n',
                  '        elif kind in ("step/end", "assistant/message"):\n            open_step = None  # the message is in: nothing left to close\n'),
        ),
        notes="Round 28 (session 38, written blind in the port): the suite passed it until test_resume_of_a_log_interrupted_after_a_closed_step[mid-tool], the hunt until the reload verb (session 39, 2026-12-05).",
    ),
    Mutant(
        'repair-not-stored',
        "the backend hands back a repaired log without keeping the repair: the resumed agent's events follow the repair's seq numbers in a store that lacks them, so the next resume finds a gap and fails",
        ('SVC-3', 'LOG-3'),
        '1',
        (
            Patch('persistence',
                  '        events.extend(repair(events))\n        return [_copy(e) for e in events]\n',
                  '        return [_copy(e) for e in events] + repair(events)\n'),
        ),
        notes="Round 33 (session 40, written blind in the reference as repair-not-persisted): the suite killed it "
              "(the resume tests); the hunt found it once the resume workload's persisted run died mid-turn "
              "(AgentSpec.interrupted), through the world's end-of-run resume of the flushed session (SVC-3).",
    ),
    Mutant(
        'asm-index-as-text',
        "the assembler orders blocks by their indexes as text: past ten blocks, 10 and 11 come before 2",
        ('ASM-3',),
        '1',
        (
            Patch('assembler',
                  '        for index in sorted(set(self._closed) | set(self._open)):',
                  '        for index in sorted(set(self._closed) | set(self._open), key=str):'),
        ),
        notes="Round 43 (session 42, written blind in altloop as asm-index-sorted-as-text): the suite passed it "
              "until test_index_order_is_numeric_past_ten_blocks; out of the hunt's reach (no workload streams "
              "eleven blocks).",
    ),
    Mutant(
        'repair-stamped-with-wall-clock',
        "a resume's repair events are stamped with a direct read of the clock (time.time()) instead of the "
        "log's own last time: times from another clock than the injected one",
        ('PY-3', 'SVC-3'),
        '12',
        (
            Patch('persistence',
                  '    time = events[-1]["time"] if events else 0',
                  '    import time as _clock\n\n    time = int(_clock.time() * 1000)  # the repair happens now'),
        ),
        notes="Round 44 (session 42, written blind in examples/spec_loop as repair-wall-clock): the suite and the "
              "hunt passed it until the simulator pinned time.time() to an epoch of its own and a log mixing "
              "it with the sources' clock failed PY-3 (the resume tests; the world's end-of-run check).",
    ),
    Mutant(
        'usage-accumulated-across-steps',
        "each step's usage event carries the turn's running total rather than the step's own usage",
        ('ASM-4', 'LOOP-5'),
        '1b',
        (
            Patch('agent', 'from dataclasses import dataclass\n', 'from dataclasses import dataclass, field\n'),
            Patch('agent',
                  '    max_tokens: bool = False  # MAXTOK-2: sticky for the turn; MAXTOK-4: a fresh _Turn per turn\n',
                  '    max_tokens: bool = False  # MAXTOK-2: sticky for the turn; MAXTOK-4: a fresh _Turn per turn\n'
                  '    usage: dict[str, Any] = field(default_factory=dict)  # the turn\'s usage so far\n'),
            Patch('agent',
                  '                self._session.append(\n                    "usage", {"turn": turn.number, "step": step, "usage": assembler.usage}\n                )\n',
                  '                for key, count in assembler.usage.items():\n                    turn.usage[key] = turn.usage.get(key, 0) + count\n'
                  '                self._session.append(\n                    "usage", {"turn": turn.number, "step": step, "usage": dict(turn.usage)}\n                )\n'),
        ),
        notes="Round 49 (session 44, written blind in the reference): the suite passed it until "
              "test_each_step_logs_its_own_usage; the hunt found it once the tool workload's first step reported "
              "usage too (CHUNKS).",
    ),
    Mutant(
        "chunk-read-dropped-at-abort",
        "the stream's reader takes each chunk a beat after the stream yielded it, and drops it when the "
        "step's signal fired meanwhile (a read raced against the signal, both done at once): a chunk the "
        "model had handed over is never logged",
        ("LOG-3", "LOOP-5"),
        "1",
        (
            Patch("agent",
                  "            async for chunk in stream:\n"
                  "                if signal.aborted:\n",
                  "            async for chunk in stream:\n"
                  "                await asyncio.sleep(0)  # the read is handed on a beat later\n"
                  "                if signal.aborted:\n"),
        ),
        interleaving=True,
        notes="Session 49 (a reviewer's finding in indie61e): killed by "
              "test_chunks_the_stream_handed_over_before_an_abort_are_logged; the hunt's CHUNKS oracle finds it in "
              "plain order through the fake model's count of the chunks handed over when the signal fired "
              "(model/aborted).",
    ),
    Mutant(
        "empty-deltas-skipped",
        "empty text deltas (a provider's first or keep-alive chunk) are skipped: neither appended as "
        "assistant/chunk nor notified",
        ("LOG-3",),
        "1",
        (
            Patch("agent",
                  "            async for chunk in stream:\n"
                  "                if signal.aborted:\n"
                  "                    break\n",
                  "            async for chunk in stream:\n"
                  "                if signal.aborted:\n"
                  "                    break\n"
                  '                if isinstance(chunk, dict) and chunk.get("type") == "text-delta" and not chunk.get("text"):\n'
                  "                    continue  # an empty delta carries nothing\n"),
        ),
        notes="Session 61's blind round N (r08): the suite and the hunt passed it until "
              "test_empty_deltas_are_logged_like_any_chunk and the tool workload's empty delta (CHUNKS).",
    ),
    Mutant(
        "usage-fields-merged",
        "a step's usage chunks are merged field by field instead of the last replacing the others: a field "
        "only an earlier chunk reported survives into the step's usage",
        ("ASM-4",),
        "1b",
        (
            Patch("assembler",
                  "            self.usage = chunk[\"usage\"]  # ASM-4: the last one wins\n",
                  "            self.usage = {**(self.usage or {}), **chunk[\"usage\"]}  # usage reported piecewise\n"),
        ),
        notes="Session 61's blind round O (o06, in spec_loop): the suite and the hunt passed it until the tool "
              "workload's earlier usage reported a field its last did not, and "
              "test_no_finish_is_stop_and_last_usage_wins[more-fields].",
    ),
]
