"""Importers: sessions recorded by other tools, turned into ledger sessions.

One :class:`Importer` per source format turns the lines of one source file into
:class:`ImportedSession` objects (the records to append, with the source's own
times, and a report); :mod:`rollout_cli.importers.upload` is the one path that
writes them through the writer's gRPC API, all or nothing per source file.
Two implementations live beside this module:

=========  ============================================================  =======================
name       source                                                        module
=========  ============================================================  =======================
codex      Codex CLI rollouts, ``~/.codex/sessions/YYYY/MM/DD/*.jsonl``  :mod:`.codex`
claude     Claude Code transcripts, ``~/.claude/projects/<p>/*.jsonl``    :mod:`.claude`
=========  ============================================================  =======================

The contract every importer keeps:

* **Nothing is dropped.** A source line with no mapping is kept as an ``event``
  record whose kind starts with the importer's name (``codex.``, ``claude.``) and
  is counted in :attr:`ImportedSession.kept_as_event`.
* **Source times are kept.** Each record carries the time of the source line it
  came from in ``AppendRecord.ts``; a line without a time takes the time of the
  line before it that had one (or the session's creation time).
* **Ids are stable.** A session keeps its source id when that is a lowercase
  UUID; otherwise its id is derived from the source (:func:`derived_session_id`),
  so importing the same file again finds the session instead of making a second.
* **Every record names its source line** (:class:`SourceRecord`), so a refusal
  names the file and the line.
* **A line no record can hold is kept as its text**: before converting a
  parsed line, an importer asks :func:`too_deep` (JSON nested deeper than
  protobuf decodes); such a line is not converted at all but kept whole as the
  counted event :func:`unrepresentable_line` makes (kind
  ``<importer>.unrepresentable_line``, its text and the reason).
* **Content is given as parts only when every part is an object**
  (:func:`shared.records.non_object_part`, the writer's rule); other content is
  kept as its JSON text (:func:`set_content`).

Every importer reads its files through :mod:`rollout_cli.importers.source_lines`
(regular files only, no line longer than the record limit).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from rollout.v1 import records_pb2, writer_pb2
from shared.errors import FileNameError
from shared.naming import validate_session_id
from shared.records import non_object_part, normalize_timestamp
from shared.session_meta import SessionRole
from shared.stop_kinds import StopKind

#: The namespace of the UUIDv5 ids derived for sources whose own id is not a lowercase UUID.
IMPORT_NAMESPACE = uuid.UUID("6f1c2d3e-6a55-4b8e-9d0f-2f1e6c4b7a90")


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record to append and the 1-based line of the source file it came from."""

    line: int
    record: writer_pb2.AppendRecord


@dataclass
class ImportedSession:
    """What one session of a source file becomes: what to create, what to append, how it ended.

    ``parent`` points at the session (of the same source file) that delegated to
    this one; its ledger id becomes ``parent_session_id`` at upload time.
    """

    source: Path
    session_id: str
    created_at: str = ""
    agent_name: str = ""
    role: SessionRole = SessionRole.ROOT
    parent: ImportedSession | None = None
    delegation_id: str = ""
    cwd: str = ""
    model: str = ""
    originator: str = ""
    client_version: str = ""
    records: list[SourceRecord] = field(default_factory=list)
    stop_kind: StopKind = StopKind.INTERRUPTED
    stop_reason: str = ""
    kept_as_event: Counter[str] = field(default_factory=Counter)
    unparseable_lines: int = 0
    #: Sentences for the person importing: branches kept as events, unmatched sub-agent runs, ...
    notes: list[str] = field(default_factory=list)

    @property
    def stop_time(self) -> str:
        """The time of the last record (the source's last activity), or the creation time."""
        for source_record in reversed(self.records):
            if source_record.record.ts:
                return source_record.record.ts
        return self.created_at


@dataclass
class ImportedFile:
    """Every session of one source file, parents before their children."""

    source: Path
    sessions: list[ImportedSession] = field(default_factory=list)
    #: Lines that were items of the source format; 0 means the file is not one.
    recognized: int = 0
    #: Sentences about the file as a whole.
    notes: list[str] = field(default_factory=list)


class Importer(Protocol):
    """One source format: its name, where its files live, how a file becomes sessions."""

    #: The subcommand and the prefix of kept event kinds ("codex", "claude").
    name: str
    #: What one source file is, in words ("Codex rollout").
    label: str
    #: The folder the source tool writes its sessions under, shown in help texts.
    default_folder: str

    def source_files(self, folder: Path) -> Iterator[Path]:
        """The source files under ``folder``, in a stable order (the walk of ``rollout import``)."""
        ...

    def convert(self, lines: Iterable[bytes], source: Path) -> ImportedFile:
        """Turn the lines of one source file into sessions (never raises on bad content)."""
        ...


def derived_session_id(tool: str, source_id: str) -> str:
    """A stable lowercase UUID (v5) for a source session whose own id is not one."""
    return str(uuid.uuid5(IMPORT_NAMESPACE, f"{tool}:{source_id}"))


def ledger_session_id(tool: str, source_id: str) -> str:
    """``source_id`` itself when it is a lowercase UUID, else :func:`derived_session_id`."""
    try:
        return validate_session_id(source_id)
    except FileNameError:
        return derived_session_id(tool, source_id)


def source_time(value: object) -> str:
    """A source timestamp in the ledger's form (RFC 3339 UTC, microseconds), or "" when it is none."""
    if not isinstance(value, str) or not value:
        return ""
    try:
        return normalize_timestamp(value)
    except ValueError:
        return ""


#: The deepest a JSON value may nest (:func:`nesting`) in an event body or a message's parts for
#: the ImportSessions request holding it to decode: protobuf's depth limit (100 message levels,
#: the request's own included). Measured: 32 nested objects decode, 33 do not; one object
#: holding 47 nested arrays decodes, 48 does not.
DECODABLE_NESTING = 97
#: The deepest a source line may nest: an importer may put a line's content one object deeper
#: than the line (an event body ``{"line": ...}``), never more.
MAX_LINE_NESTING = DECODABLE_NESTING - 3


def nesting(value: Any) -> int:
    """How many protobuf message levels ``value`` takes as a ``google.protobuf.Value``: an object
    3 (Struct, map entry, Value), an array 2 (ListValue, Value), a scalar 0, along its deepest
    path. Walks the value without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            children: Iterable[Any] = item.values()
            depth += 3
        elif type(item) is list:
            children = item
            depth += 2
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children if type(child) in (dict, list))
    return deepest


def too_deep(value: Any) -> str:
    """Why no record can hold a source line whose JSON is ``value`` (nested past
    :data:`MAX_LINE_NESTING`), or "" when records can. Every importer asks this of each parsed
    line before converting it, and keeps a line it answers for as :func:`unrepresentable_line`."""
    depth = nesting(value)
    if depth <= MAX_LINE_NESTING:
        return ""
    return (
        f"its JSON nests {depth} protobuf levels deep (an object is 3, an array 2), past the"
        f" {MAX_LINE_NESTING} a record can hold"
    )


def event_record(kind: str, body: dict[str, Any]) -> writer_pb2.AppendRecord:
    """An ``event`` record of ``kind`` holding ``body``, built in place (a large body is copied
    once into the record, not once per enclosing message)."""
    record = writer_pb2.AppendRecord()
    record.event.kind = kind
    record.event.body.update(body)
    return record


def unrepresentable_line(tool: str, raw: bytes, reason: str) -> writer_pb2.AppendRecord:
    """The event that keeps a source line no record can hold (``reason``, from :func:`too_deep`):
    kind ``<tool>.unrepresentable_line``, body ``{"text": the line as text, "reason": reason}``."""
    return event_record(
        f"{tool}.unrepresentable_line", {"text": raw.decode("utf-8", "replace"), "reason": reason}
    )


def set_content(message: records_pb2.ChatMessage, value: Any) -> records_pb2.ChatMessage:
    """``message`` holding a source's content value: a string as its text, a list whose parts are
    all objects as parts (as given), None as no content, anything else (a list with a part that
    is not an object included: the writer refuses such parts) as its JSON text."""
    if isinstance(value, str):
        message.text = value
    elif isinstance(value, list) and non_object_part(value) is None:
        message.parts.SetInParent()  # an empty list is still parts, not "no content"
        message.parts.extend(value)
    elif value is not None:
        message.text = orjson.dumps(value).decode()
    return message


def jsonl_files(folder: Path, pattern: str = "*.jsonl") -> Iterator[Path]:
    """Every entry matching ``pattern`` under ``folder`` (recursively) that is neither a folder nor
    a symlink, sorted by path: a named pipe or a device so named is listed, and refused by name
    when it is read (:mod:`rollout_cli.importers.source_lines`)."""
    for path in sorted(folder.rglob(pattern)):
        if not path.is_symlink() and not path.is_dir():
            yield path
