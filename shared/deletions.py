"""Deletion records: the line format of a shard's ``deletions.jsonl`` (docs/deletion.md §2).

The writer appends one per deleted session (writer_service.deletion); both services look a
deleted fork source's own source up in them (:func:`deletion_in`, the tombstone lookup the
fork lineage walk of shared.lineage is given), so both read and write them here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from shared.errors import InvalidArgumentError
from shared.layout import DataRoot

#: A shard's deletion records, one JSON object per line.
DELETIONS_FILE = "deletions.jsonl"
#: Why a session was deleted: a DeleteSession call, or the writer's retention.
CAUSES = ("request", "retention")


@dataclass(frozen=True, slots=True)
class Deletion:
    """One deletion record: ``session_id``; ``tenant``, the session's recorded tenant (who may
    see the tombstone); ``deleted_by``, the caller's credential (``token:<12 hex>``,
    ``certificate:<CN>``, ``anonymous`` without authentication, ``retention``);
    ``deleted_at`` (RFC 3339, UTC); ``cause`` (:data:`CAUSES`); ``forked_from``, (source id,
    fork seq) when the deleted session was a fork (its forks' lineage goes on through it)."""

    session_id: str
    tenant: str
    deleted_by: str
    deleted_at: str
    cause: str = "request"
    forked_from: tuple[str, int] | None = None

    def line(self) -> bytes:
        """The record as one line of ``deletions.jsonl``."""
        fields: dict[str, Any] = {
            "session_id": self.session_id,
            "tenant": self.tenant,
            "deleted_by": self.deleted_by,
            "deleted_at": self.deleted_at,
            "cause": self.cause,
        }
        if self.forked_from is not None:
            fields["forked_from"] = {"session_id": self.forked_from[0], "seq": self.forked_from[1]}
        return orjson.dumps(fields) + b"\n"

    @classmethod
    def of_line(cls, line: bytes) -> Deletion | None:
        """The record a line holds, or None for a line that is not one."""
        try:
            fields = orjson.loads(line)
            origin = fields.get("forked_from")
            forked_from = None
            if isinstance(origin, dict) and type(origin.get("seq")) is int:
                forked_from = (str(origin["session_id"]), int(origin["seq"]))
            return cls(
                str(fields["session_id"]),
                str(fields["tenant"]),
                str(fields["deleted_by"]),
                str(fields["deleted_at"]),
                str(fields.get("cause", "request")),
                forked_from,
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None


def find_deletion(shard_dir: Path, session_id: str) -> Deletion | None:
    """The deletion record of ``session_id`` in the shard whose folder is ``shard_dir`` (None:
    not deleted). Reads the shard's file through (a reader's rare lookup: a deleted fork
    source). Raises OSError other than a missing file."""
    try:
        with open(os.path.join(shard_dir, DELETIONS_FILE), "rb") as handle:
            needle = f'"session_id":"{session_id}"'.encode()
            for line in handle:
                if needle in line and line.endswith(b"\n"):
                    found = Deletion.of_line(line)
                    if found is not None and found.session_id == session_id:
                        return found
    except FileNotFoundError:
        return None
    return None


def deletion_in(root: DataRoot, session_id: str) -> Deletion | None:
    """The deletion record of ``session_id`` in its shard of ``root`` (:func:`find_deletion`); None
    when it was not deleted, when its shard's records cannot be read, or for an id that names no
    session (a malformed ``forked_from``): a lineage walk ends there (shared.lineage)."""
    try:
        return find_deletion(root.shard_dir(root.shard_of(session_id)), session_id)
    except (OSError, ValueError, InvalidArgumentError):
        return None
