"""Exact replay of a session (SPEC §5 Replay, seed rules 4 and 11).

One read of the file, one :func:`shared.rebuild.rebuild`, then verification of
the last checkpoint: the digest recomputed over the sequence as it stood at that
checkpoint must equal the stored one (``verified``), else ``mismatch``; with no
checkpoint the status is ``no_checkpoint`` (also a degraded entry).

Tokens are estimated, not counted: ``ceil(len(canonical JSON bytes) / 4)`` per
message, the common ~4 bytes-per-token rule for English text and code (the
canonical form is that of the digest, so reasoning counts). Over ``token_budget``
the result carries both ``too_large`` and the rebuilt messages, so the caller
can write a degraded hand-off from the same facts without a second read.

Replay never uses the lossy memory view.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.digest import DigestBuilder, single_reasoning_digest
from shared.layout import read_session_file
from shared.rebuild import DAMAGE_KINDS, CheckpointRecord, DegradedEntry, DegradedKind, Rebuild, rebuild
from shared.rebuild_index import MessageSource, index_rebuild


class DigestStatus(enum.StrEnum):
    VERIFIED = "verified"
    MISMATCH = "mismatch"
    NO_CHECKPOINT = "no_checkpoint"


def checkpoint_status(checkpoint: CheckpointRecord, computed: str, message_count: int) -> DigestStatus:
    """VERIFIED when the recomputed digest and message count equal the checkpoint's and the
    checkpoint is sound (no damage before it, its lines digest holds), else MISMATCH."""
    matches = checkpoint.sound and computed == checkpoint.digest and checkpoint.message_count == message_count
    return DigestStatus.VERIFIED if matches else DigestStatus.MISMATCH


@dataclass(frozen=True, slots=True)
class ReplayFacts:
    """What a replay reports besides its messages (SPEC §5 Replay).

    ``rebuilt`` holds the degraded ledger, the superseded outputs and the last
    checkpoint (its ``messages`` are payloads, handles or rendered entries, by the
    path that built it); ``computed_digest`` is the digest the status was decided
    on; ``estimated_tokens`` covers the returned messages (canonical bytes / 4,
    rounded up, per message); ``message_count`` is how many were returned.
    """

    rebuilt: Rebuild
    digest_status: DigestStatus
    computed_digest: str
    estimated_tokens: int
    message_count: int

    def too_large(self, token_budget: int) -> bool:
        """REPLAY_TOO_LARGE: the estimate exceeds a non-zero budget (tokens)."""
        return bool(token_budget) and self.estimated_tokens > token_budget


#: The digest of a list of items of a rebuilt sequence (payloads, handles or rendered entries).
DigestOf = Callable[[list[Any]], str]
#: The payloads of a list of such items, in order (read back when they are handles).
PayloadsOf = Callable[[list[Any]], Iterable[Mapping[str, Any]]]


def digest_of_payloads(payloads: Iterable[Mapping[str, Any]], count: int) -> str:
    """The digest of ``count`` payloads fed one at a time (bounded memory)."""
    builder = DigestBuilder(count)
    for payload in payloads:
        builder.add(payload)
    return builder.result()


def checkpoint_verification(rebuilt: Rebuild, digest_of: DigestOf) -> tuple[DigestStatus, str] | None:
    """Verify the last checkpoint by its own pass when it covers another sequence than the one
    returned (a message cap, or outputs superseded after it); None when the returned pass can.
    """
    checkpoint, covered = rebuilt.last_checkpoint, rebuilt.checkpoint_messages
    if checkpoint is None or covered is None or covered == rebuilt.messages:
        return None
    computed = digest_of(covered)
    return checkpoint_status(checkpoint, computed, len(covered)), computed


def digest_status_of(
    rebuilt: Rebuild,
    separate: tuple[DigestStatus, str] | None,
    returned_digest: str,
    returned_count: int,
    payloads_of: PayloadsOf,
) -> tuple[DigestStatus, str]:
    """(status, digest) of a replay whose returned messages digest to ``returned_digest``.

    ``separate`` is :func:`checkpoint_verification`'s answer. No checkpoint adds the
    ``no_checkpoint`` degraded entry. A mismatch is looked at once more under the
    reading of versions that attached only the last of several reasoning blocks
    (:func:`shared.digest.single_reasoning_digest`): a checkpoint those versions
    wrote over a sound file verifies, with a ``single_reasoning_checkpoint`` note.
    """
    if separate is not None:
        status, computed = separate
    else:
        checkpoint = rebuilt.last_checkpoint
        if checkpoint is None:
            rebuilt.degraded.append(
                DegradedEntry(
                    DegradedKind.NO_CHECKPOINT, 0, 0, "no agent_checkpoint: nothing to verify against"
                )
            )
            return DigestStatus.NO_CHECKPOINT, returned_digest
        status, computed = checkpoint_status(checkpoint, returned_digest, returned_count), returned_digest
    if status is DigestStatus.MISMATCH and _single_reasoning_verifies(rebuilt, payloads_of):
        return DigestStatus.VERIFIED, computed
    return status, computed


def _single_reasoning_verifies(rebuilt: Rebuild, payloads_of: PayloadsOf) -> bool:
    """True (and a note added) when the last checkpoint matches the single-reasoning reading."""
    checkpoint, covered = rebuilt.last_checkpoint, rebuilt.checkpoint_messages
    if checkpoint is None or covered is None or checkpoint.message_count != len(covered):
        return False
    if not checkpoint.sound:
        return False
    legacy = single_reasoning_digest(payloads_of(covered), len(covered))
    if legacy != checkpoint.digest:
        return False
    rebuilt.degraded.append(
        DegradedEntry(
            DegradedKind.SINGLE_REASONING_CHECKPOINT,
            checkpoint.line,
            checkpoint.offset,
            "the checkpoint was written by a version that attached only the last of several reasoning"
            " blocks; it verifies under that reading, and replay returns every block",
        )
    )
    return True


def _same(items: list[Any]) -> list[Any]:
    return items


def replay_bytes(data: bytes, max_messages: int = 0) -> ReplayFacts:
    """Replay from the bytes of one session file, in memory (see module doc).

    Each returned message is serialized to its canonical form once: the same bytes
    feed the digest and the token estimate.
    """
    rebuilt = rebuild(data, max_messages=max_messages)
    separate = checkpoint_verification(rebuilt, lambda items: digest_of_payloads(items, len(items)))
    builder = DigestBuilder(len(rebuilt.messages))
    tokens = sum((builder.add(message) + 3) // 4 for message in rebuilt.messages)
    status, computed = digest_status_of(rebuilt, separate, builder.result(), len(rebuilt.messages), _same)
    return ReplayFacts(rebuilt, status, computed, tokens, len(rebuilt.messages))


def replay_file(path: Path, max_messages: int = 0) -> ReplayFacts:
    """Replay one session file, read once, in memory. Raises OSError when it cannot be read
    (ELOOP for a symbolic link: never followed)."""
    with read_session_file(path) as handle:
        data = handle.read()
    return replay_bytes(data, max_messages)


#: Canonical bytes of messages gathered into one StreamReplay chunk (~ its size on the wire).
STREAM_CHUNK_BYTES = 1024 * 1024


def stream_replay(
    path: Path, max_messages: int = 0, chunk_bytes: int = STREAM_CHUNK_BYTES
) -> Generator[tuple[int, list[dict[str, Any]], ReplayFacts | None], None, None]:
    """Replay in bounded memory: yields (first index, payloads, None) chunks, then the facts.

    The last item is ``(message_count, [], facts)``. The file is indexed once
    (shared.rebuild_index), then the messages are read back by offset chunk by
    chunk; the checkpoint digest is computed on the way when it covers the
    returned sequence, otherwise by one more pass before streaming. Raises
    OSError when the file cannot be read.
    """
    rebuilt = index_rebuild(path, max_messages=max_messages)
    handles = rebuilt.messages
    with MessageSource(path) as source:

        def payloads_of(items: list[Any]) -> Iterable[dict[str, Any]]:
            return map(source.message, items)

        separate = checkpoint_verification(
            rebuilt, lambda items: digest_of_payloads(payloads_of(items), len(items))
        )
        builder = DigestBuilder(len(handles))
        tokens = 0
        chunk: list[dict[str, Any]] = []
        size = 0
        first = 0
        for position, handle in enumerate(handles):
            payload = source.message(handle)
            length = builder.add(payload)
            tokens += (length + 3) // 4
            chunk.append(payload)
            size += length
            if size >= chunk_bytes:
                yield first, chunk, None
                first, chunk, size = position + 1, [], 0
        if chunk:
            yield first, chunk, None
        status, computed = digest_status_of(rebuilt, separate, builder.result(), len(handles), payloads_of)
    yield len(handles), [], ReplayFacts(rebuilt, status, computed, tokens, len(handles))


def verify_session(path: Path) -> ReplayFacts:
    """Full integrity check in bounded memory (every line parsed, seqs, last checkpoint digest)."""
    ((_, _, facts),) = deque(stream_replay(path), maxlen=1)  # chunks are dropped as they come
    if facts is None:
        raise RuntimeError("stream_replay ended without its facts")
    return facts


def verify_findings(summary: ReplayFacts) -> tuple[bool, list[str]]:
    """(ok, sentences) for a person: ok when nothing is damaged and the checkpoint does not mismatch."""
    rebuilt = summary.rebuilt
    findings = [
        f"{rebuilt.records} records, seqs 0..{rebuilt.last_seq}, {rebuilt.committed_bytes} committed bytes,"
        f" {summary.message_count} messages in the rebuilt sequence"
    ]
    if rebuilt.unchecked_lines:
        findings.append(
            f"{rebuilt.unchecked_lines} lines carry no line check (written before line checks existed)"
        )
    checkpoint = rebuilt.last_checkpoint
    if summary.digest_status is DigestStatus.VERIFIED and checkpoint is not None:
        findings.append(f"last checkpoint (seq {checkpoint.seq}) verifies: {summary.computed_digest}")
    elif checkpoint is not None and not checkpoint.sound:
        findings.append(
            f"last checkpoint (seq {checkpoint.seq}) does NOT verify: lines before it are damaged (below)"
        )
    elif summary.digest_status is DigestStatus.MISMATCH and checkpoint is not None:
        findings.append(
            f"last checkpoint (seq {checkpoint.seq}) does NOT verify: stored {checkpoint.digest},"
            f" recomputed {summary.computed_digest}"
        )
    else:
        findings.append("no checkpoint: the session was never stopped, nothing to verify against")
    # Damage makes a session not OK; compactions, unanswered calls, a write in
    # progress (uncommitted tail) and other model-view notes are reported, not failed.
    serious = [entry for entry in rebuilt.degraded if entry.kind in DAMAGE_KINDS]
    notes = [
        entry
        for entry in rebuilt.degraded
        if entry.kind not in DAMAGE_KINDS and entry.kind != DegradedKind.NO_CHECKPOINT
    ]
    for entry in serious:
        findings.append(f"{entry.kind} at line {entry.line} (byte {entry.offset}): {entry.detail}")
    for entry in notes:
        findings.append(f"note: {entry.kind} at line {entry.line}: {entry.detail}")
    ok = not serious and summary.digest_status is not DigestStatus.MISMATCH
    return ok, findings
