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
from dataclasses import dataclass
from pathlib import Path

from shared.digest import canonical_message, digest
from shared.rebuild import DegradedEntry, DegradedKind, Rebuild, rebuild


class DigestStatus(enum.StrEnum):
    VERIFIED = "verified"
    MISMATCH = "mismatch"
    NO_CHECKPOINT = "no_checkpoint"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A rebuilt session plus its verification and budget outcome (tokens estimated)."""

    rebuilt: Rebuild
    digest_status: DigestStatus
    computed_digest: str
    estimated_tokens: int
    token_budget: int

    @property
    def too_large(self) -> bool:
        """REPLAY_TOO_LARGE: the estimate exceeds a non-zero budget."""
        return bool(self.token_budget) and self.estimated_tokens > self.token_budget


def estimate_tokens(rebuilt: Rebuild) -> int:
    """Estimated tokens of the rebuilt messages: sum of ceil(canonical bytes / 4)."""
    return sum((len(canonical_message(message)) + 3) // 4 for message in rebuilt.messages)


def replay_bytes(data: bytes, token_budget: int = 0, max_messages: int = 0) -> ReplayResult:
    """Replay from the bytes of one session file (see module doc)."""
    rebuilt = rebuild(data, max_messages=max_messages)
    checkpoint = rebuilt.last_checkpoint
    if checkpoint is None or rebuilt.checkpoint_messages is None:
        computed = digest(rebuilt.messages)
        status = DigestStatus.NO_CHECKPOINT
        rebuilt.degraded.append(
            DegradedEntry(DegradedKind.NO_CHECKPOINT, 0, 0, "no agent_checkpoint: nothing to verify against")
        )
    else:
        computed = digest(rebuilt.checkpoint_messages)
        matches = computed == checkpoint.digest and checkpoint.message_count == len(
            rebuilt.checkpoint_messages
        )
        status = DigestStatus.VERIFIED if matches else DigestStatus.MISMATCH
    return ReplayResult(rebuilt, status, computed, estimate_tokens(rebuilt), token_budget)


def replay_file(path: Path, token_budget: int = 0, max_messages: int = 0) -> ReplayResult:
    """Replay one session file, read once. Raises OSError when it cannot be read."""
    return replay_bytes(path.read_bytes(), token_budget, max_messages)
