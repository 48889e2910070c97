"""The rebuild of docs/spec.md §3 in bounded memory, for sessions of any size.

:func:`index_rebuild` runs the very same rules as :func:`shared.rebuild.rebuild`
(it subclasses the same rebuilder and overrides only what the sequence holds),
reading the file in chunks (:mod:`shared.committed_lines`); the sequence it returns holds small handles (byte
offsets) instead of payloads. :class:`MessageSource` turns handles back into the
exact payloads, reading only the lines they name. Memory grows with the number
of messages and open tool calls (one int or small tuple per message, one entry
per call in view), not with their bytes: a 1 GB session of 670,000 messages
replays with ~130 MiB above an idle reader (bench/stream_replay.py).

A handle is either an ``int`` (the offset of a ``message`` line) or a tuple
``(offset, index, reasoning)``: ``index`` >= 0 is the position in the
``replacement_history`` of the ``compacted`` line at ``offset``, -1 means the
``message`` line at ``offset``, -2 the summary message of that compaction;
``reasoning`` is the offset of the one ``reasoning`` line attached, a tuple of
the offsets of several (in order), or -1 for none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from shared.committed_lines import CommittedLines
from shared.layout import read_session_file
from shared.rebuild import PendingReasoning, Rebuild, Rebuilder

MessageHandle = int | tuple[int, int, int | tuple[int, ...]]


class _IndexRebuilder(Rebuilder):
    """The shared rebuilder, keeping handles instead of payloads."""

    keeps_payloads = False

    def keep(
        self, payload: dict[str, Any], offset: int, index: int, reasoning: PendingReasoning
    ) -> MessageHandle:
        if not reasoning:
            return offset if index < 0 else (offset, index, -1)
        offsets = tuple(block_offset for _, _, block_offset in reasoning)
        return (offset, index, offsets[0] if len(offsets) == 1 else offsets)

    def keep_summary(self, summary: str, offset: int) -> MessageHandle:
        return (offset, -2, -1)


def index_rebuild(path: Path, *, max_messages: int = 0, end: int | None = None) -> Rebuild:
    """Rebuild ``path`` in bounded memory; ``messages`` (and ``checkpoint_messages``) hold handles.

    Same rules, degraded entries and counters as :func:`shared.rebuild.rebuild`.
    ``end``: rebuild only the file's first ``end`` bytes (a fork's prefix).
    Raises OSError when the file cannot be read.
    """
    state = _IndexRebuilder()
    with read_session_file(path) as handle:
        reader = CommittedLines(handle.fileno(), 0, end)
        line_no, offset = state.run(reader.lines())
    state.uncommitted(reader.tail, line_no, offset)
    return state.finish(max_messages)


def index_recent(path: Path, limit: int) -> tuple[list[MessageHandle], list[int], int, int]:
    """The last ``limit`` messages (0: all) of ``path`` rebuilt in bounded memory: (their handles,
    their origins (shared.records.message_origin), the sequence's length, the seq after the last
    record). Raises OSError when the file cannot be read."""
    state = _IndexRebuilder()
    with read_session_file(path) as handle:
        state.run(CommittedLines(handle.fileno()).lines())
    messages: list[MessageHandle] = state.messages
    first = max(0, len(messages) - limit) if limit else 0
    return messages[first:], state.origins[first:].tolist(), len(messages), state.result.last_seq + 1


class MessageSource:
    """Reads the payloads that handles name from one open session file."""

    def __init__(self, path: Path) -> None:
        self._file = read_session_file(path)
        self._cached_offset = -1
        self._cached: dict[str, Any] = {}

    def __enter__(self) -> MessageSource:
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def _payload(self, offset: int) -> dict[str, Any]:
        if offset != self._cached_offset:
            self._file.seek(offset)
            record = orjson.loads(self._file.readline().lstrip(b"\x00"))
            self._cached_offset, self._cached = offset, record["payload"]
        return self._cached

    def message(self, handle: MessageHandle) -> dict[str, Any]:
        """The rebuilt payload a handle names (reasoning attached), as rebuild() would hold it."""
        if isinstance(handle, int):
            return self._payload(handle)
        offset, index, reasoning = handle
        if index >= 0:
            payload: dict[str, Any] = self._payload(offset)["replacement_history"][index]
        elif index == -2:
            payload = {"role": "user", "content": str(self._payload(offset).get("summary", ""))}
        else:
            payload = self._payload(offset)
        if isinstance(reasoning, tuple):
            payload = {**payload, "reasoning": [self._payload(block) for block in reasoning]}
        elif reasoning >= 0:
            payload = {**payload, "reasoning": self._payload(reasoning)}
        return payload
