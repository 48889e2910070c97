"""Exact replay of a session (docs/spec.md §5 Replay, seed rules 4 and 11).

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

from shared.digest import DigestBuilder, digest_of_payloads
from shared.layout import read_session_file
from shared.rebuild import (
    DAMAGE_KINDS,
    CheckpointReading,
    DegradedEntry,
    DegradedKind,
    Rebuild,
    read_checkpoint,
    rebuild,
)
from shared.rebuild_index import MessageSource, index_rebuild


class DigestStatus(enum.StrEnum):
    VERIFIED = "verified"
    MISMATCH = "mismatch"
    NO_CHECKPOINT = "no_checkpoint"


@dataclass(frozen=True, slots=True)
class ReplayFacts:
    """What a replay reports besides its messages (docs/spec.md §5 Replay).

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


def checkpoint_verification(rebuilt: Rebuild, digest_of: DigestOf) -> str | None:
    """The digest of the sequence the last checkpoint covers, by a pass of its own when that is
    another sequence than the one returned (a message cap, or outputs superseded after it); None
    when the returned pass gives it (or there is no checkpoint)."""
    checkpoint, covered = rebuilt.last_checkpoint, rebuilt.checkpoint_messages
    if checkpoint is None or covered is None or covered == rebuilt.messages:
        return None
    return digest_of(covered)


def digest_status_of(
    rebuilt: Rebuild, separate: str | None, returned_digest: str, payloads_of: PayloadsOf
) -> tuple[DigestStatus, str]:
    """(status, digest) of a replay whose returned messages digest to ``returned_digest``.

    ``separate`` is :func:`checkpoint_verification`'s answer. The last checkpoint is
    read by :func:`shared.rebuild.read_checkpoint` (the writer's rule too): VERIFIED
    when it is sound and its digest and message count are those of the sequence it
    covers, or those of the reading of versions that attached only the last of
    several reasoning blocks (then with a ``single_reasoning_checkpoint`` note);
    MISMATCH otherwise. No checkpoint adds the ``no_checkpoint`` degraded entry.
    """
    checkpoint, covered = rebuilt.last_checkpoint, rebuilt.checkpoint_messages
    if checkpoint is None or covered is None:
        rebuilt.degraded.append(
            DegradedEntry(DegradedKind.NO_CHECKPOINT, 0, 0, "no agent_checkpoint: nothing to verify against")
        )
        return DigestStatus.NO_CHECKPOINT, returned_digest
    computed = returned_digest if separate is None else separate
    reading = read_checkpoint(checkpoint, len(covered), computed, lambda: payloads_of(covered))
    if reading is CheckpointReading.MISMATCH:
        return DigestStatus.MISMATCH, computed
    if reading is CheckpointReading.SINGLE_REASONING:
        rebuilt.degraded.append(
            DegradedEntry(
                DegradedKind.SINGLE_REASONING_CHECKPOINT,
                checkpoint.line,
                checkpoint.offset,
                "the checkpoint was written by a version that attached only the last of several reasoning"
                " blocks; it verifies under that reading, and replay returns every block",
            )
        )
    return DigestStatus.VERIFIED, computed


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
    status, computed = digest_status_of(rebuilt, separate, builder.result(), _same)
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
        status, computed = digest_status_of(rebuilt, separate, builder.result(), payloads_of)
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
