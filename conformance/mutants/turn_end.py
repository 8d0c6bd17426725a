"""Mutants of spec section 6: turn-end reasons, max-tokens precedence, failed streams."""

from __future__ import annotations

from ._build import Mutant, Patch

_STICKY = """\
            if max_tokens:
                turn.max_tokens = True  # MAXTOK-1 / MAXTOK-2: sticky for the whole turn
"""

_REASON_MAXTOK = """\
        if turn.max_tokens:
            return v.turn_end_max_tokens()  # MAXTOK-1 / MAXTOK-2
"""

_REASON_HEAD = """\
        if self._disposed:
            return v.turn_end_disposed()  # DISP-1 / DISP-4
        if turn.aborted is not None:
"""

MUTANTS = [
    Mutant(
        "maxtok-overwrites-abort",
        "the max-tokens reason is checked first, so it overwrites aborted, error and disposed",
        ("MAXTOK-3",),
        "6",
        (
            Patch("agent", _REASON_MAXTOK, ""),
            Patch("agent", _REASON_HEAD, _REASON_MAXTOK + _REASON_HEAD),
        ),
    ),
    Mutant(
        "maxtok-reset-by-clean-step",
        "each step overwrites the turn's max-tokens flag, so a later clean step turns the "
        "turn's max-tokens end back into completed",
        ("MAXTOK-2",),
        "6",
        (Patch("agent", _STICKY, "            turn.max_tokens = max_tokens\n"),),
    ),
    Mutant(
        "maxtok-leaks",
        "the max-tokens flag lives on the agent instead of the turn and is never cleared, so every "
        "later turn also ends max-tokens",
        ("MAXTOK-4",),
        "6",
        (
            Patch(
                "agent",
                "        self._turn: _Turn | None = None\n",
                "        self._turn: _Turn | None = None\n        self._hit_max_tokens = False\n",
            ),
            Patch("agent", _STICKY, "            if max_tokens:\n                self._hit_max_tokens = True\n"),
            Patch("agent", "        if turn.max_tokens:\n", "        if self._hit_max_tokens:\n"),
        ),
    ),
    Mutant(
        "maxtok-dispatches-tools",
        "the tool-call filter of a max-tokens step tests for 'tool_call' (underscore): the "
        "truncated step's tool calls are dispatched and the turn continues",
        ("MAXTOK-5",),
        "6",
        (
            Patch(
                "agent",
                '        b for b in message["content"] if not (isinstance(b, dict) and b.get("type") == "tool-call")\n',
                '        b for b in message["content"] if not (isinstance(b, dict) and b.get("type") == "tool_call")\n',
            ),
        ),
    ),
    Mutant(
        "finish-aborted-is-aborted",
        "a stream finishing 'aborted' without the step's signal firing ends the turn aborted, "
        "not error{model stream aborted, ABORTED}",
        ("FINISH-1",),
        "6",
        (
            Patch(
                "agent",
                '                raise LoopError("model stream aborted", "ABORTED")\n',
                '                return _StepOutcome(aborted=_abort_reason(signal))\n',
            ),
        ),
    ),
    Mutant(
        "maxtok-counts-stripped-calls",
        "the step's had-tool-calls flag is computed from the assembled stream, not from the message the "
        "tools ran from, so a max-tokens step whose tool calls were stripped still continues the turn "
        "with a further model step",
        ("MAXTOK-5",), "6",
        (Patch("agent",
               "            return _StepOutcome(had_tool_calls=bool(calls))  # MAXTOK-5: none for max-tokens\n",
               "            return _StepOutcome(\n"
               "                had_tool_calls=any(b.get(\"type\") == \"tool-call\" for b in assembler.content())\n"
               "            )\n"),),
    ),
    Mutant(
        "maxtok-empty-message-appended",
        "a max-tokens step always appends its assistant/message, an empty one when the model gave "
        "nothing but (stripped) tool calls",
        ("MAXTOK-5",), "6",
        (Patch("agent", '            if message["content"] or not max_tokens:', "            if True:"),),
        notes="Blind check of 2026-12-03 (sixth round): the suite killed it; the hunt missed it until its "
              "max-tokens-tools workload had a tool-call-only max-tokens step and ASSEMBLY judged an empty "
              "message.",
    ),
    Mutant(
        'stream-raise-wrapped',
        "an exception raised by the model adapter is wrapped into LoopError('model NAME failed: ...', MODEL_ERROR): the turn ends with neither the raised message nor its code",
        ('FINISH-2', 'ERR-7'),
        '6',
        (
            Patch('agent',
                  '            completed = await self._in_subtask(\n                self._consume_stream(turn, step, adapter, request, signal, assembler),\n                signal,\n                "model",\n            )\n',
                  '            try:\n                completed = await self._in_subtask(\n                    self._consume_stream(turn, step, adapter, request, signal, assembler),\n                    signal,\n                    "model",\n                )\n            except Exception as exc:\n                raise LoopError(f"model {model!r} failed: {exc}", "MODEL_ERROR") from exc\n'),
        ),
        notes="Round 12: the suite killed it; the hunt found it once model-error's window prompts met a raising stream (RAISED).",
    ),
    Mutant(
        'failed-stream-keeps-partial',
        'when the stream raises midway, the partial message assembled so far is appended as assistant/message before the failure is recorded',
        ('FINISH-1', 'FINISH-2'),
        '6',
        (
            Patch('agent',
                  '            completed = await self._in_subtask(\n                self._consume_stream(turn, step, adapter, request, signal, assembler),\n                signal,\n                "model",\n            )\n',
                  '            try:\n                completed = await self._in_subtask(\n                    self._consume_stream(turn, step, adapter, request, signal, assembler),\n                    signal,\n                    "model",\n                )\n            except Exception:\n                partial = assembler.content()\n                if partial:  # keep what the model said before it failed\n                    self._session.append(\n                        "assistant/message", {"turn": turn.number, "step": step, "content": partial}\n                    )\n                raise\n'),
        ),
        notes='Round 12: the suite killed it (FINISH-2); the hunt found it with RAISED.',
    ),
    Mutant(
        'maxtok-truncates-at-first-call',
        'removing the tool calls of a max-tokens step truncates the message at its first call: blocks after it are lost',
        ('MAXTOK-5',),
        '6',
        (
            Patch('agent',
                  '    kept = [\n        b for b in message["content"] if not (isinstance(b, dict) and b.get("type") == "tool-call")\n    ]',
                  '    kept = []\n    for b in message["content"]:\n        if isinstance(b, dict) and b.get("type") == "tool-call":\n            break  # the output was cut inside the calls: nothing after them is reliable\n        kept.append(b)'),
        ),
        notes="Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_max_tokens_step_keeps_every_block_around_the_removed_calls; the hunt found it once max-tokens-tools' step had text after its call (ASSEMBLY).",
    ),
    Mutant(
        'unknown-finish-kind-fails',
        'an unknown finish kind fails the step (BAD_FINISH) instead of counting as a success',
        ('FINISH-1', 'MAXTOK-1'),
        '7',
        (
            Patch('agent',
                  '            if finish.get("kind") == "aborted":  # FINISH-1: the step\'s own signal did not fire\n                raise LoopError("model stream aborted", "ABORTED")',
                  '            if finish.get("kind") == "aborted":  # FINISH-1: the step\'s own signal did not fire\n                raise LoopError("model stream aborted", "ABORTED")\n            if finish.get("kind") not in ("stop", "tool-calls", "max-tokens"):\n                raise LoopError(f"model finished with {finish.get(\'kind\')!r}", "BAD_FINISH")'),
        ),
        notes='Round 15 (written blind): the suite passed it until test_an_unknown_finish_kind_counts_as_a_success.',
    ),
    Mutant(
        'aborted-code-taken-as-abort',
        "an error coded ABORTED raised by the model adapter or a tool counts as an abort although the step's signal never fired: the turn ends aborted with no error event, the tool's result says aborted",
        ('FINISH-2', 'ERR-7', 'TOOL-3'),
        '6',
        (
            Patch('agent',
                  '            if signal.aborted:\n                return False  # e.g. the adapter raised AbortError once the signal fired\n',
                  '            if signal.aborted or error_code(exc) == "ABORTED":\n                return False  # e.g. the adapter raised AbortError once the signal fired\n'),
        ),
        notes="Round 49 (session 44, written blind in the reference): the suite passed it until "
              "test_an_error_coded_aborted_with_no_abort_is_a_failure; the hunt found it once the model-error "
              "workload's raising stream carried the code ABORTED.",
    ),
]
