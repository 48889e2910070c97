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

Every importer reads its files through :mod:`rollout_cli.importers.source_lines`
(regular files only, no line longer than the record limit).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rollout.v1 import writer_pb2
from shared.errors import FileNameError
from shared.naming import validate_session_id
from shared.records import normalize_timestamp
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


def jsonl_files(folder: Path, pattern: str = "*.jsonl") -> Iterator[Path]:
    """Every entry matching ``pattern`` under ``folder`` (recursively) that is neither a folder nor
    a symlink, sorted by path: a named pipe or a device so named is listed, and refused by name
    when it is read (:mod:`rollout_cli.importers.source_lines`)."""
    for path in sorted(folder.rglob(pattern)):
        if not path.is_symlink() and not path.is_dir():
            yield path
