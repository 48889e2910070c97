"""The Codex CLI importer (``rollout import codex``): a rollout file -> one ledger session.

Both Codex layouts are read: the envelope ``{"timestamp", "type", "payload"}``
(2025-09 onwards) and the older bare layout (a header object, then bare
response items and ``{"record_type": "state"}`` lines).

Mapping (Codex -> ledger):

=================================  ============================================
session_meta                       CreateSession (id, created_at, cwd,
                                   originator, client_version) + an event
                                   ``codex.session_meta`` with the whole payload
response_item message              message (role, content as given: text,
                                   or parts when each is an object, else
                                   the list's JSON text)
event_msg item_completed with      user message (content parts as given) unless
item UserMessage (newest layout)   a user response item of the same turn has
                                   the same text; the event stays, without
                                   the content
response_item reasoning            reasoning (summary texts joined by a blank
                                   line; encrypted_content kept opaque)
response_item function_call        assistant message with one tool call
                                   (type ``function``)
response_item custom_tool_call     assistant message with one tool call
                                   (type ``custom``, input as arguments)
response_item *_call_output        tool message (tool_call_id = call_id)
turn_context                       turn_context
event_msg                          event (kind = payload.type)
event_msg thread_name_updated      the event, then a title record (shared.titles)
                                   holding ``thread_name`` when it is not empty
compacted                          compacted (summary, replacement_history)
=================================  ============================================

**Thread names.** Naming a thread (``/rename``, or the name Codex generates) appends an
``event_msg`` of type ``thread_name_updated`` (``{"thread_id", "thread_name"}``) to the
rollout file, and a line ``{"id", "thread_name", "updated_at"}`` to
``$CODEX_HOME/session_index.jsonl`` (append-only: the newest line of a thread names it, an
empty name clears it). Each name in the file becomes a title record where it stands, so the
last one is the session's title and earlier ones stay searchable. A file imported from under
``$CODEX_HOME/sessions`` or ``archived_sessions`` also takes the session index beside them
(:func:`session_index_of`): when its newest name for the thread is not empty and the file
has no name of its own or an older one, a title record with it ends the session. An index
that clears a name the file holds is noted (a ledger title is never cleared).

Each record carries the time of its source line (the envelope's ``timestamp``;
a bare item has none and takes the time of the line before it, or of the
session's header). Whatever has no mapping (other response item types such as web_search_call or
image_generation_call, state lines, unknown top-level types, an output whose
call never appeared, fields of a mapped item beyond the mapped ones) is kept as
an ``event`` record whose kind starts with ``codex.`` and is counted in the
report: nothing is dropped.

The stop kind reflects how the source ended, judged by its last turn event
(``task_started`` / ``task_complete`` / ``turn_aborted``): complete ->
completed; aborted -> cancelled; with no turn events at all (older files), an
assistant answer last with every tool call answered -> completed; otherwise
interrupted (the last turn may be unfinished).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rollout.v1 import records_pb2, writer_pb2
from rollout_cli.importers import (
    ImportedFile,
    ImportedSession,
    SourceRecord,
    event_record,
    jsonl_files,
    ledger_session_id,
    set_content,
    source_time,
    too_deep,
    unrepresentable_line,
)
from shared.stop_kinds import StopKind
from shared.titles import TITLE_EVENT, preferred_title, title_event_body

_MESSAGE_KEYS = {"type", "role", "content"}
_REASONING_KEYS = {"type", "summary", "encrypted_content", "content"}
_CALL_KEYS = {"type", "name", "arguments", "input", "call_id"}
_OUTPUT_KEYS = {"type", "call_id", "output"}
_CALL_TYPES = {"function_call": "function", "custom_tool_call": "custom"}
_OUTPUT_TYPES = {"function_call_output", "custom_tool_call_output"}
_TURN_EVENTS = {"task_started", "task_complete", "turn_aborted"}
_ENVELOPE_TYPES = {"session_meta", "response_item", "turn_context", "event_msg", "compacted"}
_ITEM_TYPES = {"message", "reasoning", *_CALL_TYPES, *_OUTPUT_TYPES}
#: Response item types that become a chat message.
_MAPPED_ITEMS = {"message", *_CALL_TYPES, *_OUTPUT_TYPES}
#: The event Codex appends to a rollout file when the thread is named.
THREAD_NAME_EVENT = "thread_name_updated"
#: Codex's index of thread names, in ``$CODEX_HOME`` beside the folders of rollout files.
SESSION_INDEX = "session_index.jsonl"
#: The folders of ``$CODEX_HOME`` holding rollout files.
ROLLOUT_FOLDERS = ("sessions", "archived_sessions")


@dataclass(frozen=True, slots=True)
class ThreadName:
    """A thread's newest name in Codex's session index ("" when cleared), and when it was set
    (the ledger's RFC 3339 form, "" when the line has no readable time)."""

    name: str
    updated_at: str


def session_index_of(source: Path) -> Path | None:
    """Codex's session index for a rollout file: ``session_index.jsonl`` beside the
    ``sessions`` (or ``archived_sessions``) folder the file lies under; None when there is none."""
    for folder in source.parents:
        if folder.name in ROLLOUT_FOLDERS:
            index = folder.parent / SESSION_INDEX
            return index if index.is_file() else None
    return None


def read_thread_names(lines: Iterable[bytes]) -> dict[str, ThreadName]:
    """The newest name of each thread in the lines of Codex's session index (by thread id; a
    later line replaces an earlier one). Lines not of the shape ``{"id", "thread_name",
    "updated_at"}`` are skipped: the index is Codex's cache, the rollout files are the record."""
    names: dict[str, ThreadName] = {}
    for raw in lines:
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(entry, dict):
            continue
        thread_id, name = entry.get("id"), entry.get("thread_name")
        if isinstance(thread_id, str) and isinstance(name, str):
            names[thread_id] = ThreadName(name, source_time(entry.get("updated_at")))
    return names


def _item_type(item: dict[str, Any]) -> str:
    """An item's ``type`` when it is text, else "" (a list or an object names no type)."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else ""


def _is_codex_line(line: dict[str, Any], first: bool) -> bool:
    """Whether a parsed line is an item of a Codex rollout: an envelope of a known type, a bare
    response item, or (first line) an older layout's header."""
    if "payload" in line and "type" in line:
        return _item_type(line) in _ENVELOPE_TYPES
    return _item_type(line) in _ITEM_TYPES or (first and "id" in line and "timestamp" in line)


def _typed_text(content: Any) -> str:
    """The text of a message's content as typed: a string, or the ``text`` of its parts joined
    (what a user response item and an item_completed UserMessage are compared by)."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict)).strip()
    return ""


class _Converter:
    def __init__(self, source: Path) -> None:
        self.session = ImportedSession(source=source, session_id="", originator="codex")
        self.source_id = ""
        self.call_ids: set[str] = set()
        self.open_calls: set[str] = set()
        self.last_item: str = ""
        self.last_event: str = ""
        self.turn = 0  # counts task_started events: what the user typed is matched within a turn
        self.user_items: set[tuple[int, str]] = set()  # (turn, text) of user response items
        #: item_completed UserMessage events: (index in the records, body, turn)
        self.user_events: list[tuple[int, dict[str, Any], int]] = []
        self.line = 0
        self.time = ""  # the time of the current line, or of the last line that had one
        #: The file's last thread name (as a title) and the time of its line.
        self.thread_name = ""
        self.thread_name_time = ""

    def append(self, record: writer_pb2.AppendRecord) -> None:
        if self.time:
            record.ts = self.time
        self.session.records.append(SourceRecord(self.line, record))

    def keep(self, kind: str, body: dict[str, Any]) -> None:
        self.append(event_record(kind, body))
        self.session.kept_as_event[kind] += 1

    def extras(self, item: dict[str, Any], mapped: set[str]) -> None:
        extra = {key: value for key, value in item.items() if key not in mapped}
        if extra:
            self.append(event_record("codex.item_fields", {"item_type": item.get("type"), "fields": extra}))

    def chat(self, item: dict[str, Any], message: records_pb2.ChatMessage) -> bool:
        """Fill ``message`` (empty, in place: a large output is copied once) with the chat message
        of one response item; False (``message`` untouched) when it has no mapping."""
        kind = _item_type(item)
        if kind not in _MAPPED_ITEMS:
            return False
        message.SetInParent()
        if kind == "message":
            message.role = str(item.get("role", ""))
            set_content(message, item.get("content"))
        elif kind in _CALL_TYPES:
            arguments = item.get("arguments") if kind == "function_call" else item.get("input")
            message.role = "assistant"
            call = message.tool_calls.add(id=str(item.get("call_id", "")), type=_CALL_TYPES[kind])
            call.function.name = str(item.get("name", ""))
            call.function.arguments = (
                arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
            )
        elif kind in _OUTPUT_TYPES:
            message.role, message.tool_call_id = "tool", str(item.get("call_id", ""))
            set_content(message, item.get("output"))
        return True

    def response_item(self, item: dict[str, Any]) -> None:
        kind = str(item.get("type"))
        self.last_item = kind
        if kind == "message" and item.get("role") == "user":
            typed = (self.turn, _typed_text(item.get("content")))
            self.user_items.add(typed)
        if kind == "reasoning":
            summary = item.get("summary") or []
            texts = [part.get("text", "") for part in summary if isinstance(part, dict)]
            reasoning = records_pb2.Reasoning(content="\n\n".join(texts))
            if isinstance(item.get("encrypted_content"), str):
                reasoning.encrypted = item["encrypted_content"]
            self.append(writer_pb2.AppendRecord(reasoning=reasoning))
            self.extras(item, _REASONING_KEYS if not item.get("content") else _REASONING_KEYS - {"content"})
            return
        if kind in _OUTPUT_TYPES and str(item.get("call_id", "")) not in self.call_ids:
            self.keep("codex.orphan_output", item)
            return
        record = writer_pb2.AppendRecord()
        if not self.chat(item, record.message):
            self.keep(f"codex.{kind}", item)
            return
        message = record.message
        if kind in _CALL_TYPES:
            self.call_ids.add(message.tool_calls[0].id)
            self.open_calls.add(message.tool_calls[0].id)
        elif kind in _OUTPUT_TYPES:
            self.open_calls.discard(message.tool_call_id)
        self.append(record)
        mapped = _MESSAGE_KEYS if kind == "message" else _CALL_KEYS if kind in _CALL_TYPES else _OUTPUT_KEYS
        self.extras(item, mapped)

    def replacement(self, items: list[Any]) -> records_pb2.ReplacementHistory:
        history = records_pb2.ReplacementHistory()
        self.call_ids = set()  # the writer checks outputs against the compacted view's calls
        for item in items:
            if isinstance(item, dict) and _item_type(item) in _MAPPED_ITEMS:
                message = history.messages.add()
                self.chat(item, message)
                if message.tool_calls:
                    self.call_ids.add(message.tool_calls[0].id)
        return history

    def envelope(self, line: dict[str, Any]) -> None:
        kind = line.get("type")
        payload = line.get("payload")
        if not isinstance(payload, dict):
            self.keep(f"codex.{kind}", {"line": line})
            return
        if kind == "session_meta":
            self.meta(payload)
        elif kind == "response_item":
            self.response_item(payload)
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str) and not self.session.model:
                self.session.model = payload["model"]
            record = writer_pb2.AppendRecord()
            record.turn_context.update(payload)
            record.turn_context.SetInParent()  # an empty context is still a turn_context
            self.append(record)
        elif kind == "event_msg":
            event_kind = str(payload.get("type", "event"))
            if event_kind in _TURN_EVENTS:
                self.last_event = event_kind
            if event_kind == "task_started":
                self.turn += 1
            body = {key: value for key, value in payload.items() if key != "type"}
            item = payload.get("item")
            if (
                event_kind == "item_completed"
                and isinstance(item, dict)
                and item.get("type") == "UserMessage"
            ):
                self.user_events.append((len(self.session.records), body, self.turn))
            self.append(event_record(event_kind, body))
            if event_kind == THREAD_NAME_EVENT:
                self.name_thread(payload.get("thread_name"))
        elif kind == "compacted":
            compacted = records_pb2.Compacted(summary=str(payload.get("message", "")))
            if isinstance(payload.get("replacement_history"), list):
                compacted.replacement_history.CopyFrom(self.replacement(payload["replacement_history"]))
            else:
                self.call_ids = set()
            self.append(writer_pb2.AppendRecord(compacted=compacted))
        else:
            self.keep(f"codex.{kind}", payload)

    def name_thread(self, name: object) -> None:
        """A title record for a thread name the file sets (none for an empty one)."""
        title = preferred_title(name) if isinstance(name, str) else ""
        if title:
            self.append(event_record(TITLE_EVENT, title_event_body(title)))
            self.thread_name, self.thread_name_time = title, self.time

    def indexed_name(self, entry: ThreadName) -> None:
        """End the session with the session index's name for the thread when it is newer than
        the file's own (see the module doc)."""
        if self.thread_name and entry.updated_at <= self.thread_name_time:
            return  # the file's name is as new: it was written with that index line
        title = preferred_title(entry.name)
        if not title:
            if self.thread_name:
                self.session.notes.append(
                    f"Codex's session index clears the thread name {self.thread_name!r};"
                    " the session keeps it as its title (a title is never cleared)"
                )
        elif title != self.thread_name:
            self.append(event_record(TITLE_EVENT, title_event_body(title)))
            self.session.notes.append(f"thread name {title!r} taken from Codex's session index")

    def meta(self, payload: dict[str, Any]) -> None:
        session = self.session
        self.source_id = str(payload.get("id", ""))
        session.created_at = source_time(payload.get("timestamp")) or session.created_at
        session.cwd = str(payload.get("cwd") or "")
        session.originator = str(payload.get("originator") or "codex")
        session.client_version = str(payload.get("cli_version") or "")
        self.time = self.time or session.created_at
        self.append(event_record("codex.session_meta", payload))

    def bare(self, line: dict[str, Any], first: bool) -> None:
        if line.get("record_type") == "state":
            self.keep("codex.state", line)
        elif first and "type" not in line and "id" in line:
            self.meta(line)
        elif "type" in line:
            self.response_item(line)
        else:
            self.keep("codex.unknown", line)

    def user_messages(self) -> None:
        """The newest layout records what the user typed only as ``item_completed`` events: each
        becomes a user message before its event, and the event keeps everything but the content
        (which now lives in the message), unless a user response item of the same turn holds the
        same text (older layouts write both; injected context is a response item of its own)."""
        for index, body, turn in reversed(self.user_events):
            if (turn, _typed_text(body["item"].get("content"))) in self.user_items:
                continue
            kept = self.session.records[index]
            item = dict(body["item"])
            user = writer_pb2.AppendRecord(ts=kept.record.ts)
            user.message.role = "user"
            set_content(user.message, item.pop("content", None))
            event = event_record("item_completed", {**body, "item": item})
            event.ts = kept.record.ts
            self.session.records[index : index + 1] = [
                SourceRecord(kept.line, user),
                SourceRecord(kept.line, event),
            ]

    def finish(self, fallback_id: str, thread_names: Mapping[str, ThreadName]) -> ImportedSession:
        session = self.session
        self.user_messages()
        entry = thread_names.get(self.source_id) if self.source_id else None
        if entry is not None:
            self.indexed_name(entry)
        session.session_id = ledger_session_id("codex", self.source_id or fallback_id)
        if not session.created_at:
            session.created_at = next((r.record.ts for r in session.records if r.record.ts), "")
        if self.last_event == "turn_aborted":
            session.stop_kind, session.stop_reason = StopKind.CANCELLED, "the source's last turn was aborted"
        elif self.last_event == "task_complete":
            session.stop_kind, session.stop_reason = StopKind.COMPLETED, "the source ended with task_complete"
        elif not self.last_event and self.last_item == "message" and not self.open_calls:
            session.stop_kind = StopKind.COMPLETED
            session.stop_reason = "the source ended with an assistant answer and every tool call answered"
        else:
            session.stop_kind = StopKind.INTERRUPTED
            session.stop_reason = "the source ended mid-turn; its last step may be incomplete"
        session.stop_reason = "imported from Codex: " + session.stop_reason
        return session


def convert_codex(
    lines: Iterable[bytes],
    source: Path = Path("<codex>"),
    thread_names: Mapping[str, ThreadName] | None = None,
) -> ImportedFile:
    """Convert the lines of one Codex rollout file into one session (see the module doc for the
    mapping); ``thread_names``: Codex's session index (:func:`read_thread_names`), by thread id.

    Never raises on bad content: an unparseable line is kept as a counted
    ``codex.unparseable_line`` event, a line no record can hold (JSON nested deeper
    than protobuf allows) as a counted ``codex.unrepresentable_line`` event with its
    text. ``recognized`` counts the lines that were Codex items; 0 means the file is
    not a Codex rollout.
    """
    converter = _Converter(source)
    imported = ImportedFile(source)
    first = True
    content_hash = hashlib.blake2b(digest_size=16)
    for raw in lines:
        converter.line += 1
        content_hash.update(raw)
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            converter.session.unparseable_lines += 1
            converter.keep("codex.unparseable_line", {"text": raw.decode("utf-8", "replace")})
            continue
        if isinstance(line, dict):
            converter.time = source_time(line.get("timestamp")) or converter.time
            if _is_codex_line(line, first):
                imported.recognized += 1
        reason = too_deep(line)
        if reason:  # no record can hold it: kept as its text (the rule of rollout_cli.importers)
            kept = unrepresentable_line("codex", raw, reason)
            converter.append(kept)
            converter.session.kept_as_event[kept.event.kind] += 1
        elif not isinstance(line, dict):
            converter.keep("codex.unknown", {"line": line})
        elif "payload" in line and "type" in line:
            converter.envelope(line)
        else:
            converter.bare(line, first)
        first = False
    # A file with no session id is named by its content: importing it again finds the same session.
    imported.sessions.append(converter.finish("content:" + content_hash.hexdigest(), thread_names or {}))
    return imported


class CodexImporter:
    """The :class:`rollout_cli.importers.Importer` of Codex CLI rollouts."""

    name = "codex"
    label = "Codex rollout"
    default_folder = "~/.codex/sessions"

    def __init__(self) -> None:
        #: Each session index read, by path, with the (mtime, size) it was read at.
        self._indexes: dict[Path, tuple[tuple[int, int], dict[str, ThreadName]]] = {}

    def source_files(self, folder: Path) -> Iterator[Path]:
        """Every ``*.jsonl`` under ``folder`` (Codex keeps ``YYYY/MM/DD/rollout-*.jsonl``), sorted;
        Codex's session index is no rollout (it names threads: :func:`session_index_of`)."""
        return (path for path in jsonl_files(folder) if path.name != SESSION_INDEX)

    def convert(self, lines: Iterable[bytes], source: Path) -> ImportedFile:
        """One rollout file, with the thread names of the session index beside its folder (an
        index that cannot be read is noted on the file; its names are then not taken)."""
        index = session_index_of(source)
        names: dict[str, ThreadName] = {}
        note = ""
        if index is not None:
            try:
                names = self._thread_names(index)
            except OSError as exc:
                note = f"Codex's session index {index} could not be read ({exc.strerror}); no thread name taken from it"
        imported = convert_codex(lines, source, names)
        if note:
            imported.notes.append(note)
        return imported

    def _thread_names(self, index: Path) -> dict[str, ThreadName]:
        status = index.stat()
        stamp = (status.st_mtime_ns, status.st_size)
        known = self._indexes.get(index)
        if known is None or known[0] != stamp:
            with index.open("rb") as handle:
                known = self._indexes[index] = (stamp, read_thread_names(handle))
        return known[1]
