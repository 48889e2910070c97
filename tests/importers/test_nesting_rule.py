"""One rule for a line no record can hold (rollout_cli.importers.too_deep), kept by both importers: the
deepest line they convert travels in an ImportSessions request the writer decodes; one level deeper
is kept as its text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf.message import DecodeError

from rollout.v1 import writer_pb2
from rollout_cli.importers import DECODABLE_NESTING, MAX_LINE_NESTING, ImportedFile, event_record, nesting
from rollout_cli.importers.claude import convert_claude
from rollout_cli.importers.codex import convert_codex
from rollout_cli.importers.upload import _requests

TIME = "2025-09-07T09:00:00Z"


def value_of_nesting(levels: int) -> Any:
    """A JSON value nesting exactly ``levels`` protobuf levels (objects 3, arrays 2; ``levels`` >= 2)."""
    arrays = {0: 0, 1: 2, 2: 1}[levels % 3]
    value: Any = "bottom"
    for _ in range(arrays):
        value = [value]
    for _ in range((levels - 2 * arrays) // 3):
        value = {"inner": value}
    return value


def codex_list_line(levels: int) -> bytes:
    """A line that is no object: Codex keeps it under one more object ({"line": ...}), its deepest place."""
    return orjson.dumps([value_of_nesting(levels - 2)])


def codex_payload_line(levels: int) -> bytes:
    """An envelope whose payload is no object: kept as {"line": <the whole line>}."""
    return orjson.dumps(
        {"timestamp": TIME, "type": "response_item", "payload": [value_of_nesting(levels - 5)]}
    )


def claude_line(levels: int) -> bytes:
    """A user record of a Claude Code transcript carrying a deep toolUseResult."""
    record = {
        "type": "user",
        "uuid": "u1",
        "parentUuid": None,
        "timestamp": TIME,
        "message": {"role": "user", "content": "go"},
        "toolUseResult": value_of_nesting(levels - 3),
    }
    return orjson.dumps(record)


CODEX_META = orjson.dumps(
    {"timestamp": TIME, "type": "session_meta", "payload": {"id": "01938a4b-3333-7000-8000-000000000001"}}
)
CASES: list[tuple[str, Callable[[int], bytes], Callable[[list[bytes]], ImportedFile]]] = [
    ("codex", codex_list_line, lambda lines: convert_codex([CODEX_META, *lines])),
    ("codex", codex_payload_line, lambda lines: convert_codex([CODEX_META, *lines])),
    ("claude", claude_line, lambda lines: convert_claude(lines, Path("s.jsonl"))),
]


def decoded_requests(imported: ImportedFile) -> int:
    """Serialize every ImportSessions request of the file and decode it as the writer does; the count."""
    count = 0
    for request in _requests(imported, "", None):
        writer_pb2.ImportSessionsRequest.FromString(request.SerializeToString())
        count += 1
    return count


@pytest.mark.parametrize(("tool", "make", "convert"), CASES, ids=["codex-list", "codex-payload", "claude"])
def test_the_deepest_line_converted_decodes_and_one_level_deeper_is_kept_as_text(
    tool: str, make: Callable[[int], bytes], convert: Callable[[list[bytes]], ImportedFile]
) -> None:
    """A line nesting MAX_LINE_NESTING levels is converted (no unrepresentable_line) and every request
    of its file decodes; a line nesting one or two levels more is one counted
    <tool>.unrepresentable_line, and its file decodes too."""
    deepest = make(MAX_LINE_NESTING)
    assert nesting(orjson.loads(deepest)) == MAX_LINE_NESTING
    imported = convert([deepest])
    [session] = imported.sessions
    assert session.kept_as_event[f"{tool}.unrepresentable_line"] == 0
    assert decoded_requests(imported) >= 3
    for levels in (MAX_LINE_NESTING + 1, MAX_LINE_NESTING + 2):
        deeper = make(levels)
        assert nesting(orjson.loads(deeper)) == levels
        imported = convert([deeper])
        [session] = imported.sessions
        assert session.kept_as_event[f"{tool}.unrepresentable_line"] == 1
        decoded_requests(imported)


def test_the_decodable_nesting_is_protobufs() -> None:
    """An event body nesting DECODABLE_NESTING levels decodes in an ImportSessions request; one
    nesting a level more (objects and arrays both) does not: the constant is the measured limit."""

    def decodes(body: Any) -> bool:
        request = writer_pb2.ImportSessionsRequest()
        request.records.records.append(event_record("k", body))
        try:
            writer_pb2.ImportSessionsRequest.FromString(request.SerializeToString())
        except DecodeError:
            return False
        return True

    for levels in (DECODABLE_NESTING - 1, DECODABLE_NESTING):  # objects only, and two arrays in
        assert nesting(value_of_nesting(levels)) == levels
        assert decodes(value_of_nesting(levels))
    for levels in (DECODABLE_NESTING + 1, DECODABLE_NESTING + 2):
        assert not decodes(value_of_nesting(levels))
