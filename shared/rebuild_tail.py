"""The last messages of a session rebuilt from its tail, whatever the file's size (docs/spec.md §3, §5.1).

:func:`recent_from_tail` reads a session file's complete lines back from its end, a block
(16 KiB by default) at a time, and runs the lines read (the window) through the rebuild's
own rules (:class:`shared.rebuild.Rebuilder`: the same code as every whole-file rebuild) as
if they were the whole file. The lines before the window (the prefix) are not read; the
pass notes where the window's view could still depend on them:

* a tool output whose ``tool_call_id`` no assistant message of the window called: with the
  prefix, it may answer a call (and then, if that call was answered already, replace the
  earlier output in place instead of being appended) or answer none;
* the first assistant message of the window: ``reasoning`` records at the end of the
  prefix attach to it;
* the prefix's own messages: they come before the window's, so the window must hold more
  messages than are asked for.

A ``compacted`` record resets the sequence to its replacement history, so from it on
nothing depends on the prefix; neither does anything in a window that starts at the
file's first byte. What the prefix can change is nothing else: a retraction in the window
that names a message of the prefix takes out a prefix message or nothing; one naming a
window message finds it in the window, as the whole-file rebuild finds it (origins are
unique, searched from the end). So the window's messages are the view's last messages
exactly when none of the cases above applies to the messages returned, and the view holds
at least as many messages as the window's view: the count is exact when the window reaches
a compaction or the file's start, and otherwise a lower bound greater than ``limit``.

When the answer is not settled yet the window grows by doubling (the blocks read, and the
lines run again, stay within twice the final window). Damage in the window (a line whose
check fails, a seq gap or repeat, a line that is not a record: shared.rebuild.DAMAGE_KINDS),
a window past ``max_bytes``, or a file cut while it is read give None: the caller answers
from the whole-file rebuild, whose degraded ledger reports the damage. A checkpoint's lines
digest is not compared (the lines it pins are not read); it changes no message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from shared.committed_lines import line_blocks_before
from shared.rebuild import Rebuilder, collector_paused
from shared.records import record_of_line

#: Bytes read back at a time: ~15 messages of 1 KB, what an agent framework's limited read
#: usually asks for (a 64 KiB block costs ~3x as much CPU to run, bench/README.md).
TAIL_BLOCK_BYTES = 16 * 1024
#: Largest window a tail rebuild reads before it leaves the answer to the whole-file rebuild.
TAIL_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TailRecent:
    """The last messages of a session's rebuilt view, from its tail.

    ``messages``: payloads as :func:`shared.rebuild.rebuild` returns them (reasoning
    attached), oldest first; ``origins``: each one's line (shared.records.message_origin);
    ``message_count``: messages in the whole view when ``count_exact``, else a lower bound
    greater than ``len(messages)``; ``next_seq``: the seq after the last record;
    ``window_bytes``: the committed bytes the answer was rebuilt from.
    """

    messages: list[dict[str, Any]]
    origins: list[int]
    message_count: int
    count_exact: bool
    next_seq: int
    window_bytes: int


class _TailRebuilder(Rebuilder):
    """The shared rebuilder run over a window, noting what the lines before it could change."""

    def __init__(self, at_file_start: bool) -> None:
        super().__init__()
        #: Nothing before the window matters any more (the file's start, or a compaction).
        self.prefix_known = at_file_start
        #: Call ids an assistant message of the window called (their pairing is the window's).
        self.window_calls: set[str] = set()
        #: A tool output answered a call the window does not hold: the view's tail is unknown.
        self.unsettled = False
        #: The origin of the window's first assistant message (the prefix's reasoning may attach).
        self.first_assistant: int | None = None

    def add_message(
        self, payload: dict[str, Any], line: int, offset: int, index: int = -1, origin: int = 0
    ) -> None:
        if not self.prefix_known:
            role = payload.get("role")
            if role == "assistant":
                if self.first_assistant is None:
                    self.first_assistant = origin
                calls = payload.get("tool_calls")
                for call in calls if isinstance(calls, list) else ():
                    call_id = call.get("id") if isinstance(call, dict) else None
                    if isinstance(call_id, str):
                        self.window_calls.add(call_id)
            elif role == "tool":
                call_id = payload.get("tool_call_id")
                if isinstance(call_id, str) and call_id not in self.window_calls:
                    self.unsettled = True
        super().add_message(payload, line, offset, index, origin)

    def compact(self, payload: dict[str, Any], line: int, offset: int, seq: int = 0) -> None:
        self.prefix_known, self.unsettled, self.first_assistant = True, False, None
        super().compact(payload, line, offset, seq)

    def lines_match(self, pinned: Any, line: int, offset: int) -> bool:
        return True  # the lines a checkpoint pins lie mostly before the window

    def add_checks(self) -> None:
        del self.checks[:]  # no lines digest is made from a window


#: What :func:`_settle` answers when the window must grow.
_GROW = object()


def _settle(newest_first: list[bytes], start: int, end: int, limit: int) -> TailRecent | object | None:
    """The answer of the window of complete lines ``newest_first`` (bytes ``start``..``end`` of
    the file): a TailRecent, None (damage), or :data:`_GROW`."""
    lines = newest_first[::-1]
    at_file_start = start == 0
    state = _TailRebuilder(at_file_start)
    line_no = 0
    if not at_file_start:
        line_no = 1  # not the file's first line: a session_meta here is misplaced
        first = record_of_line(lines[0]) if lines else None
        if first is not None:
            state.result.last_seq = first["seq"] - 1  # the window's seqs are checked from its first
    with collector_paused():
        state.run(lines, line_no, start)
    result = state.result
    if state.damaged or (at_file_start and result.records and result.session_meta is None):
        return None
    messages, origins = state.messages, state.origins
    first_returned = max(0, len(messages) - limit)
    if not state.prefix_known and (
        state.unsettled
        or len(messages) <= limit
        or (state.first_assistant is not None and state.first_assistant in origins[first_returned:])
    ):
        return _GROW
    return TailRecent(
        messages[first_returned:],
        origins[first_returned:].tolist(),
        len(messages),
        state.prefix_known,
        result.last_seq + 1,
        end - start,
    )


def recent_from_tail(
    fd: int, limit: int, *, block_bytes: int = TAIL_BLOCK_BYTES, max_bytes: int = TAIL_MAX_BYTES
) -> TailRecent | None:
    """The last ``limit`` (> 0) messages of the open session file ``fd`` rebuilt from its tail
    (see the module doc), exactly the last ``limit`` of :func:`shared.rebuild.rebuild`'s
    sequence with their origins and the next seq; None when the tail cannot settle them
    (damage in it, an answer needing more than ``max_bytes``, the file cut while read): the
    caller then rebuilds the whole file. Bytes after the last newline are not committed and
    are ignored. Positional reads only (``fd``'s offset is neither used nor moved).

    Raises ValueError for ``limit`` < 1, OSError when the file cannot be read.
    """
    if limit < 1:
        raise ValueError(f"limit must be 1 or more, got {limit}")
    size = os.fstat(fd).st_size
    window: list[bytes] = []  # complete lines, newest first
    end = start = size
    first_read = True
    checked = 0  # the window's size when it was last run
    answer: TailRecent | object | None = None
    for lines in line_blocks_before(fd, size, block_bytes):
        if first_read:  # its first line is what follows the last newline (not committed)
            if not lines:
                continue
            first_read = False
            end = start = size - len(lines.pop(0))
        if not lines:
            continue  # a line longer than a block is still open
        window += lines
        start -= sum(len(raw) + 1 for raw in lines)
        if end - start > max_bytes or start < 0:
            return None
        if start == 0 or end - start < min(2 * checked, max_bytes):
            continue  # the file's start comes next, or the window has not doubled
        checked = end - start
        answer = _settle(window, start, end, limit)
        if answer is not _GROW:
            break
    else:
        answer = _settle(window, 0, end, limit) if start == 0 else None
    if os.fstat(fd).st_size < size:
        return None  # cut while it was read: the lines read may not be the file's
    return answer if isinstance(answer, TailRecent) else None
