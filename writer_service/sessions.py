"""The writer's session ledger: create, append, stop; resume and fork through it (docs/spec.md §2).

:class:`SessionLedger` is the writer's one entry point below the gRPC layer. It
holds the :class:`~writer_service.session_index.SessionIndex` of every session
(next seq, stop state; built at start-up from names and tails), the sessions it
has open (:class:`~writer_service.open_session.OpenSession`, at most
``max_open_sessions`` file descriptors: idle ones are closed, least recently used
first, their state saved: writer_service.session_cache), the request-id memory, and the
:class:`~writer_service.committer.GroupCommitter` that makes appends durable in
rounds. An unknown id is NOT_FOUND from memory; reopening a session reads its saved
state and the lines after it (writer_service.saved_state), never the whole file.

Validation, seq assignment and queueing happen in the event loop without an await
between them, so requests to one session are strictly ordered and all or nothing.

Stop (writer_service.stopping), Resume and Fork (writer_service.resume_fork) use the
small public API below: :meth:`SessionLedger.open_session`,
:meth:`SessionLedger.rebuild_exclusive`, :meth:`SessionLedger.drained_path`,
:meth:`SessionLedger.publish` and :meth:`SessionLedger.run_io`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Container, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from serving.tenancy import caller_tenant, check_visible, current_caller, keyed_session_id
from shared.deletions import Deletion
from shared.errors import (
    InvalidArgumentError,
    LedgerError,
    NotOwnerError,
    QueueFullError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStateError,
    SessionUnavailableError,
    StorageWriteError,
    storage_error,
)
from shared.layout import DELEGATION_ID_MAX_BYTES, DataRoot
from shared.naming import (
    build_file_name,
    is_session_id,
    new_session_id,
    validate_agent_name,
    validate_session_id,
)
from shared.reasons import next_seq_precondition, session_subject
from shared.records import (
    DEFAULT_MAX_RECORD_BYTES,
    RecordType,
    clip,
    encode_line,
    format_timestamp,
    now_timestamp,
    parse_timestamp,
)
from shared.session_meta import (
    TEXT_FIELDS,
    SessionSpec,
    resolve_role,
    session_meta_payload,
    tenant_of,
)
from shared.shards import DEFAULT_SHARDS
from shared.stop_kinds import StopKind
from writer_service import metrics
from writer_service.atomic_files import create_file, create_marker
from writer_service.committer import CommitConfig, GroupCommitter, SessionLog, StorageHealth
from writer_service.deletion import remove_session
from writer_service.heap_trim import HeapTrimmer
from writer_service.idempotency import RememberedAppend, RequestMemory, find_request, fingerprint, reused_id
from writer_service.open_session import (
    OpenSession,
    RecordTimes,
    RequestRecords,
    check_retraction,
)
from writer_service.ownership import EmbeddedOwnership, Ownership
from writer_service.rebuilt_facts import RebuiltFacts, file_facts
from writer_service.refusal_pacing import DEFAULT_RATE
from writer_service.resume_fork import ForkResult, ResumeResult, fork_session, resume_session
from writer_service.retractions import referenced_seqs, resolve_references, resolve_retractions
from writer_service.saved_state import SAVE_EVERY_BYTES
from writer_service.session_cache import SessionCache, load_session
from writer_service.session_index import IndexEntry, SessionIndex, build_index, index_shard
from writer_service.stopping import StopResult, stop_session
from writer_service.tenants import SessionTenants

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Longest tenant, model, cwd, originator and client_version (characters).
META_FIELD_MAX_CHARS = 4096
#: New ids drawn per shard of the root before a writer owning none of theirs gives up
#: (:meth:`SessionLedger.owned_session_id`): owning one shard of N, all draws miss with
#: probability (1 - 1/N)^(16 N) < e^-16.
ID_DRAWS_PER_SHARD = 16


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Writer settings. Sizes in bytes; ``max_queued_records`` per session."""

    data_dir: Path
    commit: CommitConfig = field(default_factory=CommitConfig)
    #: Largest stored line (bytes); the writer's gRPC request limit follows it (see server.request_limit).
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_queued_records: int = 100_000
    io_threads: int = 4
    #: Session files kept open; idle ones beyond it are closed, least recently used first.
    max_open_sessions: int = 256
    #: Appends to unknown ids answered per second per peer once a burst is spent (0: no pacing;
    #: writer_service.refusal_pacing).
    unknown_id_rate: float = DEFAULT_RATE
    #: Seconds between two background attempts at the repairs that failed (writer_service.recovery).
    repair_retry_seconds: float = 5.0
    #: Shards of a data root this writer creates (shared.shards); an existing root keeps its own.
    shards: int = DEFAULT_SHARDS
    #: Delete stopped sessions last written more than this many days ago (None: keep every
    #: session; writer_service.retention), checked every ``retention_interval_seconds``.
    retain_stopped_days: float | None = None
    retention_interval_seconds: float = 3600.0
    #: A static shard map (writer_service.ownership.StaticOwnership; a testing option): this writer
    #: owns the shards it gives its address, beside other writers on the same root. None: every shard.
    static_shard_map: Path | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """A deleted session: when (RFC 3339), and whether an earlier call had deleted it already."""

    session_id: str
    deleted_at: str
    already_deleted: bool = False


class SessionLedger:
    """Create, append to and stop sessions under one data root (single writer).

    ``index``: the start-up index (:func:`writer_service.session_index.build_index`,
    which also repairs torn tails); built here, blocking, when not given. ``ownership``:
    which shards it may write and acknowledge (writer_service.ownership; every shard
    when not given). The data root is created if new (shared.layout).
    """

    def __init__(
        self, config: WriterConfig, index: SessionIndex | None = None, ownership: Ownership | None = None
    ) -> None:
        self.config = config
        self.root = DataRoot(config.data_dir)
        self.root.create(config.shards)
        self.ownership: Ownership = ownership if ownership is not None else EmbeddedOwnership()
        self.index = index if index is not None else build_index(self.root)
        self._executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="rollout-io")
        self.cache = SessionCache(self.root, self._executor, config.max_open_sessions)
        #: The open sessions (the cache's own mapping, least recently used first).
        self._sessions = self.cache.sessions
        self._loading: dict[str, asyncio.Future[OpenSession]] = {}
        self._requests = RequestMemory(on_forget=self._request_forgotten)
        self._creating: set[str] = set()
        #: Sessions being deleted: opening one is refused (SessionBusyError) until it is gone.
        self._deleting: set[str] = set()
        #: Sessions whose file a Fork is reading, with how many are (see :meth:`holding`); a
        #: delete waits for them before its file goes.
        self._holds: dict[str, int] = {}
        self._unheld: dict[str, asyncio.Event] = {}
        self.storage_health = StorageHealth()
        self._group: GroupCommitter | None = None
        #: Returns memory to the OS after large requests and whole-file work (writer_service.heap_trim).
        self.heap_trimmer = HeapTrimmer(self._executor)
        #: Each session's tenant, read when an authenticated caller first names it (serving.tenancy).
        self.tenants = SessionTenants(self.root)
        metrics.watch_sessions(self)

    @property
    def open_sessions(self) -> int:
        """Session files held open now."""
        return len(self._sessions)

    @property
    def committer(self) -> GroupCommitter:
        """The durability rounds of every session (created in the event loop on first use)."""
        if self._group is None:
            self._group = GroupCommitter(self.config.commit, self.storage_health, self.ownership)
        return self._group

    async def run_io(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking function on the writer's I/O threads."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    # -- life cycle -----------------------------------------------------------------

    async def create_session(self, spec: SessionSpec) -> tuple[str, str]:
        """Write a new session's ``session_meta`` (seq 0), durable before returning.

        Returns (session_id, created_at). Raises FileNameError for a bad id or
        agent name, InvalidArgumentError for a bad created_at, an oversized field,
        a role that its delegation fields contradict (shared.session_meta.resolve_role)
        or a parent that is not in the ledger, SessionExistsError for a taken id,
        StorageWriteError when the file cannot be written.
        """
        session_id, name, meta = self.prepare_session(spec)
        self._creating.add(session_id)
        try:
            line = encode_line(0, now_timestamp(), RecordType.SESSION_META, meta)
            await self.publish(session_id, name, line, meta, next_seq=1, calls=set())
            return session_id, str(meta["created_at"])
        finally:
            self._creating.discard(session_id)

    def prepare_session(
        self, spec: SessionSpec, staged: Container[str] = ()
    ) -> tuple[str, str, dict[str, Any]]:
        """Check a new session (see :meth:`create_session`): (session id, file name, session_meta payload).

        ``staged`` holds ids created earlier in the same import (a child may name one
        as its parent). Writes nothing.
        """
        session_id = validate_session_id(spec.session_id) if spec.session_id else ""
        validate_agent_name(spec.agent_name)
        role = resolve_role(spec)
        spec = replace(spec, tenant=caller_tenant(spec.tenant))
        if spec.session_key:
            keyed = keyed_session_id(
                spec.tenant, spec.session_key, shard_of=self.root.shard_of, deleted=self.was_deleted
            )
            if spec.session_id and spec.session_id != keyed:
                if self.was_deleted(spec.session_id):  # an earlier id of the key (docs/deletion.md §2.2)
                    raise SessionExistsError(spec.session_id, deleted=True)
                raise InvalidArgumentError(
                    "session_id",
                    f"is not the id session_key {clip(spec.session_key)!r} names in this tenant ({keyed});"
                    " leave it empty",
                )
            session_id = keyed
        if session_id:
            self.check_owner(session_id)
        else:
            session_id = self.owned_session_id()
        if spec.parent_session_id:
            validate_session_id(spec.parent_session_id, "parent_session_id")
            if not self._known_parent(spec.parent_session_id) and spec.parent_session_id not in staged:
                raise InvalidArgumentError(
                    "parent_session_id", f"names no session in the ledger ({spec.parent_session_id})"
                )  # the id is a validated UUID: quoted whole
        if len(spec.delegation_id.encode()) > DELEGATION_ID_MAX_BYTES:
            raise InvalidArgumentError(
                "delegation_id", f"is longer than {DELEGATION_ID_MAX_BYTES} UTF-8 bytes"
            )
        for key in TEXT_FIELDS:
            if len(getattr(spec, key)) > META_FIELD_MAX_CHARS:
                raise InvalidArgumentError(key, f"is longer than {META_FIELD_MAX_CHARS} characters")
        if spec.created_at:
            try:
                created = parse_timestamp(spec.created_at)
            except ValueError as exc:
                raise InvalidArgumentError("created_at", str(exc)) from exc
        else:
            created = datetime.now(UTC)
        # Session ids are global: an id taken in any tenant is taken (ALREADY_EXISTS says no more).
        if self.taken(session_id):
            raise SessionExistsError(session_id, deleted=session_id in self.index.tombstones)
        meta = session_meta_payload(spec, session_id, role, format_timestamp(created))
        return session_id, build_file_name(created, session_id, spec.agent_name), meta

    def check_owner(self, session_id: str) -> None:
        """Raise NotOwnerError (UNAVAILABLE, naming the owner this writer knows) when the shard of
        ``session_id`` (a well-formed id) is not this writer's: the redirect of docs/cluster.md §4."""
        shard = self.root.shard_of(session_id)
        if self.ownership.owns(shard) is None:
            owner = self.ownership.owner_of(shard)
            where = f"its owner is {owner[0]} (epoch {owner[1]})" if owner else "its owner is not known here"
            raise NotOwnerError(
                f"session {session_id} is in shard {shard}, which this writer does not own; {where};"
                " send the call there, or ask GetShardMap",
                shard=shard,
                owner=owner,
            )

    def was_deleted(self, session_id: str) -> bool:
        """Whether ``session_id`` is a tombstone of a shard this writer loaded (docs/deletion.md §2.2)."""
        return session_id in self.index.tombstones

    def owned_session_id(self) -> str:
        """A new session id (UUIDv7) in a shard this writer owns: ids are drawn until one lands in
        one (the embedded writer owns all: the first). Raises NotOwnerError, naming the last
        draw's shard and owner, when :data:`ID_DRAWS_PER_SHARD` draws per shard find none."""
        for _ in range(ID_DRAWS_PER_SHARD * max(self.root.shards, 1)):
            session_id = new_session_id()
            if self.ownership.owns(self.root.shard_of(session_id)) is not None:
                return session_id
        self.check_owner(session_id)
        return session_id  # owned by now (an ownership taken meanwhile)

    def _known_parent(self, parent_session_id: str) -> bool:
        """Whether the caller may name ``parent_session_id`` as a parent: in this writer's index, or,
        in a shard another writer owns, found in its shard's folder (and visible to the caller)."""
        if self.visible_entry(parent_session_id) is not None:
            return True
        if self.ownership.owns(self.root.shard_of(parent_session_id)) is not None:
            return False  # this writer's shard: its index is complete
        try:
            path = self.root.locate(parent_session_id, "parent_session_id")[1]
        except (SessionNotFoundError, OSError):
            return False
        caller = current_caller()
        return caller.tenant is None or caller.sees(self.tenants.of(parent_session_id, path.name))

    async def publish(
        self,
        session_id: str,
        name: str,
        body: bytes,
        meta: dict[str, Any],
        next_seq: int,
        calls: set[str],
        copy: tuple[Path, int, int] | None = None,
        trailer: bytes = b"",
    ) -> None:
        """Create a new session file atomically (its delegation marker first), index and open it.

        The file holds ``body``, then bytes ``start``..``end`` of ``copy`` = (file,
        start, end) when given (copied in the kernel), then ``trailer``. Raises
        SessionExistsError, StorageWriteError, NotOwnerError (the session's shard is not this
        writer's, or stopped being so before the file was durable).
        """
        shard = self.root.shard_of(session_id)
        epoch = self.committer.epoch_of(shard)
        if meta.get("parent_session_id"):
            marker = self.root.delegation_marker(
                str(meta["parent_session_id"]), str(meta.get("delegation_id", "")), session_id
            )
            await self.run_io(create_marker, marker)
        path = self.root.sessions_folder(shard) / name
        fd = await self.run_io(create_file, path, body, session_id, copy, trailer)
        size = len(body) + len(trailer) + (copy[2] - copy[1] if copy else 0)
        entry = IndexEntry(name, next_seq, None, requests_floor=(next_seq, size))
        self.index.add(session_id, entry)
        self.tenants.record(session_id, tenant_of(meta))
        if not self.committer.may_acknowledge(shard, epoch, time.monotonic()):
            os.close(fd)  # the file is in the ledger; nothing more is written to its shard
            raise NotOwnerError(
                f"this writer's ownership of shard {shard} (epoch {epoch}) ended before session"
                f" {session_id} was durable; it was not acknowledged; retry",
                shard=shard,
                epoch=epoch,
                owner=self.ownership.owner_of(shard),
            )
        state = OpenSession(
            session_id, entry, path, self._log(session_id, fd, size, shard, epoch), calls, meta
        )
        self._sessions[session_id] = state
        if size > SAVE_EVERY_BYTES:  # a large fork: its first reopen after a crash stays bounded
            self.cache.save_later(state, size)
        self.cache.close_idle()

    def _log(self, session_id: str, fd: int, size: int, shard: int, epoch: int) -> SessionLog:
        return self.committer.open(fd, size, session_id, lambda: self.cache.forget(session_id), shard, epoch)

    # -- shards coming and going (writer_service.ownership.ShardKeeper) ------------------

    async def take_shard(self, shard: int) -> None:
        """Index ``shard`` afresh from its folder (its own recovery: torn tails repaired, interrupted
        deletions finished) and its deletion records (tombstones) before this writer writes it
        under a new epoch: another writer may have written or deleted in it since. Any session of
        the shard still open from an older epoch is closed first."""
        await self.release_shard(shard)
        entries, failed = await self.run_io(index_shard, self.root, shard, self.index.tombstones)
        for session_id in [known for known in self.index.entries if self.root.shard_of(known) == shard]:
            if session_id not in entries:  # deleted by another writer meanwhile
                self.cache.drop_kept(session_id)
                self.index.remove(session_id)
        for session_id, entry in entries.items():
            self.cache.drop_kept(session_id)
            self.index.add(session_id, entry)
        for session_id, reason in failed.items():
            self.index.repairs.failed(session_id, reason)

    async def release_shard(self, shard: int) -> None:
        """Let the in-flight batches of ``shard``'s open sessions finish (the ownership refuses any
        new one), then close those sessions; the next owner reads their files afresh."""
        while True:
            open_here = [state for state in self._sessions.values() if state.log.shard == shard]
            if not open_here:
                return
            for state in open_here:
                await state.log.drain()
                if self._sessions.get(state.session_id) is state:
                    self.cache.forget(state.session_id)

    def taken(self, session_id: str) -> bool:
        """Whether ``session_id`` is in the ledger, being created, or was deleted (a tombstone: never
        used again; writer_service.deletion), by any tenant. Every creation with a given id asks."""
        return (
            self.index.get(session_id) is not None
            or session_id in self._creating
            or session_id in self.index.tombstones
        )

    def check_free(self, session_id: str) -> None:
        """Raise SessionExistsError (``deleted`` for a tombstone) when ``session_id`` is :meth:`taken`."""
        if self.taken(session_id):
            raise SessionExistsError(session_id, deleted=session_id in self.index.tombstones)

    def reserve(self, session_id: str) -> None:
        """Hold ``session_id`` for a session being created elsewhere (an import): creating it is refused."""
        self._creating.add(session_id)

    def release(self, session_id: str) -> None:
        """Give up a :meth:`reserve` (the import failed)."""
        self._creating.discard(session_id)

    def adopt(self, session_id: str, entry: IndexEntry) -> None:
        """Index a session whose file an import has just made visible (ends its :meth:`reserve`)."""
        self.index.add(session_id, entry)
        self._creating.discard(session_id)

    def check_known(self, session_id: str) -> None:
        """Raise SessionNotFoundError unless the index holds ``session_id`` (FileNameError for a
        malformed id; NotOwnerError when its shard is another writer's): the cheap refusal a
        servicer makes before decoding a request's records."""
        if self.visible_entry(session_id) is None:
            validate_session_id(session_id)
            self.check_owner(session_id)
            raise SessionNotFoundError(session_id)

    def visible_entry(self, session_id: str) -> IndexEntry | None:
        """The index entry of ``session_id`` when the current caller may see it, else None.

        Every lookup of a session by id goes through here or :meth:`_check_visible`: a
        session of another tenant is answered as one that does not exist (NOT_FOUND,
        serving.tenancy). Without authentication, one dict lookup. Raises
        StorageWriteError when a session's tenant cannot be read.
        """
        entry = self.index.get(session_id)
        if entry is None:
            return None
        caller = current_caller()
        if caller.tenant is not None and not caller.sees(self.tenants.of(session_id, entry.name)):
            return None
        return entry

    def _check_visible(self, state: OpenSession) -> None:
        """Refuse (SessionNotFoundError) an open session the current caller may not see."""
        check_visible(state.session_id, lambda: state.meta)

    def unknown_id_message(self, session_id: str) -> str | None:
        """The NOT_FOUND message for a well-formed id the index does not hold, else None.

        None for a known id and for a malformed one (whose INVALID_ARGUMENT the
        normal path gives). A dict lookup and, for an absent id, a regex match:
        what a servicer checks first so that refusing an unknown id costs no
        record decoding and no exception (docs/spec.md §2.10: an unknown id is answered
        from memory). Raises NotOwnerError for an id of a shard another writer owns (the
        redirect: a hash of the id, only for an id the index does not hold).
        """
        if session_id in self.index.entries:
            if current_caller().tenant is None or self.visible_entry(session_id) is not None:
                return None
        elif not is_session_id(session_id):
            return None
        else:
            self.check_owner(session_id)  # another writer's shard: a redirect, not NOT_FOUND
        return str(SessionNotFoundError(session_id))

    async def open_session(self, session_id: str) -> OpenSession:
        """The open state of a session, opening its file if needed (reads its saved state and
        the lines after it, on an I/O thread).

        Raises FileNameError for an id that is not a lowercase UUID,
        SessionNotFoundError (an unknown id, answered from memory; or a file gone),
        CorruptSessionError (no session_meta), SessionUnavailableError (its file
        could not be repaired or read: retried at each call and in the background,
        :meth:`retry_repairs`), StorageWriteError.
        """
        state = self._sessions.get(session_id)
        if state is not None:
            self._check_visible(state)
            self._sessions.move_to_end(session_id)
            return state
        entry = self.visible_entry(session_id)
        if entry is None:
            validate_session_id(session_id)
            self.check_owner(session_id)
            raise SessionNotFoundError(session_id)
        if session_id in self._deleting:
            raise SessionBusyError("a Delete of this session is in progress; retry when it ends")
        pending = self._loading.get(session_id)
        if pending is None:
            shard = self.root.shard_of(session_id)
            epoch = self.committer.epoch_of(shard)
            # The load is a task of its own, never the first caller's: a caller cancelled while
            # it runs (a client's deadline, a dropped connection) leaves it to the others waiting
            # for it, and its file is opened once, not opened and dropped at each cancelled try.
            pending = asyncio.ensure_future(self._load(session_id, entry, shard, epoch))
            pending.add_done_callback(_retrieved)
            self._loading[session_id] = pending
        return await asyncio.shield(pending)

    async def _load(self, session_id: str, entry: IndexEntry, shard: int, epoch: int) -> OpenSession:
        """Load a session's file into an open state (:meth:`open_session`'s task; the same errors)."""
        try:
            shard_dir = self.root.shard_dir(shard)
            path = self.root.sessions_folder(shard) / entry.name
            # A fresh entry whose saved state is recent is reopened right here: a few small
            # reads, cheaper than a hop to an I/O thread and back. Anything else (no state, a
            # stale one, a long suffix, a tail to re-read) goes to an I/O thread.
            loaded = self.cache.reopen_kept(session_id, entry, path)
            if loaded is None and entry.fresh:
                loaded = load_session(shard_dir, path, session_id, entry, quick=True)
            if loaded is None:
                loaded = await self.run_io(load_session, shard_dir, path, session_id, entry)
                assert loaded is not None  # only a quick try declines
            if loaded.entry is not entry:
                self.index.add(session_id, loaded.entry)
            if loaded.entry.requests_floor is None:
                loaded.entry.requests_floor = (loaded.entry.next_seq, loaded.size)
            state = OpenSession(
                session_id,
                loaded.entry,
                path,
                self._log(session_id, loaded.fd, loaded.size, shard, epoch),
                loaded.calls,
                loaded.meta,
                saved_offset=loaded.saved_offset,
            )
            self._sessions[session_id] = state
            self.cache.close_idle()
            self.index.repairs.repaired(session_id)
            return state
        except SessionUnavailableError as exc:
            self.index.repairs.failed(session_id, str(exc))
            raise
        finally:
            del self._loading[session_id]

    # -- appends --------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        records: RequestRecords,
        expected_next_seq: int | None = None,
        times: RecordTimes = None,
    ) -> tuple[list[int], int]:
        """Append one request's records, all or nothing; returns (seq per record, next seq).

        ``records`` holds, per request record, the payloads it becomes (a message
        with N reasoning blocks becomes N + 1). Raises SessionNotFoundError, SessionStateError
        (stopped, seq mismatch), SessionBusyError (a Stop or Resume in progress),
        RecordValidationError (index and field named, nothing written), QueueFullError
        (the session's queue is full for now), InvalidArgumentError (more records than it
        ever holds), StorageWriteError.
        """
        seqs, next_seq, durable = await self.enqueue(session_id, records, expected_next_seq, times=times)
        await durable
        return seqs, next_seq

    async def enqueue(
        self,
        session_id: str,
        records: RequestRecords,
        expected_next_seq: int | None = None,
        request_id: str = "",
        times: RecordTimes = None,
        request_since_seq: int | None = None,
    ) -> tuple[list[int], int, asyncio.Future[None]]:
        """Validate, assign seqs and queue; returns (seqs, next seq, durable future).

        The first half of :meth:`append`, for pipelined streams: once this returns,
        the request holds its place in the session's order; await the future for
        durability (it raises StorageWriteError on a failed round). A request of more records
        than a session's queue holds is refused (InvalidArgumentError, :func:`check_queue_fits`);
        one that fits once the queue drains, QueueFullError. A ``request_id``
        that landed before returns the first answer and queues nothing: found in
        memory, or with ``request_since_seq`` in the file from that seq on
        (writer_service.idempotency); its first line carries a request mark.
        ``times``: per record, a source time (see OpenSession.encode).
        """
        state = self._sessions.get(session_id)
        if state is None:
            state = await self.open_session(session_id)
        else:
            self._check_visible(state)
            self._sessions.move_to_end(session_id)
        print_ = b""
        if request_id:
            print_ = fingerprint(records, times)
            remembered = self._requests.recall(session_id, request_id, print_)
            if remembered is None and request_since_seq is not None:
                if await self._landed(state, request_id, print_, records, request_since_seq):
                    remembered = self._requests.recall(session_id, request_id, print_)
                state = await self.open_session(session_id)  # the lookup awaited: look again
            if remembered is not None:  # each caller waits through its own shield
                return remembered.seqs, remembered.next_seq, asyncio.shield(remembered.durable)
        retractions = [
            (index, payload)
            for index, payloads in enumerate(records)
            for record_type, payload in payloads
            if record_type == RecordType.RETRACTION
        ]
        remembered_targets = None
        if retractions:
            for index, payload in retractions:
                check_retraction(payload, index)
            remembered_targets = state.recent.targets_at(referenced_seqs(retractions, state.next_seq))
        if remembered_targets is not None:  # records this writer queued last: no read, no wait
            resolve_references(remembered_targets, retractions)
        elif retractions:
            # A client may name a line it read before it was durable (readers see written lines):
            # wait for what is queued, so every line it can name is in the file's durable bytes.
            await state.log.drain()
            state = await self.open_session(session_id)
            with self.holding(session_id):  # a Delete begun meanwhile waits for the read
                spans = state.line_starts.spans(referenced_seqs(retractions, state.next_seq))
                await self.run_io(
                    resolve_retractions, state.path, state.log.size, state.next_seq, retractions, spans
                )
            state = await self.open_session(session_id)  # the lines were read: look again
            if request_id:
                remembered = self._requests.recall(session_id, request_id, print_)
                if remembered is not None:  # another attempt of this request was queued meanwhile
                    return remembered.seqs, remembered.next_seq, asyncio.shield(remembered.durable)
        state.check_appendable()
        if expected_next_seq is not None and expected_next_seq != state.next_seq:
            raise SessionStateError(
                f"expected_next_seq is {expected_next_seq} but the session's next seq is {state.next_seq}",
                subject=session_subject(session_id),
                precondition=next_seq_precondition(state.next_seq),
            )
        check_queue_fits(records, self.config.max_queued_records)
        mark = (request_id, print_.hex()) if request_id else None
        lines, seqs, view = state.encode(records, self.config.max_record_bytes, times, mark)
        count = len(lines)
        if state.log.queued_records + count > self.config.max_queued_records:
            raise QueueFullError(
                f"session {session_id} has {state.log.queued_records} records queued"
                f" (limit {self.config.max_queued_records}); retry with backoff"
            )
        first_seq, first_start = state.next_seq, state.log.submitted_bytes
        durable = state.queue(b"".join(lines) if count > 1 else lines[0], count, view.committed())
        state.recent.remember(first_seq, (typed for payloads in records for typed in payloads), lines)
        state.line_starts.note(first_seq, first_start, lines)
        # The committer's future, which this caller's cancellation (its shield's) never reaches.
        written = state.log.last_durable
        assert written is not None
        if request_id:
            answer = RememberedAppend(print_, seqs, state.next_seq, written, state.log.submitted_bytes)
            self._requests.remember(session_id, request_id, answer)
        if state.log.submitted_bytes - state.saved_offset > SAVE_EVERY_BYTES:
            self.cache.save_later(state, state.log.submitted_bytes, written)
        return seqs, state.next_seq, durable

    async def _landed(
        self, state: OpenSession, request_id: str, print_: bytes, records: RequestRecords, since_seq: int
    ) -> bool:
        """Whether ``request_id`` is now in the writer's memory: found by a lookup in the session
        file (writer_service.idempotency: read back from the session's request floor to
        ``since_seq``, when the floor lies above it; the answer found is remembered), or
        remembered meanwhile by another attempt of the same request.

        Raises InvalidArgumentError (the id's line has another fingerprint: reused for other
        records), SessionStateError (``since_seq`` too far back), StorageWriteError.
        """
        floor = state.entry.requests_floor or (state.next_seq, state.log.size)
        if since_seq >= floor[0]:
            return False
        try:
            with self.holding(state.session_id):  # a Delete begun meanwhile waits for the read
                found = await self.run_io(find_request, state.path, request_id, since_seq, floor[1])
        except OSError as exc:
            raise storage_error(
                exc, "read", f"looking up request {request_id!r} in {state.path.name}"
            ) from exc
        if self._requests.recall(state.session_id, request_id, print_) is not None:
            return True  # another attempt of the same request was answered meanwhile
        if found is None:
            return False
        seq, stored = found
        if stored != print_.hex():
            raise reused_id(request_id)
        seqs = []
        for payloads in records:
            seq += len(payloads)
            seqs.append(seq - 1)
        durable = asyncio.get_running_loop().create_future()
        durable.set_result(None)
        self._requests.remember(
            state.session_id, request_id, RememberedAppend(print_, seqs, seq, durable, floor[1])
        )
        return True

    def _request_forgotten(self, session_id: str, answer: RememberedAppend) -> None:
        """Memory let go of a request id: the session's request floor moves past its lines."""
        entry = self.index.get(session_id)
        if (
            entry is not None
            and entry.requests_floor is not None
            and answer.next_seq > entry.requests_floor[0]
        ):
            entry.requests_floor = (answer.next_seq, answer.end_offset)

    # -- stop -----------------------------------------------------------------------

    async def stop(
        self,
        session_id: str,
        kind: StopKind,
        reason: str,
        error: dict[str, str] | None = None,
        ts: str = "",
    ) -> StopResult:
        """Stop a session (docs/spec.md §2.6); see :func:`writer_service.stopping.stop_session`."""
        return await stop_session(self, session_id, kind, reason, error, ts)

    async def rebuild_exclusive(self, state: OpenSession, with_digest: bool) -> RebuiltFacts:
        """Drain the session's queue, then rebuild its whole file on an I/O thread (docs/spec.md §2.7).

        Call with ``state.busy`` set. Raises SessionStateError when a write failed
        while draining, OSError when the file cannot be read.
        """
        await state.log.drain()
        if self._sessions.get(state.session_id) is not state:
            raise SessionStateError(
                "a write failed while draining; nothing was done, retry",
                subject=session_subject(state.session_id),
                precondition="storage healthy",
            )
        try:
            return await self.run_io(file_facts, state.path, with_digest)
        finally:
            self.heap_trimmer.after(state.log.size)

    async def drained_path(self, session_id: str) -> Path:
        """The path of a session's file, after draining its queue when it is open.

        Raises FileNameError, SessionNotFoundError (unknown id, from memory).
        """
        state = self._sessions.get(session_id)
        if state is None and session_id in self.index.repairs.pending:
            state = await self.open_session(session_id)  # tries the repair again, or refuses
        if state is not None:
            self._check_visible(state)
            if state.busy == "Delete":
                state.refuse_if_busy()
            await state.log.drain()
            return state.path
        entry = self.visible_entry(session_id)
        if entry is None:
            validate_session_id(session_id)
            self.check_owner(session_id)
            raise SessionNotFoundError(session_id)
        if session_id in self._deleting:
            raise SessionBusyError("a Delete of this session is in progress; retry when it ends")
        return self.root.session_path(session_id, entry.name)

    @contextlib.contextmanager
    def holding(self, session_id: str) -> Iterator[None]:
        """Hold a session's file against deletion while a Fork, or an Append's look-back (a
        retraction's references, a request id's mark), reads it outside the session's queue: a
        Delete of the session begun meanwhile waits until the hold is released before its file
        goes (docs/deletion.md §1.4). Take it with no await since the session was found. Raises
        SessionBusyError (a Delete of the session is in progress), SessionNotFoundError (it is
        gone: deleted)."""
        if session_id in self._deleting:
            raise SessionBusyError("a Delete of this session is in progress; retry when it ends")
        if self.index.get(session_id) is None:
            raise SessionNotFoundError(session_id)
        self._holds[session_id] = self._holds.get(session_id, 0) + 1
        try:
            yield
        finally:
            self._holds[session_id] -= 1
            if not self._holds[session_id]:
                del self._holds[session_id]
                waiter = self._unheld.pop(session_id, None)
                if waiter is not None:
                    waiter.set()

    async def _released(self, session_id: str) -> None:
        """Wait until no Fork holds the session's file (:meth:`holding`)."""
        while session_id in self._holds:
            await self._unheld.setdefault(session_id, asyncio.Event()).wait()

    async def delete(self, session_id: str, cause: str = "request", deleted_by: str = "") -> DeleteResult:
        """Delete a session for good (writer_service.deletion): its queued records are drained
        (their appends acknowledged), its deletion record made durable, its file and what derives
        from it removed, its id kept as a tombstone. ``deleted_by``: who asked (default: the
        caller's credential, ``anonymous`` without authentication).

        A session already deleted answers ``already_deleted`` to a caller that saw it. Raises
        FileNameError, SessionNotFoundError (unknown, another tenant's), SessionBusyError (a Stop,
        Resume or Delete in progress), NotOwnerError (this writer does not own its shard),
        StorageWriteError (the session is whole, or its deletion is finished at the next start).
        """
        validate_session_id(session_id)
        entry = self.visible_entry(session_id)
        if entry is None:
            return await self._deleted_before(session_id)
        shard = self.root.shard_of(session_id)
        epoch = self.ownership.owns(shard)
        if epoch is None:
            raise NotOwnerError(
                f"this writer does not own shard {shard} of session {session_id}; retry",
                shard=shard,
                epoch=0,
                owner=self.ownership.owner_of(shard),
            )
        if session_id in self._deleting:
            raise SessionBusyError("a Delete of this session is in progress; retry when it ends")
        state = self._sessions.get(session_id)
        if state is not None:
            self._check_visible(state)
            state.refuse_if_busy()
        tenant = self._tenant_for_deletion(session_id, entry)
        caller = current_caller()
        deletion = Deletion(
            session_id,
            tenant,
            deleted_by or caller.credential or "anonymous",
            now_timestamp(),
            cause,
        )
        self._deleting.add(session_id)  # from here on, opening the session is refused
        # The removal is a task of its own: a caller cancelled meanwhile (a client's deadline, a
        # dropped connection) leaves it to finish, never a file removed under a session the index
        # still holds open (an append then acknowledged into the removed file).
        removal = asyncio.ensure_future(self._remove(session_id, entry, deletion))
        removal.add_done_callback(_retrieved)
        return await asyncio.shield(removal)

    async def _remove(self, session_id: str, entry: IndexEntry, deletion: Deletion) -> DeleteResult:
        """:meth:`delete`'s removal of a session marked deleting (its task; the same errors)."""
        marked: OpenSession | None = None
        try:
            loading = self._loading.get(session_id)
            if loading is not None:  # an open begun before: wait for it, so that it is drained too
                with contextlib.suppress(Exception):
                    await asyncio.shield(loading)
            state = self._sessions.get(session_id)
            if state is not None:
                state.refuse_if_busy()  # a Stop or Resume began while the open was awaited
                marked, state.busy = state, "Delete"
                await state.log.drain()  # appends in flight are written and acknowledged first
            await self.cache.saved(session_id)  # no state file is written after the delete removed it
            await self._released(session_id)  # a Fork reading the file finishes first
            try:
                await self.run_io(remove_session, self.root, self.index.tombstones, deletion, entry.name)
            except OSError as exc:
                if session_id not in self.index.tombstones:
                    raise storage_error(exc, "write", f"recording the deletion of {entry.name}") from exc
                log.error(
                    "deletion of %s recorded, not finished (finished at the next start): %s", entry.name, exc
                )
            self._forget_deleted(session_id)
        finally:
            self._deleting.discard(session_id)
            if marked is not None:
                marked.busy = ""
        metrics.DELETED_SESSIONS.labels(deletion.cause).inc()
        log.info("deleted %s (%s, by %s)", session_id, deletion.cause, deletion.deleted_by)
        return DeleteResult(session_id, deletion.deleted_at)

    def _tenant_for_deletion(self, session_id: str, entry: IndexEntry) -> str:
        """The recorded tenant of a session being deleted ("" when its file cannot be read and
        no authentication needs it: an unreadable session may still be deleted)."""
        try:
            return self.tenants.of(session_id, entry.name)
        except StorageWriteError:
            if current_caller().tenant is not None:
                raise
            return ""

    async def _deleted_before(self, session_id: str) -> DeleteResult:
        """The answer to a delete of an id not in the index: already deleted (when the caller
        sees its tombstone), else SessionNotFoundError."""
        if session_id in self.index.tombstones:
            shard_dir = self.root.shard_dir(self.root.shard_of(session_id))
            try:
                record = await self.run_io(self.index.tombstones.read, shard_dir, session_id)
            except OSError as exc:
                raise storage_error(exc, "read", "reading a deletion record") from exc
            if record is not None and current_caller().sees(record.tenant):
                return DeleteResult(session_id, record.deleted_at, already_deleted=True)
        raise SessionNotFoundError(session_id)

    def _forget_deleted(self, session_id: str) -> None:
        """Drop everything the writer holds in memory about a deleted session."""
        self.cache.forget_deleted(session_id)
        self.index.remove(session_id)
        self.tenants.forget(session_id)

    def stopped_sessions(self) -> list[tuple[str, Path]]:
        """(id, file path) of every stopped session not being deleted, in a shard this writer owns
        now (retention's candidates: a writer of a cluster leaves other shards to their owners)."""
        return [
            (session_id, self.root.session_path(session_id, entry.name))
            for session_id, entry in self.index.entries.items()
            if entry.stopped_kind is not None
            and session_id not in self._deleting
            and self.ownership.owns(self.root.shard_of(session_id)) is not None
        ]

    async def resume(self, session_id: str, force: bool = False) -> ResumeResult:
        """Re-open a session for appending (docs/spec.md §2.8); see :func:`writer_service.resume_fork.resume_session`."""
        return await resume_session(self, session_id, force)

    async def fork(
        self, source_id: str, at_seq: int | None, before_user_message: int | None, session_key: str = ""
    ) -> ForkResult:
        """A new session from the source's records up to a fork point (docs/spec.md §2.8), named by
        ``session_key`` in the source's tenant when given; see
        :func:`writer_service.resume_fork.fork_session`."""
        return await fork_session(self, source_id, at_seq, before_user_message, session_key)

    async def retry_repairs(self) -> int:
        """Try again every repair that failed (opening each such session); returns how many still fail."""
        for session_id in list(self.index.repairs.pending):
            with contextlib.suppress(LedgerError):
                await self.open_session(session_id)
        return len(self.index.repairs.pending)

    async def close(self) -> None:
        """Drain every session's queue, save their states, close files, the rounds' thread and the I/O threads."""
        for state in list(self._sessions.values()):
            await state.log.drain()
        self.cache.retire_all()
        if self._group is not None:
            self._group.close()
        self._executor.shutdown(wait=True)


def _retrieved(work: asyncio.Future[Any]) -> None:
    """Mark the error of a finished load or removal retrieved: each waiter raises it itself, and
    one no caller waits for any longer (all cancelled) is not reported as never retrieved."""
    if not work.cancelled():
        work.exception()


def check_queue_fits(records: RequestRecords, max_queued_records: int) -> None:
    """Refuse (InvalidArgumentError, field ``records``) a request of more records (lines: a
    message with reasoning counts each reasoning block) than a session's queue ever holds: it
    could never be queued, so the retryable QueueFullError would be a lie."""
    count = sum(len(payloads) for payloads in records)
    if count > max_queued_records:
        raise InvalidArgumentError(
            "records",
            f"make {count} records, over the limit of {max_queued_records} records queued for one"
            f" session; send them in requests of at most {max_queued_records} records",
        )
