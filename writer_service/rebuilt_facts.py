"""What Stop, Resume and Fork learn from a whole-file rebuild, in bounded memory (docs/spec.md §2.6-2.8).

:func:`file_facts` rebuilds a session file with the shared rules in bounded
memory (:func:`shared.rebuild_index.index_rebuild`: one small handle per message,
never the payloads) and, when asked, streams the digest of the rebuilt messages
(:class:`shared.digest.DigestBuilder`, reading each message's line back by its
offset). So a 500 MB session is stopped, resumed or forked with memory that grows
with its number of messages and open tool calls, not with its bytes.

The rebuild finds every damaged line (line checks, seqs, the lines digests of the
checkpoints: shared.rebuild). A checkpoint written before lines digests existed is
verified here by its message digest (as a reader does; its single-reasoning reading
included), so that Stop, Resume and Fork refuse a file that fails any verification.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.digest import digest_of_payloads
from shared.errors import CorruptSessionError
from shared.rebuild import (
    CheckpointReading,
    DegradedEntry,
    DegradedKind,
    Rebuild,
    collector_paused,
    read_checkpoint,
)
from shared.rebuild_index import MessageSource, index_rebuild
from shared.remedies import FORCED_RESUME, SEE_VERIFY


@dataclass(frozen=True, slots=True)
class RebuiltFacts:
    """What Stop, Resume and Fork need of a rebuild, without its payloads.

    ``damage`` is the first damaged line (None: sound) and ``unaccepted`` the damage
    no forced Resume accepted, in order (shared.rebuild.Rebuild.unaccepted_damage);
    ``digest`` the shared.digest of the rebuilt messages ("" when not asked for);
    ``lines_digest`` the digest of every committed line (a checkpoint's pin);
    ``call_ids`` the calls an output may still answer, ``unanswered_call_ids`` those
    without one, in call order; ``committed_bytes`` the length up to the last ``\\n`` read.
    """

    damage: DegradedEntry | None
    unaccepted: list[DegradedEntry]
    lines_digest: str
    digest: str
    message_count: int
    unanswered_call_ids: list[str]
    call_ids: set[str]
    session_meta: dict[str, Any] | None
    last_seq: int
    committed_bytes: int

    @property
    def unaccepted_damage(self) -> DegradedEntry | None:
        """The first damage entry no forced Resume accepted, or None."""
        return self.unaccepted[0] if self.unaccepted else None


def file_facts(path: Path, with_digest: bool, end: int | None = None) -> RebuiltFacts:
    """Rebuild ``path`` (its first ``end`` bytes when given) and keep only its facts.

    CPU-bound (about 1 s per 100 MB, more with the digest): run it on an I/O thread,
    never on the event loop. Raises OSError when the file cannot be read; never
    raises on bad content (see ``damage``). Source: docs/spec.md §2.6 (the checkpoint
    digest, from the whole file, with the reader's own rebuild), §2.8.
    """
    with collector_paused():
        found = index_rebuild(path, end=end)
        message_digest = ""
        with MessageSource(path) as source:
            _check_older_checkpoint(found, source)
            if with_digest:
                message_digest = digest_of_payloads(map(source.message, found.messages), len(found.messages))
        facts = RebuiltFacts(
            found.damage,
            found.unaccepted_damage(),
            found.lines_digest,
            message_digest,
            len(found.messages),
            found.unanswered_call_ids,
            found.call_ids,
            found.session_meta,
            found.last_seq,
            found.committed_bytes,
        )
        del found
    return facts


def _check_older_checkpoint(found: Rebuild, source: MessageSource) -> None:
    """Add a ``checkpoint_mismatch`` damage entry when the last checkpoint has no lines digest
    (an older one) and its message digest does not match the sequence it covers (under
    either reading of several reasoning blocks, as readers verify it)."""
    checkpoint, covered = found.last_checkpoint, found.checkpoint_messages
    if checkpoint is None or covered is None or checkpoint.lines_digest or not checkpoint.sound:
        return  # none; pinned (the rebuild checked it); or already unsound, hence reported

    def payloads() -> Iterator[dict[str, Any]]:
        return map(source.message, covered)

    computed = digest_of_payloads(payloads(), len(covered))
    if read_checkpoint(checkpoint, len(covered), computed, payloads) is not CheckpointReading.MISMATCH:
        return
    found.degraded.append(
        DegradedEntry(
            DegradedKind.CHECKPOINT_MISMATCH,
            checkpoint.line,
            checkpoint.offset,
            f"the checkpoint's digest {checkpoint.digest[:80]!r} ({checkpoint.message_count} messages) does"
            f" not match the {len(covered)} messages rebuilt from the lines it covers",
        )
    )


#: What a refusal over damage tells an operator who wants to go on anyway.
FORCE_HINT = (
    f"; an operator may re-open it anyway with {FORCED_RESUME}, which records"
    " the damage in the session, where it stays reported"
)


def refuse_damage(damage: DegradedEntry | None, name: str, operation: str, force_hint: str = "") -> None:
    """Raise CorruptSessionError (DATA_LOSS) naming the first damaged line of a rebuild, if any.

    ``force_hint`` is added to the message (how an operator may go on anyway).
    """
    if damage is not None:
        raise CorruptSessionError(
            f"cannot {operation}: session file {name} is damaged at line {damage.line} (byte"
            f" {damage.offset}): {damage.kind}: {damage.detail}; nothing was written ({SEE_VERIFY})"
            f"{force_hint}"
        )
