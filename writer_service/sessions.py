"""The writer's session life cycle: create, append, stop (SPEC §2).

:class:`SessionLedger` is the writer's one entry point below the gRPC layer. It
keeps, per open session, the next seq, the tool call ids already in the file and
whether the session is stopped, plus the session's :class:`SessionCommitter`.
Validation, seq assignment and queueing happen in the event loop without an
await between them, so requests to one session are strictly ordered and all or
nothing. A session not yet touched since start-up is loaded once from its file
with the shared bounded-memory rebuild (:func:`shared.rebuild_index.index_rebuild`),
never on the append path.

Stop follows SPEC §2.6 exactly: mark the session busy (later appends are refused
with ABORTED until it ends), drain its queue, read and rebuild the whole file on
an I/O thread with the same shared function the reader uses, digest it, then append
``agent_checkpoint`` and ``stop`` as one batch with one fsync. Resume and Fork
live in :mod:`writer_service.branching`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.errors import (
    CorruptSessionError,
    InvalidArgumentError,
    QueueFullError,
    RecordValidationError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStateError,
    storage_error,
)
from shared.layout import DELEGATION_ID_MAX_BYTES, DataRoot
from shared.naming import (
    build_file_name,
    new_session_id,
    parse_file_name,
    validate_agent_name,
    validate_session_id,
)
from shared.rebuild import Rebuild
from shared.rebuild_index import index_rebuild
from shared.records import (
    RecordType,
    call_ids_of,
    encode_line,
    format_timestamp,
    now_timestamp,
    parse_timestamp,
    validate_message,
)
from shared.stop_kinds import StopKind
from writer_service.branching import (
    ForkResult,
    RebuiltFacts,
    ResumeResult,
    fork_session,
    rebuilt_facts,
    refuse_damage,
    resume_session,
)
from writer_service.committer import CommitConfig, SessionCommitter, StorageHealth
from writer_service.files import create_file, create_marker
from writer_service.idempotency import RememberedAppend, RequestMemory, fingerprint
from writer_service.recovery import repair_torn_tail

log = logging.getLogger(__name__)

_MESSAGE = RecordType.MESSAGE.value
_COMPACTED = RecordType.COMPACTED.value

#: Longest tenant, model, cwd, originator and client_version (characters).
META_FIELD_MAX_CHARS = 4096
#: Longest stop reason and error message (characters): stop facts stay within one tail window.
STOP_TEXT_MAX_CHARS = 16 * 1024


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Writer settings. Sizes in bytes; ``max_queued_records`` per session."""

    data_dir: Path
    commit: CommitConfig = field(default_factory=CommitConfig)
    #: Below gRPC's default 4 MiB message size, so that any record replays to a default client.
    max_record_bytes: int = 3 * 1024 * 1024
    max_queued_records: int = 100_000
    io_threads: int = 4
    #: Session files kept open; idle ones beyond it are closed, least recently used first.
    max_open_sessions: int = 256


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What CreateSession asks for (strings; empty means absent)."""

    session_id: str = ""
    agent_name: str = ""
    parent_session_id: str = ""
    delegation_id: str = ""
    tenant: str = ""
    model: str = ""
    cwd: str = ""
    originator: str = ""
    client_version: str = ""
    created_at: str = ""


@dataclass(frozen=True, slots=True)
class StopResult:
    checkpoint_seq: int
    stop_seq: int
    digest: str
    message_count: int


@dataclass(slots=True)
class OpenSession:
    session_id: str
    path: Path
    next_seq: int
    call_ids: set[str]
    committer: SessionCommitter
    meta: dict[str, Any]
    stopped_kind: str | None = None
    #: "Stop" or "Resume" while one is in progress (appends meanwhile are refused: ABORTED, retryable).
    busy: str = ""


class SessionLedger:
    """Create, append to and stop sessions under one data root (single writer)."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.root = DataRoot(config.data_dir)
        self.root.ensure()
        self._executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="rollout-io")
        self._sessions: OrderedDict[str, OpenSession] = OrderedDict()
        self._loading: dict[str, asyncio.Future[OpenSession]] = {}
        self._requests = RequestMemory()
        self._creating: set[str] = set()
        self.storage_health = StorageHealth()

    # -- life cycle -----------------------------------------------------------------

    async def create_session(self, spec: SessionSpec) -> tuple[str, str]:
        """Write a new session's ``session_meta`` (seq 0), durable before returning.

        Returns (session_id, created_at). Raises FileNameError for a bad id or
        agent name, InvalidArgumentError for a bad created_at or an oversized
        field, SessionExistsError for a taken id, StorageWriteError when the file
        cannot be written.
        """
        session_id = validate_session_id(spec.session_id) if spec.session_id else new_session_id()
        validate_agent_name(spec.agent_name)
        if spec.parent_session_id:
            validate_session_id(spec.parent_session_id)
        if len(spec.delegation_id.encode()) > DELEGATION_ID_MAX_BYTES:
            raise InvalidArgumentError(
                "delegation_id", f"is longer than {DELEGATION_ID_MAX_BYTES} UTF-8 bytes"
            )
        for name in ("tenant", "model", "cwd", "originator", "client_version"):
            if len(getattr(spec, name)) > META_FIELD_MAX_CHARS:
                raise InvalidArgumentError(name, f"is longer than {META_FIELD_MAX_CHARS} characters")
        if spec.created_at:
            try:
                created = parse_timestamp(spec.created_at)
            except ValueError as exc:
                raise InvalidArgumentError("created_at", f"is not an RFC 3339 timestamp: {exc}") from exc
        else:
            created = datetime.now(UTC)
        if session_id in self._sessions or session_id in self._loading or session_id in self._creating:
            raise SessionExistsError(session_id)
        if spec.session_id:  # a new UUIDv7 cannot collide; a client's id may name an existing file
            try:
                self.root.locate(session_id)
            except SessionNotFoundError:
                pass
            else:
                raise SessionExistsError(session_id)
        self._creating.add(session_id)
        try:
            return await self._create(session_id, created, spec)
        finally:
            self._creating.discard(session_id)

    async def _create(self, session_id: str, created: datetime, spec: SessionSpec) -> tuple[str, str]:
        created_at = format_timestamp(created)
        name = build_file_name(created, session_id, spec.agent_name)
        meta: dict[str, Any] = {"session_id": session_id}
        for key in ("agent_name", "parent_session_id", "delegation_id"):
            if getattr(spec, key):
                meta[key] = getattr(spec, key)
        meta["tenant"] = spec.tenant or "default"
        for key in ("model", "cwd", "originator", "client_version"):
            if getattr(spec, key):
                meta[key] = getattr(spec, key)
        meta["created_at"] = created_at
        line = encode_line(0, now_timestamp(), RecordType.SESSION_META, meta)
        await self._publish(session_id, name, line, meta, next_seq=1, call_ids=set())
        return session_id, created_at

    async def _publish(
        self, session_id: str, name: str, body: bytes, meta: dict[str, Any], next_seq: int, call_ids: set[str]
    ) -> None:
        """Create a new session file atomically (its delegation marker first) and open it."""
        loop = asyncio.get_running_loop()
        if meta.get("parent_session_id"):
            marker = self.root.delegation_marker(
                str(meta["parent_session_id"]), str(meta.get("delegation_id", "")), session_id
            )
            await loop.run_in_executor(self._executor, create_marker, marker)
        path = self.root.sessions_dir / name
        fd = await loop.run_in_executor(self._executor, create_file, path, body, session_id)
        self.root.register(parse_file_name(name), name)
        self._sessions[session_id] = OpenSession(
            session_id, path, next_seq, call_ids, self._committer(session_id, fd, len(body)), meta
        )
        self._close_idle()

    def _close_idle(self) -> None:
        """Close the least recently used idle session files beyond ``max_open_sessions``."""
        excess = len(self._sessions) - self.config.max_open_sessions
        if excess <= 0:
            return
        for session_id, state in list(self._sessions.items()):
            if excess <= 0:
                break
            if state.committer.idle and not state.busy:
                del self._sessions[session_id]
                state.committer.close()
                excess -= 1

    def _committer(self, session_id: str, fd: int, size: int) -> SessionCommitter:
        return SessionCommitter(
            fd,
            size,
            self.config.commit,
            self._executor,
            on_failure=lambda: self._forget(session_id),
            label=session_id,
            health=self.storage_health,
        )

    def _forget(self, session_id: str) -> None:
        """Drop a session's in-memory view after a failed batch; the next call reloads it."""
        state = self._sessions.pop(session_id, None)
        if state is not None:
            state.committer.close()

    async def _open(self, session_id: str) -> OpenSession:
        state = self._sessions.get(session_id)
        if state is not None:
            self._sessions.move_to_end(session_id)
            return state
        pending = self._loading.get(session_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[OpenSession] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            _, path = self.root.locate(session_id)
            fd, found, stopped = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._load, session_id, path
            )
            state = OpenSession(
                session_id,
                path,
                found.last_seq + 1,
                found.call_ids,
                self._committer(session_id, fd, found.committed_bytes),
                found.session_meta or {},
                stopped,
            )
            self._sessions[session_id] = state
            self._close_idle()
            future.set_result(state)
            return state
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._loading[session_id]

    @staticmethod
    def _load(session_id: str, path: Path) -> tuple[int, Rebuild, str | None]:
        """Repair the tail, index the file once (bounded memory), open it (I/O thread).

        Returns (fd, what the rebuild found, the stop kind if stopped else None).
        """
        try:
            repair_torn_tail(path)
            found = index_rebuild(path)
        except FileNotFoundError as exc:  # moved aside by repair: it never held a whole session_meta
            raise SessionNotFoundError(session_id) from exc
        except OSError as exc:
            raise storage_error(exc, "read", f"opening {path.name}") from exc
        if found.session_meta is None:
            raise CorruptSessionError(
                f"session file {path.name} does not start with a session_meta record; it cannot be"
                " appended to (see rollout verify)"
            )
        stopped: str | None = None
        if found.last_record_type == RecordType.STOP and found.last_stop is not None:
            stopped = str(found.last_stop.get("stop_kind", ""))
        elif found.last_record_type == RecordType.AGENT_CHECKPOINT and found.last_checkpoint:
            stopped = found.last_checkpoint.stop_kind
        try:
            return os.open(path, os.O_WRONLY | os.O_APPEND), found, stopped
        except OSError as exc:
            raise storage_error(exc, "open", f"opening {path.name}") from exc

    # -- appends --------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        records: list[list[tuple[RecordType, dict[str, Any]]]],
        expected_next_seq: int | None = None,
    ) -> tuple[list[int], int]:
        """Append one request's records, all or nothing; returns (seq per record, next seq).

        ``records`` holds, per request record, the payloads it becomes (a message
        with N reasoning blocks becomes N + 1). Raises SessionNotFoundError, SessionStateError
        (stopped, seq mismatch), SessionBusyError (a Stop or Resume in progress),
        RecordValidationError (index and field named, nothing written),
        QueueFullError, StorageWriteError.
        """
        seqs, next_seq, durable = await self.enqueue(session_id, records, expected_next_seq)
        await durable
        return seqs, next_seq

    async def enqueue(
        self,
        session_id: str,
        records: list[list[tuple[RecordType, dict[str, Any]]]],
        expected_next_seq: int | None = None,
        request_id: str = "",
    ) -> tuple[list[int], int, asyncio.Future[None]]:
        """Validate, assign seqs and queue; returns (seqs, next seq, durable future).

        The first half of :meth:`append`, for pipelined streams: once this returns,
        the request holds its place in the session's order; await the future for
        durability (it raises StorageWriteError on a failed batch). A ``request_id``
        seen before (writer_service.idempotency) returns the first answer and
        queues nothing.
        """
        state = await self._open(session_id)
        print_ = b""
        if request_id:
            print_ = fingerprint(records)
            remembered = self._requests.recall(session_id, request_id, print_)
            if remembered is not None:
                return remembered.seqs, remembered.next_seq, remembered.durable
        self._check_appendable(state)
        if expected_next_seq is not None and expected_next_seq != state.next_seq:
            raise SessionStateError(
                f"expected_next_seq is {expected_next_seq} but the session's next seq is {state.next_seq}",
                subject=f"session/{session_id}",
                precondition=f"next_seq={state.next_seq}",
            )
        lines, seqs, view = self._encode(state, records)
        count = len(lines)
        if state.committer.queued_records + count > self.config.max_queued_records:
            raise QueueFullError(
                f"session {session_id} has {state.committer.queued_records} records queued"
                f" (limit {self.config.max_queued_records}); retry with backoff"
            )
        state.next_seq += count
        state.call_ids = view.committed()
        durable = state.committer.submit(b"".join(lines), count)
        if request_id:
            self._requests.remember(
                session_id, request_id, RememberedAppend(print_, seqs, state.next_seq, durable)
            )
        return seqs, state.next_seq, durable

    def _check_appendable(self, state: OpenSession) -> None:
        if state.stopped_kind is not None:
            raise SessionStateError(
                f"session is stopped ({state.stopped_kind or 'no stop kind'}); call Resume",
                subject=f"session/{state.session_id}",
                precondition="session is open",
            )
        self._refuse_if_busy(state)

    @staticmethod
    def _refuse_if_busy(state: OpenSession) -> None:
        """Refuse (SessionBusyError: ABORTED, retryable) while a Stop or Resume of the session runs."""
        if state.busy:
            raise SessionBusyError(f"a {state.busy} of this session is in progress; retry when it ends")

    def _encode(
        self, state: OpenSession, records: list[list[tuple[RecordType, dict[str, Any]]]]
    ) -> tuple[list[bytes], list[int], _CallView]:
        """Validate and encode one request (no state change); see :meth:`append`.

        Tool outputs must answer a call of the session's current view (as the
        shared rebuild pairs them: a compaction resets the view to its replacement
        history) or one earlier in the request.
        """
        ts = now_timestamp()
        seq = state.next_seq
        limit = self.config.max_record_bytes
        view = _CallView(state.call_ids)
        lines: list[bytes] = []
        seqs: list[int] = []
        for index, payloads in enumerate(records):
            for record_type, payload in payloads:
                if record_type == _MESSAGE:
                    validate_message(payload, index, view)
                    if "tool_calls" in payload:
                        view.add(call_ids_of(payload))
                elif record_type == _COMPACTED:
                    view.reset()
                    for position, message in enumerate(payload.get("replacement_history", ())):
                        validate_message(message, index, view, f"compacted.replacement_history[{position}]")
                        view.add(call_ids_of(message))
                try:
                    line = encode_line(seq, ts, record_type, payload)
                except TypeError as exc:
                    raise RecordValidationError(index, str(record_type), f"cannot be stored: {exc}") from exc
                if len(line) > limit:
                    raise RecordValidationError(
                        index,
                        str(record_type),
                        f"record is {len(line)} bytes, over the limit of {limit} bytes; it is"
                        " rejected, never truncated",
                    )
                lines.append(line)
                seq += 1
            seqs.append(seq - 1)
        return lines, seqs, view

    # -- stop -----------------------------------------------------------------------

    async def stop(
        self, session_id: str, kind: StopKind, reason: str, error: dict[str, str] | None = None
    ) -> StopResult:
        """Drain, rebuild the whole file, append checkpoint and stop, fsync (SPEC §2.6).

        ``reason`` is at most 16 KiB characters, the error's message too. Raises
        InvalidArgumentError (an oversized reason), SessionNotFoundError,
        SessionStateError (already stopped), SessionBusyError (a Stop or Resume in
        progress), CorruptSessionError (the file is damaged: no checkpoint is
        written over damage), StorageWriteError.
        """
        if len(reason) > STOP_TEXT_MAX_CHARS:
            raise InvalidArgumentError("reason", f"is longer than {STOP_TEXT_MAX_CHARS} characters")
        if error and any(len(value) > STOP_TEXT_MAX_CHARS for value in error.values()):
            raise InvalidArgumentError(
                "error", f"message and category are at most {STOP_TEXT_MAX_CHARS} characters"
            )
        state = await self._open(session_id)
        self._check_appendable(state)
        state.busy = "Stop"
        try:
            found = await self._exclusive_rebuild(state, True)
            refuse_damage(found.damage, state.path.name, "stop")
            checkpoint_seq = state.next_seq
            message_digest = found.digest
            ts = now_timestamp()
            checkpoint = {
                "digest": message_digest,
                "message_count": found.message_count,
                "covers_seq": checkpoint_seq - 1,
                "stop_kind": str(kind),
            }
            stop: dict[str, Any] = {"stop_kind": str(kind), "reason": reason}
            if error:
                stop["error"] = error
            stop["checkpoint_seq"] = checkpoint_seq
            lines = encode_line(checkpoint_seq, ts, RecordType.AGENT_CHECKPOINT, checkpoint)
            lines += encode_line(checkpoint_seq + 1, ts, RecordType.STOP, stop)
            state.next_seq += 2
            # Stopped from the moment the lines are queued: a caller cancelled while they
            # are written must not leave the session open behind its stop record. A failed
            # write drops this in-memory view (the committer's on_failure), so it cannot lie.
            durable = state.committer.submit(lines, 2)
            state.stopped_kind = str(kind)
        finally:
            state.busy = ""
        await durable
        log.info(
            "stopped %s (%s) at seq %d: %d messages, %s",
            session_id,
            kind,
            checkpoint_seq + 1,
            found.message_count,
            message_digest,
        )
        return StopResult(checkpoint_seq, checkpoint_seq + 1, message_digest, found.message_count)

    async def _exclusive_rebuild(self, state: OpenSession, with_digest: bool) -> RebuiltFacts:
        """Drain the session's queue, then read and rebuild its whole file on an I/O thread (SPEC §2.7).

        Raises SessionStateError when a write failed while draining, OSError when
        the file cannot be read.
        """
        await state.committer.drain()
        if self._sessions.get(state.session_id) is not state:
            raise SessionStateError(
                "a write failed while draining; nothing was done, retry",
                subject=f"session/{state.session_id}",
                precondition="storage healthy",
            )
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, _rebuild_file, state.path, with_digest
        )

    async def resume(self, session_id: str, force: bool = False) -> ResumeResult:
        """Re-open a session for appending (SPEC §2.8); see :func:`writer_service.branching.resume_session`."""
        return await resume_session(self, session_id, force)

    async def fork(self, source_id: str, at_seq: int | None, before_user_message: int | None) -> ForkResult:
        """A new session from the source's records up to a fork point (SPEC §2.8); see
        :func:`writer_service.branching.fork_session`."""
        return await fork_session(self, source_id, at_seq, before_user_message)

    async def close(self) -> None:
        """Drain every session's queue, close files and the I/O threads."""
        for state in list(self._sessions.values()):
            await state.committer.drain()
            state.committer.close()
        self._sessions.clear()
        self._executor.shutdown(wait=True)


class _CallView:
    """The tool call ids an output may answer while one request is validated.

    Starts from the session's current view without copying it; a compaction in
    the request resets it. :meth:`committed` is the view after the request.
    """

    __slots__ = ("added", "base", "reset_done")

    def __init__(self, base: set[str]) -> None:
        self.base = base
        self.added: set[str] = set()
        self.reset_done = False

    def __contains__(self, item: object) -> bool:
        return item in self.added or (not self.reset_done and item in self.base)

    def add(self, call_ids: list[str]) -> None:
        self.added.update(call_ids)

    def reset(self) -> None:
        self.reset_done = True
        self.added = set()

    def committed(self) -> set[str]:
        if self.reset_done:
            return set(self.added)
        self.base.update(self.added)
        return self.base


def _rebuild_file(path: Path, with_digest: bool) -> RebuiltFacts:
    """Read ``path`` whole and return its rebuilt facts (I/O thread); raises OSError when unreadable."""
    return rebuilt_facts(path.read_bytes(), with_digest)
