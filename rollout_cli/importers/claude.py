"""The Claude Code importer (``rollout import claude``): a transcript -> a session and its sub-agent runs.

A Claude Code transcript (``~/.claude/projects/<project>/<session>.jsonl``) is a
tree of records: each has a ``uuid`` and a ``parentUuid``. Reading it:

* **The conversation** is the chain from the last main-line record (not
  ``isSidechain``) back to its root; a compaction boundary (a ``system`` record of
  subtype ``compact_boundary``, a new root) continues through its
  ``logicalParentUuid``. Main-line records off that chain were left by a rewind:
  each is kept as a ``claude.branch`` event where it stands, and counted.
* **Where the tree is broken** (:func:`_link`): a message record without a usable
  ``uuid`` (missing, ``null``: no record can name it as a parent), and a record
  whose ``parentUuid`` names a uuid the file does not hold (a lost one), follow
  the record before them on their side of the file (main line or sub-agent
  runs). A file in which no record names another as its parent (no
  ``parentUuid``, or all ``null``) is read in file order. Nothing is left out:
  a transcript of null uuids is its conversation in file order.
* **Sub-agent runs** (``isSidechain`` records; older versions keep them in the
  parent's file) are trees of their own, each rooted at the prompt of a ``Task``
  tool call. A run whose root prompt equals the ``prompt`` of a Task call becomes
  a **child session** with delegation coordinates (the parent session, that
  call's id) and the call's ``subagent_type`` as its agent name; a run with no
  matching call becomes a child without coordinates, and a note says so.

Mapping (Claude Code -> ledger), per record on a chain:

===================================  =========================================
user, content a string               user message (text), input kind
                                     ``trigger`` unless ``isMeta``
user, content blocks                 ``tool_result`` blocks -> tool messages
                                     (text, or the blocks as parts;
                                     ``is_error`` kept), other blocks (text,
                                     image, document) -> one user message
                                     with the blocks as parts, as given
assistant records sharing            one assistant message: ``text`` blocks
one API ``message.id``               -> content (one: text, several: parts),
                                     ``thinking`` -> reasoning (its
                                     ``signature`` kept), ``redacted_thinking``
                                     -> reasoning (``encrypted``: its data),
                                     ``tool_use`` -> tool call (input as JSON
                                     arguments)
system ``compact_boundary``          compacted, its summary the text of the
+ the ``isCompactSummary`` user      summary record (the model's view after a
record after it                      Claude Code compaction is that one message)
cwd / gitBranch / version / model    a ``turn_context`` when any of them changes
===================================  =========================================

Kept as events (kind ``claude.<what>``, counted): each record's fields that have
no mapping (``uuid``, ``parentUuid``, ``requestId``, ``usage``, ``toolUseResult``,
``isMeta``, ...) as one ``claude.record`` event before what the record became;
``summary``, ``custom-title`` and ``ai-title`` lines (the titles Claude Code shows in its resume picker: they do not
change the model's view, so they are not compactions; the session's title is then one title
record at its end: the last custom title, else the last AI title, else the last summary,
shared.titles); other ``system`` records;
``file-history-snapshot`` and any other record type; blocks of no known type; a
tool result whose call is not in the current view; unparseable lines; a line
nested deeper than a record can hold (``claude.unrepresentable_line``, its text:
:func:`rollout_cli.importers.too_deep`), which keeps its place in the tree.
Content given as blocks becomes parts only when every block is an object, else
its JSON text (:func:`rollout_cli.importers.set_content`).

The stop kind reflects how the source ended: an assistant answer last with every
tool call answered -> completed; otherwise interrupted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rollout.v1 import records_pb2, writer_pb2
from rollout_cli.importers import (
    ImportedFile,
    ImportedSession,
    SourceRecord,
    derived_session_id,
    event_record,
    jsonl_files,
    ledger_session_id,
    set_content,
    source_time,
    too_deep,
    unrepresentable_line,
)
from shared.errors import FileNameError
from shared.naming import validate_agent_name
from shared.records import InputKind
from shared.session_meta import SessionRole
from shared.stop_kinds import StopKind
from shared.titles import TITLE_EVENT, preferred_title, title_event_body
from shared.wire import python_to_list

_NODE_TYPES = {"user", "assistant", "system"}
#: Record fields that map to something (the rest go into the claude.record event).
_MAPPED_FIELDS = {"type", "message", "timestamp", "cwd", "gitBranch", "version", "isSidechain"}
_MAPPED_MESSAGE_FIELDS = {"role", "content", "model"}
_TASK_TOOLS = {"Task", "Agent"}
_DEFAULT_CHILD_NAME = "subagent"


@dataclass(slots=True, eq=False)
class _Line:
    """One parsed source line: its 1-based number, object (None when it is not a JSON object) and
    text, and (set by :func:`_link`) the line it follows in the tree."""

    number: int
    record: dict[str, Any] | None
    raw: bytes = b""
    parent: _Line | None = None
    #: Why no record can hold this line (rollout_cli.importers.too_deep); "" when one can.
    too_deep: str = ""

    @property
    def uuid(self) -> str:
        """The record's uuid, or "" when it has none that can be named (missing, null, not text)."""
        value = self.record.get("uuid") if self.record else None
        return value if isinstance(value, str) else ""

    @property
    def named_parent(self) -> str:
        """The uuid the record names as its parent: ``parentUuid``, or for a compaction boundary
        (a new root) its ``logicalParentUuid``; "" when it names none."""
        if self.record is None:
            return ""
        value = self.record.get("parentUuid")
        if not value and self.record.get("subtype") == "compact_boundary":
            value = self.record.get("logicalParentUuid")
        return value if isinstance(value, str) else ""

    @property
    def is_node(self) -> bool:
        """A record of the tree: one with a uuid, whatever its type, or a message record without one."""
        return self.record is not None and (bool(self.uuid) or self.record.get("type") in _NODE_TYPES)

    @property
    def is_message(self) -> bool:
        """A record of the tree that can carry a message (user, assistant, system)."""
        return self.record is not None and self.record.get("type") in _NODE_TYPES

    @property
    def sidechain(self) -> bool:
        return bool(self.record and self.record.get("isSidechain"))


@dataclass
class _Run:
    """A sub-agent run: its root line and the lines of its chain, in file order."""

    root: _Line
    chain: list[_Line] = field(default_factory=list)
    off_chain: list[_Line] = field(default_factory=list)


def _text_of(content: Any) -> str:
    """The plain text of a message content (a string, or the text blocks joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            for block in content
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        )
    return ""


def _message(record: dict[str, Any]) -> dict[str, Any]:
    message = record.get("message")
    return message if isinstance(message, dict) else {}


def _link(nodes: list[_Line]) -> None:
    """Set the parent of every node (see "Reading it" in the module doc).

    A node follows the record its ``parentUuid`` names (:attr:`_Line.named_parent`). One that
    names a record the file does not hold (its uuid was lost), or that has no uuid of its own
    (so that no record can name it), follows the node before it on its side of the file (the
    main line, or the sub-agent runs); with a uuid and no named parent it is a root. A file in
    which no record names another is read in file order: every node follows the one before it
    on its side.
    """
    by_uuid = {line.uuid: line for line in nodes if line.uuid}
    tree = any(line.named_parent in by_uuid for line in nodes)
    previous: dict[bool, _Line] = {}
    for line in nodes:
        named = by_uuid.get(line.named_parent) if line.named_parent else None
        if named is not None and named is not line:
            line.parent = named
        elif line.named_parent or not line.uuid or not tree:
            line.parent = previous.get(line.sidechain)
        previous[line.sidechain] = line


def _chain_to(leaf: _Line) -> list[_Line]:
    """The lines from ``leaf`` back to its root (through compaction boundaries), in file order."""
    chain: list[_Line] = []
    seen: set[int] = set()
    line: _Line | None = leaf
    while line is not None and line.number not in seen:
        seen.add(line.number)
        chain.append(line)
        line = line.parent
    chain.sort(key=lambda item: item.number)
    return chain


class _SessionWriter:
    """Builds one ImportedSession from the lines of one chain (and the lines kept beside it)."""

    def __init__(self, session: ImportedSession) -> None:
        self.session = session
        self.time = ""
        self.line = 0
        self.known_calls: set[str] = set()  # calls an output may answer (the current view's)
        self.open_calls: list[str] = []
        self.context: dict[str, str] = {}
        self.assistant: list[_Line] = []  # records of the assistant message being gathered
        self.pending_compaction: _Line | None = None
        self.last_role = ""

    # -- records -------------------------------------------------------------------------------
    def append(self, record: writer_pb2.AppendRecord, line: int | None = None) -> None:
        if self.time:
            record.ts = self.time
        self.session.records.append(SourceRecord(self.line if line is None else line, record))

    def event(self, kind: str, body: dict[str, Any], *, counted: bool = True) -> None:
        self.append(event_record(kind, body))
        if counted:
            self.session.kept_as_event[kind] += 1

    def keep_unrepresentable(self, line: _Line) -> None:
        """Keep ``line`` whole as its text: no record can hold it (``too_deep``). An assistant
        record so kept does not end the assistant message being gathered (its other records)."""
        if line.record is None or line.record.get("type") != "assistant":
            self.flush_assistant()
        self.at(line)
        kept = unrepresentable_line("claude", line.raw, line.too_deep)
        self.append(kept)
        self.session.kept_as_event[kept.event.kind] += 1

    def at(self, line: _Line) -> None:
        """Make ``line`` the current source line (its number and, when it has one, its time)."""
        self.line = line.number
        if line.record is not None:
            self.time = source_time(line.record.get("timestamp")) or self.time
            if not self.session.created_at and self.time:
                self.session.created_at = self.time

    # -- lines that are not on the chain -------------------------------------------------------
    def keep_line(self, line: _Line, kind: str) -> None:
        """Keep a whole source line as an event of ``kind``."""
        if line.too_deep:
            self.keep_unrepresentable(line)
            return
        self.flush_assistant()
        self.at(line)
        if line.record is None:
            self.session.unparseable_lines += 1
            self.event("claude.unparseable_line", {"text": line.raw.decode("utf-8", "replace")})
        else:
            self.event(kind, line.record)

    # -- lines on the chain --------------------------------------------------------------------
    def chain_line(self, line: _Line) -> None:
        record = line.record
        assert record is not None
        kind = record.get("type")
        if line.too_deep:
            self.keep_unrepresentable(line)
            return
        if kind not in _NODE_TYPES:  # progress, attachment, ...: in the tree, no message
            self.keep_line(line, f"claude.{kind}")
            return
        if kind == "assistant":
            message_id = _message(record).get("id")
            if self.assistant and (
                not message_id or _message(self.assistant[0].record or {}).get("id") != message_id
            ):
                self.flush_assistant()
            self.assistant.append(line)
            return
        self.flush_assistant()
        self.at(line)
        self.turn_context(record)
        if kind == "system":
            if record.get("subtype") == "compact_boundary":
                self.record_fields(record)
                self.pending_compaction = line
            else:
                self.event("claude.system", record)
            return
        self.record_fields(record)
        self.user(record)

    def record_fields(self, record: dict[str, Any]) -> None:
        """The record's fields that have no mapping, as one ``claude.record`` event (not counted)."""
        fields = {key: value for key, value in record.items() if key not in _MAPPED_FIELDS}
        extra = {key: value for key, value in _message(record).items() if key not in _MAPPED_MESSAGE_FIELDS}
        if extra:
            fields["message"] = extra
        if fields:
            self.event("claude.record", fields, counted=False)

    def turn_context(self, record: dict[str, Any]) -> None:
        """A turn_context when the working folder, branch, version or model changes."""
        context = dict(self.context)
        for key in ("cwd", "gitBranch", "version"):
            if isinstance(record.get(key), str):
                context[key] = record[key]
        model = _message(record).get("model")
        if isinstance(model, str) and model and not model.startswith("<"):
            context["model"] = model
        if context != self.context:
            self.context = context
            record = writer_pb2.AppendRecord()
            record.turn_context.update(context)
            self.append(record)
        session = self.session
        session.cwd = session.cwd or context.get("cwd", "")
        session.model = session.model or context.get("model", "")
        session.client_version = session.client_version or context.get("version", "")

    def user(self, record: dict[str, Any]) -> None:
        content = _message(record).get("content")
        if self.pending_compaction is not None:
            boundary, self.pending_compaction = self.pending_compaction, None
            if record.get("isCompactSummary"):
                self.compaction(_text_of(content))
                return
            self.compaction(str((boundary.record or {}).get("content", "")))
        # A prompt starts a round (shared.rounds); an isMeta record (text Claude Code added, such as
        # a command's expansion) is left to the rule, which keeps it in the prompt's round.
        kind = "" if record.get("isMeta") else InputKind.TRIGGER.value
        if isinstance(content, str):
            record = writer_pb2.AppendRecord()
            record.message.role, record.message.text = "user", content  # in place: one copy of it
            if kind:
                record.message.input_kind = kind
            self.append(record)
            self.last_role = "user"
            return
        if not isinstance(content, list):
            self.event("claude.unmapped_content", {"content": content})
            return
        rest = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                self.tool_result(block)
            else:
                rest.append(block)
        if rest:
            record = writer_pb2.AppendRecord()
            record.message.role = "user"
            set_content(record.message, rest)
            if kind:
                record.message.input_kind = kind
            self.append(record)
            self.last_role = "user"

    def compaction(self, summary: str) -> None:
        self.append(writer_pb2.AppendRecord(compacted=records_pb2.Compacted(summary=summary)))
        self.known_calls.clear()  # the model's view is the summary now: no call is open in it
        self.open_calls.clear()
        self.last_role = "user"

    def tool_result(self, block: dict[str, Any]) -> None:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or call_id not in self.known_calls:
            self.event("claude.orphan_tool_result", block)
            return
        record = writer_pb2.AppendRecord()  # the message built in place: one copy of a large output
        message = record.message
        message.role, message.tool_call_id, message.is_error = "tool", call_id, bool(block.get("is_error"))
        set_content(message, block.get("content"))
        extra = {
            key: value
            for key, value in block.items()
            if key not in {"type", "tool_use_id", "content", "is_error"}
        }
        if extra:
            self.event("claude.block_fields", {"block_type": "tool_result", "fields": extra}, counted=False)
        self.append(record)
        if call_id in self.open_calls:
            self.open_calls.remove(call_id)
        self.last_role = "tool"

    def flush_assistant(self) -> None:
        """Write the gathered records of one API message as one assistant message."""
        lines, self.assistant = self.assistant, []
        if not lines:
            return
        for line in lines:
            self.at(line)
            assert line.record is not None
            self.turn_context(line.record)
            self.record_fields(line.record)
        self.at(lines[0])  # the message happened when its first part did
        record = writer_pb2.AppendRecord()  # the message built in place
        message = record.message
        message.role = "assistant"
        texts: list[dict[str, Any]] = []
        for line in lines:
            content = _message(line.record or {}).get("content")
            blocks = (
                content
                if isinstance(content, list)
                else [{"type": "text", "text": content}]
                if isinstance(content, str)
                else []
            )
            for block in blocks:
                self.assistant_block(message, block, texts)
        if len(texts) == 1:
            message.text = texts[0]["text"]
        elif texts:
            message.parts.CopyFrom(python_to_list(texts))
        if len(message.reasoning_blocks) == 1:
            only = records_pb2.Reasoning()
            only.CopyFrom(message.reasoning_blocks[0])
            del message.reasoning_blocks[:]
            message.reasoning.CopyFrom(only)
        self.append(record, lines[0].number)
        for call in message.tool_calls:
            self.known_calls.add(call.id)
            self.open_calls.append(call.id)
        self.last_role = "assistant"

    def assistant_block(
        self, message: records_pb2.ChatMessage, block: Any, texts: list[dict[str, Any]]
    ) -> None:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block)
        elif kind == "thinking":
            reasoning = message.reasoning_blocks.add(content=str(block.get("thinking", "")))
            if isinstance(block.get("signature"), str):
                reasoning.signature = block["signature"]
        elif kind == "redacted_thinking":
            message.reasoning_blocks.add(content="", encrypted=str(block.get("data", "")))
        elif kind == "tool_use" and isinstance(block.get("id"), str) and block.get("name"):
            message.tool_calls.add(
                id=block["id"],
                type="function",
                function=records_pb2.FunctionCall(
                    name=str(block["name"]), arguments=orjson.dumps(block.get("input", {})).decode()
                ),
            )
        else:
            self.event("claude.content_block", {"block": block})

    def finish(self, reason_prefix: str) -> ImportedSession:
        self.flush_assistant()
        if self.pending_compaction is not None:
            boundary, self.pending_compaction = self.pending_compaction, None
            self.compaction(str((boundary.record or {}).get("content", "")))
        session = self.session
        if self.last_role == "assistant" and not self.open_calls:
            session.stop_kind = StopKind.COMPLETED
            session.stop_reason = "the source ended with an assistant answer and every tool call answered"
        else:
            session.stop_kind = StopKind.INTERRUPTED
            session.stop_reason = "the source ended mid-turn; its last step may be incomplete"
        session.stop_reason = f"{reason_prefix}: {session.stop_reason}"
        return session


def _task_calls(session: ImportedSession) -> Iterator[tuple[str, str, str]]:
    """(call id, prompt, subagent type) of every Task tool call the session made, in order."""
    for source_record in session.records:
        record = source_record.record
        if record.WhichOneof("record") != "message":
            continue
        for call in record.message.tool_calls:
            if call.function.name not in _TASK_TOOLS:
                continue
            try:
                arguments = orjson.loads(call.function.arguments)
            except orjson.JSONDecodeError:
                continue
            if isinstance(arguments, dict) and isinstance(arguments.get("prompt"), str):
                yield call.id, arguments["prompt"], str(arguments.get("subagent_type") or "")


def _agent_name(subagent_type: str) -> str:
    try:
        return validate_agent_name(subagent_type) or _DEFAULT_CHILD_NAME
    except FileNameError:
        return _DEFAULT_CHILD_NAME


#: The lines of a transcript that name it, by precedence, each with the field holding the title.
_TITLE_LINES = {"custom-title": "customTitle", "ai-title": "aiTitle", "summary": "summary"}


def _source_title(parsed: list[_Line]) -> str:
    """The transcript's title (shared.titles.preferred_title): the last custom title (``/rename``)
    over the last AI title over the last summary line; "" when it has none."""
    last = dict.fromkeys(_TITLE_LINES, "")
    for line in parsed:
        kind = line.record.get("type") if line.record is not None else None
        if line.record is not None and isinstance(kind, str) and kind in _TITLE_LINES:
            value = line.record.get(_TITLE_LINES[kind], line.record.get("title"))
            if isinstance(value, str) and value.strip():
                last[kind] = value
    return preferred_title(*last.values())


def convert_claude(lines: Iterable[bytes], source: Path = Path("<claude>")) -> ImportedFile:
    """Convert the lines of one Claude Code transcript (see the module doc for the mapping).

    Returns the main session first (when the file has a main line), then one
    child session per sub-agent run; a file with neither (titles only) gives no
    session and a note saying what it held. Never raises on bad content.
    """
    parsed: list[_Line] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed.append(_Line(number, None, raw))
            continue
        parsed.append(
            _Line(number, value if isinstance(value, dict) else None, raw, too_deep=too_deep(value))
        )
    imported = ImportedFile(source)
    imported.recognized = sum(
        1
        for line in parsed
        if line.record is not None and line.record.get("type") in {*_NODE_TYPES, "summary"}
    )
    if not imported.recognized:
        return imported
    nodes = [line for line in parsed if line.is_node]
    _link(nodes)
    source_id = next(
        (
            str(line.record["sessionId"])
            for line in nodes
            if line.record and isinstance(line.record.get("sessionId"), str)
        ),
        source.stem,
    )
    main_nodes = [line for line in nodes if not line.sidechain and line.is_message]
    on_main = {line.number for line in _chain_to(main_nodes[-1])} if main_nodes else set()

    main: ImportedSession | None = None
    if main_nodes:
        main = ImportedSession(
            source=source, session_id=ledger_session_id("claude", source_id), originator="claude-code"
        )
        writer = _SessionWriter(main)
        branch_lines = 0
        for line in parsed:
            if line.sidechain:
                continue  # a sub-agent run: its own session below
            if line.number in on_main:
                writer.chain_line(line)
            elif line.is_message:
                writer.keep_line(line, "claude.branch")
                branch_lines += 1
            else:
                record_type = line.record.get("type") if line.record else None
                writer.keep_line(
                    line, f"claude.{record_type}" if isinstance(record_type, str) else "claude.unknown"
                )
        title = _source_title(parsed)
        if title:  # last in the session: the title it shows (shared.titles)
            writer.append(event_record(TITLE_EVENT, title_event_body(title)))
        writer.finish("imported from Claude Code")
        if branch_lines:
            main.notes.append(
                f"{branch_lines} record(s) on branches left by a rewind kept as claude.branch events"
            )
        imported.sessions.append(main)

    runs = _sidechain_runs([line for line in nodes if line.sidechain])
    if main is None and runs:
        imported.notes.append("no main line: the file holds sub-agent runs only")
    tasks: dict[str, list[tuple[str, str, ImportedSession]]] = {}
    if main is not None:
        for call_id, prompt, subagent_type in _task_calls(main):
            tasks.setdefault(prompt, []).append((call_id, subagent_type, main))
    for run in runs:
        prompt = _text_of(_message(run.root.record or {}).get("content"))
        matches = tasks.get(prompt)
        child = ImportedSession(
            source=source,
            session_id=derived_session_id("claude", f"{source_id}:{run.root.uuid or run.root.number}"),
            originator="claude-code",
        )
        if matches:
            call_id, subagent_type, parent = matches.pop(0)
            child.role, child.parent, child.delegation_id = SessionRole.CHILD, parent, call_id
            child.agent_name = _agent_name(subagent_type)
        else:
            child.role, child.agent_name = SessionRole.CHILD_WITHOUT_COORDINATES, _DEFAULT_CHILD_NAME
            child.notes.append(
                f"the sub-agent run starting at line {run.root.number} matches no Task call in this file:"
                " it is a child session without delegation coordinates (never resumable)"
            )
        writer = _SessionWriter(child)
        for line in sorted([*run.chain, *run.off_chain], key=lambda item: item.number):
            if line in run.off_chain:
                writer.keep_line(line, "claude.branch")
            else:
                writer.chain_line(line)
        writer.finish("imported from a Claude Code sub-agent run")
        imported.sessions.append(child)
    if not imported.sessions:  # titles and snapshots only: say what it held, never "skipped"
        kinds = Counter(str(line.record.get("type")) for line in parsed if line.record is not None)
        held = ", ".join(f"{kind} ×{count}" for kind, count in sorted(kinds.items()))
        imported.notes.append(f"no conversation in it (lines: {held}); nothing imported")
    return imported


def _sidechain_runs(sidechain: list[_Line]) -> list[_Run]:
    """The sub-agent runs among the (linked) sidechain lines, each with its chain, ordered by their roots."""
    runs: dict[int, _Run] = {}
    members: dict[int, list[_Line]] = {}
    for line in sidechain:
        root = line
        seen = {line.number}
        while root.parent is not None and root.parent.sidechain and root.parent.number not in seen:
            root = root.parent
            seen.add(root.number)
        runs.setdefault(root.number, _Run(root))
        members.setdefault(root.number, []).append(line)
    for root_number, run in runs.items():
        lines = members[root_number]
        in_chain = {line.number for line in _chain_to(lines[-1])}
        run.chain = [line for line in lines if line.number in in_chain]
        run.off_chain = [line for line in lines if line.number not in in_chain]
    return sorted(runs.values(), key=lambda run: run.root.number)


class ClaudeImporter:
    """The :class:`rollout_cli.importers.Importer` of Claude Code transcripts."""

    name = "claude"
    label = "Claude Code transcript"
    default_folder = "~/.claude/projects"

    def source_files(self, folder: Path) -> Iterator[Path]:
        """Every ``*.jsonl`` under ``folder`` (Claude Code keeps ``<project>/<session>.jsonl``), sorted."""
        return jsonl_files(folder)

    def convert(self, lines: Iterable[bytes], source: Path) -> ImportedFile:
        return convert_claude(lines, source)
