"""ImportSessions: whole sessions recorded elsewhere, written all or nothing (writer.proto).

A :class:`SessionImport` is one ImportSessions stream. Each session of the stream
is checked as CreateSession checks it (:meth:`SessionLedger.prepare_session`; a
child may name a parent staged earlier in the same stream), its records as Append
checks them (:func:`writer_service.open_session.encode_records`: every validation
of docs/spec.md §2.3, source times allowed), and its lines are written to a hidden staging
file beside the session files (``.<name>.tmp-<random>``, the shape start-up removes:
:func:`writer_service.atomic_files.remove_stale_temporaries`). The stop closes a session
as Stop does (docs/spec.md §2.6): the staging file is rebuilt whole with the shared rules,
the checkpoint digests it, checkpoint and stop are appended, the file is fsynced.

Only when the stream has ended cleanly are the sessions made visible, parents
first: each child's delegation marker, then a hard link of each staging file under
its real name (``link`` never overwrites; staging files are made in their session's
shard folder), one fsync of each folder linked into, and the index entries. Every
session's shard must be this writer's before the links, and still be so once they are
durable (writer_service.ownership), or the import is refused (UNAVAILABLE, retryable). A refusal, a cancelled stream or a crash before that point leaves no
session behind (staging files are removed; a crash leaves only hidden files that
the next start removes). A session whose id the ledger already holds is skipped:
its records are read and dropped, and the answer says ``already_present``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from serving.tenancy import current_caller
from shared.errors import (
    InvalidArgumentError,
    LedgerError,
    NotOwnerError,
    RecordValidationError,
    SessionExistsError,
    storage_error,
)
from shared.records import RecordType, encode_line, now_timestamp
from shared.session_meta import SessionSpec
from shared.stop_kinds import StopKind
from writer_service.atomic_files import (
    create_marker,
    create_temporary,
    fsync_dir,
    make_durable_dirs,
    write_all,
)
from writer_service.open_session import RecordTimes, RequestRecords, encode_records
from writer_service.rebuilt_facts import file_facts, refuse_damage
from writer_service.session_index import IndexEntry
from writer_service.sessions import SessionLedger
from writer_service.stopping import check_stop_text, stop_lines

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StagedSession:
    """One session of an import: where its lines go, and what it became."""

    position: int
    session_id: str
    name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    staging: Path | None = None
    fd: int = -1
    next_seq: int = 0
    calls: set[str] = field(default_factory=set)
    #: AppendRecords received so far (a refusal names the record by this count).
    received: int = 0
    #: The ledger already held this id: its records are dropped.
    already_present: bool = False
    stopped_kind: str = ""
    message_count: int = 0
    digest: str = ""
    closed: bool = False


@dataclass(frozen=True, slots=True)
class ImportedResult:
    """What one session of the stream became (the answer's ImportedSessionResult)."""

    session_id: str
    already_present: bool
    records: int
    message_count: int
    digest: str


_T = TypeVar("_T")


class SessionImport:
    """One ImportSessions stream over a ledger; see the module docstring.

    Call :meth:`create`, :meth:`append` and :meth:`stop` in stream order, then
    :meth:`commit`; call :meth:`abort` (always safe) when the stream fails. Each
    step raises InvalidArgumentError whose field starts with ``sessions[k]``, so a
    client can name the session, record and field it sent.
    """

    def __init__(self, ledger: SessionLedger) -> None:
        self._ledger = ledger
        self._sessions: list[StagedSession] = []
        self._ids: set[str] = set()
        self._finished = False
        #: File work started and not yet done: a cancelled call's clean-up waits for it, so
        #: that a staging file opened after the cancel is still removed.
        self._in_flight: set[asyncio.Future[Any]] = set()

    def _start_io(self, function: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        future = asyncio.ensure_future(self._ledger.run_io(function, *args))
        self._in_flight.add(future)
        future.add_done_callback(self._in_flight.discard)
        return future

    async def _io(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run ``function`` on an I/O thread; a cancel of the caller does not stop it (see
        ``_in_flight``)."""
        return await asyncio.shield(self._start_io(function, *args))

    @property
    def _open(self) -> StagedSession | None:
        last = self._sessions[-1] if self._sessions else None
        return last if last is not None and not last.closed else None

    def _where(self, position: int) -> str:
        return f"sessions[{position}]"

    async def create(self, spec: SessionSpec) -> None:
        """Open the next session (the previous one must be stopped)."""
        position = len(self._sessions)
        if self._open is not None:
            raise InvalidArgumentError(
                f"{self._where(position - 1)}.stop", "a session's stop must come before the next create"
            )
        if not spec.session_id:
            raise InvalidArgumentError(
                f"{self._where(position)}.session_id", "is required: an import keeps ids stable"
            )
        if spec.session_id in self._ids:
            raise SessionExistsError(spec.session_id)
        staged_ids = {staged.session_id for staged in self._sessions if not staged.already_present}
        try:
            session_id, name, meta = self._ledger.prepare_session(spec, staged=staged_ids)
        except SessionExistsError:
            if current_caller().tenant is not None and self._ledger.visible_entry(spec.session_id) is None:
                raise  # held by another tenant (ids are global): refused, never reported as present
            self._ids.add(spec.session_id)
            self._sessions.append(StagedSession(position, spec.session_id, already_present=True))
            return
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{self._where(position)}.{exc.field}", exc.description) from exc
        staged = StagedSession(position, session_id, name, meta, next_seq=1)
        self._ids.add(session_id)
        self._ledger.reserve(session_id)
        self._sessions.append(staged)
        line = encode_line(0, now_timestamp(), RecordType.SESSION_META, meta)
        opened = self._start_io(_open_staging, self._ledger.root.session_path(session_id, name))

        def record_staging(done: asyncio.Future[tuple[Path, int]]) -> None:
            if not done.cancelled() and done.exception() is None:
                staged.staging, staged.fd = done.result()  # even when this call was cancelled

        opened.add_done_callback(record_staging)
        await asyncio.shield(opened)
        await self._io(_write_staged, staged.fd, line)

    async def append(self, records: RequestRecords, times: RecordTimes) -> None:
        """Validate and stage records of the open session (nothing of a refused message is kept)."""
        staged = self._open
        if staged is None:
            raise InvalidArgumentError(
                f"{self._where(len(self._sessions))}.create", "records came before their session's create"
            )
        if staged.already_present:
            return
        try:
            lines, _, view = encode_records(
                records, staged.next_seq, staged.calls, self._ledger.config.max_record_bytes, times
            )
        except RecordValidationError as exc:
            raise self.refusal(exc) from exc
        staged.calls = view.committed()
        staged.next_seq += len(lines)
        staged.received += len(records)
        await self._io(_write_staged, staged.fd, b"".join(lines))

    def named(self, error: InvalidArgumentError, opening: bool = False) -> InvalidArgumentError:
        """A refused field of a create, records or stop message, named in the stream: field
        ``sessions[k].<field>``, ``k`` the session being opened (``opening``) or the open one."""
        position = len(self._sessions) if opening or not self._sessions else self._sessions[-1].position
        return InvalidArgumentError(f"{self._where(position)}.{error.field}", error.description)

    def refusal(self, error: RecordValidationError) -> InvalidArgumentError:
        """A record refused in the open session's current message, named over the whole stream:
        field ``sessions[k].records[i].<field>``, ``i`` counted over all of the session's records."""
        staged = self._sessions[-1] if self._sessions else None
        position = staged.position if staged is not None else 0
        index = (staged.received if staged is not None else 0) + error.index
        session_id = staged.session_id if staged is not None else ""
        return InvalidArgumentError(
            f"{self._where(position)}.records[{index}].{error.field}",
            f"(record {index} of session {session_id}) {error.description}",
        )

    async def stop(self, kind: StopKind, reason: str, error: dict[str, str] | None, ts: str) -> None:
        """Close the open session as Stop does: rebuild the staged file, checkpoint, stop, fsync."""
        staged = self._open
        if staged is None:
            raise InvalidArgumentError(
                f"{self._where(len(self._sessions))}.create", "a stop came before its session's create"
            )
        staged.closed = True
        if staged.already_present:
            return
        check_stop_text(reason, error, f"{self._where(staged.position)}.")
        assert staged.staging is not None
        found = await self._io(file_facts, staged.staging, True)
        refuse_damage(found.damage, staged.name, "import")
        checkpoint_seq = staged.next_seq
        lines = stop_lines(checkpoint_seq, ts or now_timestamp(), found, kind, reason, error)
        await self._io(_finish_staging, staged.fd, lines)
        staged.next_seq += 2
        staged.stopped_kind = str(kind)
        staged.message_count = found.message_count
        staged.digest = found.digest

    async def commit(self) -> list[ImportedResult]:
        """Make every staged session visible, parents first; see the module docstring.

        Raises InvalidArgumentError when the stream ended inside a session,
        SessionExistsError when an id was taken meanwhile, StorageWriteError.
        """
        if self._open is not None:
            raise InvalidArgumentError(
                f"{self._where(len(self._sessions) - 1)}.stop", "the stream ended before this session's stop"
            )
        staged = [session for session in self._sessions if not session.already_present]
        # Publishing and adopting are one task that a cancel of the call does not stop: once the
        # files are linked, the writer's index must know them (abort() waits for it).
        publishing = asyncio.ensure_future(self._publish_and_adopt(staged))
        self._in_flight.add(publishing)
        publishing.add_done_callback(self._in_flight.discard)
        await asyncio.shield(publishing)
        log.info("imported %d sessions (%d already present)", len(staged), len(self._sessions) - len(staged))
        return [
            ImportedResult(
                s.session_id,
                s.already_present,
                0 if s.already_present else s.next_seq,
                s.message_count,
                s.digest,
            )
            for s in self._sessions
        ]

    async def _publish_and_adopt(self, staged: list[StagedSession]) -> None:
        committer, root = self._ledger.committer, self._ledger.root
        epochs = {shard: committer.epoch_of(shard) for shard in {root.shard_of(s.session_id) for s in staged}}
        await self._ledger.run_io(self._publish, staged)
        durable_at = time.monotonic()
        self._finished = True
        self.close_files()
        for session in staged:
            self._ledger.adopt(
                session.session_id, IndexEntry(session.name, session.next_seq, session.stopped_kind)
            )
        for shard, epoch in epochs.items():
            if not committer.may_acknowledge(shard, epoch, durable_at):
                raise NotOwnerError(
                    f"this writer's ownership of shard {shard} (epoch {epoch}) ended before the imported"
                    " sessions were durable; the import was not acknowledged; retry (sessions already"
                    " in the ledger are answered already_present)",
                    shard=shard,
                    epoch=epoch,
                    owner=committer.ownership.owner_of(shard),
                )

    def _publish(self, staged: list[StagedSession]) -> None:
        """Markers, then links under the real names, then one folder fsync (I/O thread)."""
        root = self._ledger.root
        linked: list[Path] = []
        try:
            for session in staged:
                parent = session.meta.get("parent_session_id")
                if parent:
                    marker = root.delegation_marker(
                        str(parent), str(session.meta.get("delegation_id", "")), session.session_id
                    )
                    create_marker(marker)
            for session in staged:
                assert session.staging is not None
                target = root.session_path(session.session_id, session.name)
                try:
                    os.link(session.staging, target)
                except FileExistsError as exc:
                    raise SessionExistsError(session.session_id) from exc
                linked.append(target)
            for folder in dict.fromkeys(target.parent for target in linked):
                fsync_dir(folder)
        except OSError as exc:
            for target in linked:
                target.unlink(missing_ok=True)
            raise storage_error(exc, "link", "publishing imported sessions") from exc
        except LedgerError:
            for target in linked:
                target.unlink(missing_ok=True)
            raise
        finally:
            for session in staged:
                assert session.staging is not None
                session.staging.unlink(missing_ok=True)

    async def abort(self) -> None:
        """Remove every staging file of an import that did not commit (safe to call twice).

        Work a cancel left running (a staging file being opened, a commit publishing) is
        waited for first: a staging file is then known, and a published session is in the
        index before its id's reservation is released.
        """
        if self._in_flight:
            await asyncio.shield(asyncio.gather(*self._in_flight, return_exceptions=True))
        for session in self._sessions:
            if not session.already_present:
                self._ledger.release(session.session_id)
        if self._finished:
            return
        self._finished = True
        staged = [s for s in self._sessions if s.staging is not None]
        # Shielded: a call cancelled (again) while its clean-up waits must not leave the removal
        # unstarted; it then finishes on its I/O thread after the call is gone.
        await asyncio.shield(self._ledger.run_io(_remove_staging, staged))

    def close_files(self) -> None:
        for session in self._sessions:
            if session.fd >= 0:
                os.close(session.fd)
                session.fd = -1


def _write_staged(fd: int, data: bytes) -> None:
    """Append ``data`` to a staging file (I/O thread); StorageWriteError names the errno."""
    try:
        write_all(fd, data)
    except OSError as exc:
        raise storage_error(exc, "write", "staging an imported session") from exc


def _open_staging(path: Path) -> tuple[Path, int]:
    """Create a hidden staging file beside the session file ``path`` will be (I/O thread)."""
    try:
        make_durable_dirs(path.parent)
        return create_temporary(path, os.O_APPEND)
    except OSError as exc:
        raise storage_error(exc, "write", f"staging imported session {path.name}") from exc


def _finish_staging(fd: int, lines: bytes) -> None:
    """Append the checkpoint and stop lines and fsync the staging file (I/O thread)."""
    try:
        write_all(fd, lines)
        os.fsync(fd)
    except OSError as exc:
        raise storage_error(exc, "fsync", "finishing an imported session") from exc


def _remove_staging(sessions: list[StagedSession]) -> None:
    for session in sessions:
        if session.fd >= 0:
            os.close(session.fd)
            session.fd = -1
        if session.staging is not None:
            session.staging.unlink(missing_ok=True)
