"""Stop: drain, rebuild the whole file, append checkpoint and stop as one batch (docs/spec.md §2.6).

:func:`stop_session` marks the session busy (later appends are refused with ABORTED
until it ends), drains its queue, rebuilds the whole file on an I/O thread with the
same shared rules the reader uses (bounded memory, writer_service.rebuilt_facts),
digests it, then appends ``agent_checkpoint`` and ``stop`` as one batch.
:func:`check_stop_text` and :func:`stop_lines` are the rules Stop shares with
ImportSessions (writer_service.importing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from shared.errors import InvalidArgumentError
from shared.records import RecordType, encode_line, now_timestamp
from shared.stop_kinds import StopKind
from writer_service.open_session import OpenSession
from writer_service.rebuilt_facts import FORCE_HINT, RebuiltFacts, refuse_damage

log = logging.getLogger(__name__)

#: Longest stop reason and error message (characters): stop facts stay within one tail window.
STOP_TEXT_MAX_CHARS = 16 * 1024


class SessionLedger(Protocol):
    """What Stop uses of the writer's ledger (:class:`writer_service.sessions.SessionLedger` is
    the one implementation): its small public API, so this module does not import it."""

    async def open_session(self, session_id: str) -> OpenSession: ...

    async def rebuild_exclusive(self, state: OpenSession, with_digest: bool) -> RebuiltFacts: ...


@dataclass(frozen=True, slots=True)
class StopResult:
    checkpoint_seq: int
    stop_seq: int
    digest: str
    message_count: int


async def stop_session(
    ledger: SessionLedger,
    session_id: str,
    kind: StopKind,
    reason: str,
    error: dict[str, str] | None = None,
    ts: str = "",
) -> StopResult:
    """Drain, rebuild the whole file, append checkpoint and stop, make durable (docs/spec.md §2.6).

    ``reason`` is at most 16 KiB characters, the error's message too; ``ts`` the
    time of both records in the ledger's form ("" for now). Raises
    InvalidArgumentError (an oversized reason), SessionNotFoundError,
    SessionStateError (already stopped), SessionBusyError (a Stop or Resume in
    progress), CorruptSessionError (the file is damaged: no checkpoint is
    written over damage), StorageWriteError.
    """
    check_stop_text(reason, error)
    state = await ledger.open_session(session_id)
    state.check_appendable()
    state.busy = "Stop"
    try:
        found = await ledger.rebuild_exclusive(state, True)
        refuse_damage(found.unaccepted_damage, state.path.name, "stop", FORCE_HINT)
        checkpoint_seq = state.next_seq
        message_digest = found.digest
        lines = stop_lines(checkpoint_seq, ts or now_timestamp(), found, kind, reason, error)
        # Stopped from the moment the lines are queued: a caller cancelled while they
        # are written must not leave the session open behind its stop record. A failed
        # write drops this in-memory view (the log's on_failure), so it cannot lie.
        durable = state.queue(lines, 2)
        state.entry.stopped_kind = str(kind)
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


def check_stop_text(reason: str, error: dict[str, str] | None, where: str = "") -> None:
    """Refuse (InvalidArgumentError, field ``{where}reason`` / ``{where}error``) a stop reason,
    error message or category longer than :data:`STOP_TEXT_MAX_CHARS` (Stop and ImportSessions)."""
    if len(reason) > STOP_TEXT_MAX_CHARS:
        raise InvalidArgumentError(f"{where}reason", f"is longer than {STOP_TEXT_MAX_CHARS} characters")
    if error and any(len(value) > STOP_TEXT_MAX_CHARS for value in error.values()):
        raise InvalidArgumentError(
            f"{where}error", f"message and category are at most {STOP_TEXT_MAX_CHARS} characters"
        )


def stop_lines(
    checkpoint_seq: int,
    ts: str,
    found: RebuiltFacts,
    kind: StopKind,
    reason: str,
    error: dict[str, str] | None,
) -> bytes:
    """The ``agent_checkpoint`` and ``stop`` lines of a Stop (docs/spec.md §2.6) over a rebuild of the
    whole file: the checkpoint carries the message digest and the lines digest of every line
    before it (shared.records), the stop names the checkpoint's seq."""
    checkpoint = {
        "digest": found.digest,
        "message_count": found.message_count,
        "covers_seq": checkpoint_seq - 1,
        "stop_kind": str(kind),
        "lines_digest": found.lines_digest,
    }
    stop: dict[str, Any] = {"stop_kind": str(kind), "reason": reason}
    if error:
        stop["error"] = error
    stop["checkpoint_seq"] = checkpoint_seq
    return encode_line(checkpoint_seq, ts, RecordType.AGENT_CHECKPOINT, checkpoint) + encode_line(
        checkpoint_seq + 1, ts, RecordType.STOP, stop
    )
