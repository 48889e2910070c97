"""The writer's half of a retraction (shared.records, ``retraction`` records; docs/spec.md §3 addition).

Before a retraction is written, each of its references must name a message already in
the session: a ``message`` record, entry ``index`` of a ``compacted`` record's
replacement history, or a summary-only ``compacted`` record. The writer reads those
lines back from the end of the file (:func:`shared.committed_lines.lines_before`, at
most :data:`MAX_LOOKBACK_BYTES`) and writes the tool call ids of the retracted messages
into the record as ``call_ids``, so that its view of the calls an output may answer
follows the retraction from that one line, at reopen as at validation (a client never
sets them). Whether a named message is still in the view is the rebuild's to say (a
``retraction_missed`` note); the writer checks only that it exists.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.committed_lines import lines_before
from shared.errors import RecordValidationError
from shared.layout import open_session_file
from shared.records import RecordType, line_seq, parse_record

#: Bytes of a session file read back at most to find the lines a retraction names.
MAX_LOOKBACK_BYTES = 64 * 1024 * 1024


def resolve_retractions(
    path: Path, end_offset: int, next_seq: int, retractions: Sequence[tuple[int, dict[str, Any]]]
) -> None:
    """Check the references of each (request index, retraction payload) and set its ``call_ids``
    (I/O thread). ``end_offset`` is where the durable lines end; ``next_seq`` the session's.

    The payloads' shape was checked (writer_service.open_session.check_retraction). Raises
    RecordValidationError naming ``retraction.messages[j]`` for a reference to a seq not
    in the session, to a line that is no message or compaction entry, or further back than
    :data:`MAX_LOOKBACK_BYTES`; OSError when the file cannot be read.
    """
    wanted: set[int] = set()
    for index, payload in retractions:
        for position, reference in enumerate(payload["messages"]):
            if reference["seq"] >= next_seq:
                raise RecordValidationError(
                    index,
                    f"retraction.messages[{position}]",
                    f"names seq {reference['seq']}, which is not in the session (its next seq is {next_seq})",
                )
            wanted.add(reference["seq"])
    found = _records_at(path, end_offset, wanted)
    for index, payload in retractions:
        call_ids: list[str] = []
        for position, reference in enumerate(payload["messages"]):
            message = _named_message(found.get(reference["seq"]), reference.get("index"))
            if message is None:
                raise RecordValidationError(
                    index,
                    f"retraction.messages[{position}]",
                    f"names {reference!r}, which is no message of the session within the last"
                    f" {MAX_LOOKBACK_BYTES} bytes (a message record, or a compaction's replacement"
                    " history entry or summary)",
                )
            calls = message.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    call_ids.append(call["id"])
        payload["call_ids"] = list(dict.fromkeys(call_ids))


def _records_at(path: Path, end_offset: int, seqs: set[int]) -> dict[int, dict[str, Any]]:
    """The parsed records at ``seqs`` among the lines before ``end_offset`` (read back, bounded)."""
    found: dict[int, dict[str, Any]] = {}
    if not seqs:
        return found
    lowest, read = min(seqs), 0
    fd = open_session_file(path)
    try:
        for raw in lines_before(fd, min(end_offset, os.fstat(fd).st_size)):
            read += len(raw) + 1
            seq = line_seq(raw)
            if seq is not None and seq in seqs:
                record = parse_record(raw)
                if record is not None:
                    found[seq] = record
            if (seq is not None and seq <= lowest) or read > MAX_LOOKBACK_BYTES:
                break
    finally:
        os.close(fd)
    return found


def _named_message(record: dict[str, Any] | None, index: int | None) -> dict[str, Any] | None:
    """The message payload a reference names in ``record`` (None when it names none)."""
    if record is None:
        return None
    payload: dict[str, Any] = record["payload"]
    if record["type"] == RecordType.MESSAGE and index is None:
        return payload
    if record["type"] != RecordType.COMPACTED:
        return None
    history = payload.get("replacement_history")
    if index is None:
        return {} if history is None else None  # the summary message holds no calls
    if isinstance(history, list) and index < len(history) and isinstance(history[index], dict):
        message: dict[str, Any] = history[index]
        return message
    return None
