"""Resume and fork: continuing a session's identity, or branching a new one (docs/spec.md §2.8).

Resume re-opens a session for appending to the same file: every tool call left
without an output gets an appended synthetic output; a round a crash left pending (a
session without a stop record: shared.rounds.round_to_close) gets a
``round_interrupted`` event naming it; then a ``resumed`` event. Nothing written is
rewritten. Eligibility is default-deny (shared.stop_kinds)
unless forced, and a file that fails verification (a failed line check, a seq gap
or repeat, a checkpoint that does not match) is refused (DATA_LOSS) unless forced:
a forced Resume over damage records the damage in its ``resumed`` event, which
readers report as damage from then on (nothing re-blesses it), and after which the
writer's Stop accepts that damage (shared.rebuild.Rebuild.unaccepted_damage).
Fork copies the source's records up to a fork point, byte for byte, into a new session whose ``session_meta.forked_from`` names source, seq and digest;
the source is drained first when open, and never written. Both read the whole
file with the shared rebuild in bounded memory (writer_service.rebuilt_facts), after
draining (docs/spec.md §2.7); a fork's bytes are copied in the kernel (``copy_file_range``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from shared.deletions import deletion_in
from shared.errors import InvalidArgumentError, SessionNotFoundError, SessionStateError
from shared.layout import DataRoot, open_session_file
from shared.lineage import lineage_of
from shared.naming import build_file_name, current_keyed_session_id
from shared.reasons import session_subject
from shared.rebuild import DegradedEntry
from shared.records import (
    FORKED_EVENT,
    RESUMED_EVENT,
    ROUND_INTERRUPTED_EVENT,
    RecordType,
    encode_line,
    format_timestamp,
    now_timestamp,
)
from shared.remedies import FORCED_RESUME
from shared.rounds import Round, pending_round_of
from shared.session_meta import read_session_meta, recorded_tenant, tenant_of
from shared.stop_kinds import classify_session
from writer_service.fork_points import check_fork_keeps_pairs, find_fork_point
from writer_service.heap_trim import HeapTrimmer
from writer_service.open_session import OpenSession
from writer_service.rebuilt_facts import FORCE_HINT, RebuiltFacts, file_facts, refuse_damage

_T = TypeVar("_T")


class SessionLedger(Protocol):
    """What Resume and Fork use of the writer's ledger (:class:`writer_service.sessions.SessionLedger`
    is the one implementation): its small public API, so this module does not import it."""

    heap_trimmer: HeapTrimmer
    root: DataRoot

    async def open_session(self, session_id: str) -> OpenSession: ...

    async def rebuild_exclusive(self, state: OpenSession, with_digest: bool) -> RebuiltFacts: ...

    async def drained_path(self, session_id: str) -> Path: ...

    def holding(self, session_id: str) -> AbstractContextManager[None]: ...

    def owned_session_id(self) -> str: ...

    def was_deleted(self, session_id: str) -> bool: ...

    def check_owner(self, session_id: str) -> None: ...

    def check_free(self, session_id: str) -> None: ...

    def reserve(self, session_id: str) -> None: ...

    def release(self, session_id: str) -> None: ...

    async def run_io(self, function: Callable[..., _T], *args: Any) -> _T: ...

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
    ) -> None: ...


log = logging.getLogger(__name__)


#: The content of the tool output Resume writes for a call left without one.
SYNTHETIC_OUTPUT = "Error: interrupted before the tool returned"
#: Damage entries a forced Resume records in its event (the first ones; their number too).
RECORDED_DAMAGE_ENTRIES = 16
#: Bytes read at a time when Resume looks for a round a crash left pending.
ROUND_READ_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ResumeResult:
    """What a Resume did: the calls it closed, the stop kind it lifted ("" if open), the next seq,
    and the id of the round it recorded interrupted ("" if none was left pending)."""

    closed_call_ids: list[str]
    previous_stop_kind: str
    next_seq: int
    interrupted_round_id: str = ""


@dataclass(frozen=True, slots=True)
class ForkResult:
    """The new session, the last source seq it kept, the digest of its history, its next seq."""

    session_id: str
    forked_at_seq: int
    digest: str
    next_seq: int


async def resume_session(ledger: SessionLedger, session_id: str, force: bool = False) -> ResumeResult:
    """Re-open a session for appending, closing calls left without an output (docs/spec.md §2.8).

    Appends one synthetic tool message per unanswered call, a ``round_interrupted``
    event when the session has no stop record and its last round is pending (a crash
    cut it off: shared.rounds.round_to_close; issue 24), then a ``resumed`` event, in
    one batch. A stopped session whose stop kind is not replayable
    as-is is refused unless ``force``, and so is a damaged file (see the module
    doc). Raises SessionNotFoundError, SessionStateError (not replayable),
    CorruptSessionError (damaged: DATA_LOSS naming line and byte offset),
    SessionBusyError (a Stop or Resume in progress), StorageWriteError.
    """
    state = await ledger.open_session(session_id)
    state.refuse_if_busy()
    if state.stopped_kind is not None and not force:
        _check_resumable(state)  # from the in-memory stop kind: a refusal reads no file
    state.busy = "Resume"
    try:
        found = await ledger.rebuild_exclusive(state, False)
        damage = found.unaccepted_damage
        if not force:
            refuse_damage(damage, state.path.name, "resume", FORCE_HINT)
        closed = found.unanswered_call_ids
        previous = state.stopped_kind or ""
        cut_off = None
        if state.stopped_kind is None:  # a stopped tail never leaves a round to close (round_to_close)
            cut_off = await ledger.run_io(
                round_left_pending, ledger.root, state.session_id, state.path, found.committed_bytes
            )
        ts = now_timestamp()
        seq = state.next_seq
        lines = b""
        for call_id in closed:
            output = {
                "role": "tool",
                "content": SYNTHETIC_OUTPUT,
                "tool_call_id": call_id,
                "synthetic": True,
            }
            lines += encode_line(seq, ts, RecordType.MESSAGE, output)
            seq += 1
        if cut_off is not None:
            interrupted = {
                "kind": ROUND_INTERRUPTED_EVENT,
                "body": {"round_id": cut_off.round_id, "start_seq": cut_off.start_seq},
            }
            lines += encode_line(seq, ts, RecordType.EVENT, interrupted)
            seq += 1
        body: dict[str, Any] = {"previous_stop_kind": previous, "closed_call_ids": closed, "forced": force}
        if damage is not None:
            body["damage"] = _recorded_damage(found.unaccepted)
            body["damage_count"] = len(found.unaccepted)
        event = {"kind": RESUMED_EVENT, "body": body}
        lines += encode_line(seq, ts, RecordType.EVENT, event)
        seq += 1
        durable = state.queue(lines, seq - state.next_seq, set(found.call_ids))
        state.entry.stopped_kind = None
    finally:
        state.busy = ""
    await durable
    log.info("resumed %s (was %s), closed %d dangling calls", session_id, previous or "open", len(closed))
    return ResumeResult(closed, previous, seq, cut_off.round_id if cut_off is not None else "")


def round_left_pending(root: DataRoot, session_id: str, path: Path, end: int) -> Round | None:
    """The round the first ``end`` bytes of a session file leave pending with no stop record after
    it (shared.rounds.pending_round_of), named through the session's fork lineage, live or
    deleted sources alike (shared.lineage.lineage_of: as the reader names it); None when there is
    none. Reads on an I/O thread in memory that does not grow with the session; raises OSError
    when the file cannot be read."""
    fd = open_session_file(path)
    try:
        lineage = lineage_of(
            session_id, read_session_meta(path), partial(live_meta, root), partial(deletion_in, root)
        )
        return pending_round_of(fd, end, lineage, ROUND_READ_BYTES)
    finally:
        os.close(fd)


def live_meta(root: DataRoot, session_id: str) -> dict[str, Any] | None:
    """The ``session_meta`` of a session whose file is in ``root`` (None when none is, or it
    cannot be read): the live lookup of a lineage walk (shared.lineage)."""
    try:
        return read_session_meta(root.locate(session_id)[1])
    except (SessionNotFoundError, InvalidArgumentError, OSError):
        return None


def _recorded_damage(entries: list[DegradedEntry]) -> list[dict[str, Any]]:
    """The damage a forced Resume accepted, as its event records it (the first entries)."""
    return [
        {"kind": str(entry.kind), "line": entry.line, "offset": entry.offset, "detail": entry.detail}
        for entry in entries[:RECORDED_DAMAGE_ENTRIES]
    ]


def _check_resumable(state: OpenSession) -> None:
    """Refuse, default-deny, a stopped session that may not be continued as-is."""
    eligibility = classify_session(state.stopped_kind or None, state.meta)
    if not eligibility.replayable:
        raise SessionStateError(
            f"cannot resume: {eligibility.reason}; {FORCED_RESUME} re-opens it anyway",
            subject=session_subject(state.session_id),
            precondition="stop kind replayable as-is (paused or cancelled)",
        )


async def fork_session(
    ledger: SessionLedger,
    source_id: str,
    at_seq: int | None,
    before_user_message: int | None,
    session_key: str = "",
) -> ForkResult:
    """Create a new session holding the source's records up to the fork point (docs/spec.md §2.8).

    Exactly one of ``at_seq`` (keep seq <= at_seq) and ``before_user_message``
    (keep everything before the Nth user message, 1-based) is given. The
    source is drained first when this writer has it open, and never written.
    ``session_key`` (optional) names the fork in the source's tenant, as CreateSession's key
    does (shared.naming.current_keyed_session_id; recorded in its session_meta).
    Raises InvalidArgumentError (no or bad fork point), SessionStateError (the
    point cuts a tool call from its output or a reasoning from its answer),
    CorruptSessionError (damage before the fork point), SessionNotFoundError,
    SessionExistsError (the key's id is taken or was deleted), FileNameError (a bad key),
    StorageWriteError, NotOwnerError (the source's shard is another writer's: the redirect;
    or, for a key, the shard of the id it names).
    A fork of a child session stays a child of the same delegation (its marker is written),
    with ``forked_from`` telling them apart.

    With several writers (docs/cluster.md §4) the fork is made by the owner of the source's
    shard (it drains the source's queue); the new session's id is drawn in a shard that same
    writer owns (:meth:`SessionLedger.owned_session_id`), so it writes the new file itself, and
    no writer writes a file of a shard it does not own. A keyed fork's id is fixed by its key:
    a writer that does not own its shard refuses it (NotOwnerError).
    """
    path = await ledger.drained_path(source_id)
    new_id = "" if session_key else ledger.owned_session_id()
    # The source is held against a Delete until its bytes are copied: a Delete begun meanwhile
    # waits (docs/deletion.md §1.4), and one that ended while the queue drained is NOT_FOUND.
    with ledger.holding(source_id), _source_gone_is_not_found(source_id, path):
        try:
            plan = await ledger.run_io(
                _plan_fork,
                path,
                source_id,
                new_id,
                at_seq,
                before_user_message,
                session_key,
                ledger.root.shard_of,
                ledger.was_deleted,
            )
        finally:
            ledger.heap_trimmer.after(_file_size(path))
        if session_key:
            ledger.check_owner(plan.session_id)
            ledger.check_free(plan.session_id)
        ledger.reserve(plan.session_id)  # no await since the check: no other create can take it between
        try:
            await ledger.publish(
                plan.session_id,
                plan.name,
                plan.head,
                plan.meta,
                next_seq=plan.seq + 2,
                calls=plan.call_ids,
                copy=(path, plan.copy_start, plan.copy_end),
                trailer=plan.trailer,
            )
        finally:
            ledger.release(plan.session_id)
    log.info("forked %s at seq %d into %s", source_id, plan.seq, plan.session_id)
    return ForkResult(plan.session_id, plan.seq, plan.digest, plan.seq + 2)


@dataclass(frozen=True, slots=True)
class _ForkPlan:
    """A fork ready to publish: the new session's id, file name, ``session_meta`` line, the
    source's byte range it copies, the ``forked`` event line, and its ``session_meta``."""

    session_id: str
    name: str
    head: bytes
    copy_start: int
    copy_end: int
    trailer: bytes
    meta: dict[str, Any]
    seq: int
    digest: str
    call_ids: set[str]


def _plan_fork(
    path: Path,
    source_id: str,
    session_id: str,
    at_seq: int | None,
    before_user_message: int | None,
    session_key: str,
    shard_of: Callable[[str], int],
    deleted: Callable[[str], bool],
) -> _ForkPlan:
    """Read the source, find and check the fork point, rebuild the prefix and build the new file
    (named ``session_id``, or the id ``session_key`` names now in the source's tenant when given:
    shared.naming.current_keyed_session_id, with the data root's ``shard_of`` and the writer's
    tombstones as ``deleted``).

    Runs on an I/O thread: every step reads the source in chunks (bounded memory;
    about 1 s per 100 MB). Raises what :func:`fork_session` documents, and OSError
    when the source cannot be read.
    """
    cut = find_fork_point(path, at_seq, before_user_message)
    found = file_facts(path, True, end=cut.end_offset)
    refuse_damage(found.damage, path.name, "fork")
    check_fork_keeps_pairs(path, cut, found.unanswered_call_ids)
    created = datetime.now(UTC)
    meta = dict(found.session_meta or {})
    meta.pop("session_key", None)  # the source's key names the source
    if session_key:
        tenant = recorded_tenant(tenant_of(meta))
        session_id = current_keyed_session_id(tenant, session_key, shard_of=shard_of, deleted=deleted)
        meta["session_key"] = session_key
    meta.update(
        session_id=session_id,
        created_at=format_timestamp(created),
        forked_from={"session_id": source_id, "seq": cut.seq, "digest": found.digest},
    )
    ts = now_timestamp()
    event = {
        "kind": FORKED_EVENT,
        "body": {"source_session_id": source_id, "seq": cut.seq, "digest": found.digest},
    }
    head = encode_line(0, ts, RecordType.SESSION_META, meta)
    trailer = encode_line(cut.seq + 1, ts, RecordType.EVENT, event)
    name = build_file_name(created, session_id, str(meta.get("agent_name", "")))
    return _ForkPlan(
        session_id,
        name,
        head,
        cut.first_line_end,
        cut.end_offset,
        trailer,
        meta,
        cut.seq,
        found.digest,
        found.call_ids,
    )


@contextmanager
def _source_gone_is_not_found(source_id: str, path: Path) -> Iterator[None]:
    """Answer a source file that vanished under a Fork (it went with its session: deleted by
    other means than this writer's Delete, which waits for the fork) as SessionNotFoundError,
    never as a storage failure."""
    try:
        yield
    except FileNotFoundError as exc:
        if exc.filename not in (str(path), os.fspath(path)):
            raise
        gone = SessionNotFoundError(source_id)
        gone.args = (f"session {source_id!r} not found: its file went while the fork read it (deleted)",)
        raise gone from exc


def _file_size(path: Path) -> int:
    """The size of ``path`` in bytes (0 when it cannot be seen)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
