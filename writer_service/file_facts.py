"""What Stop, Resume and Fork learn from a whole-file rebuild, in bounded memory (SPEC §2.6-2.8).

:func:`file_facts` rebuilds a session file with the shared rules in bounded
memory (:func:`shared.rebuild_index.index_rebuild`: one small handle per message,
never the payloads) and, when asked, streams the digest of the rebuilt messages
(:class:`shared.digest.DigestBuilder`, reading each message's line back by its
offset). So a 500 MB session is stopped, resumed or forked with memory that grows
with its number of messages and open tool calls, not with its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.digest import DigestBuilder
from shared.errors import CorruptSessionError
from shared.rebuild import DegradedEntry, collector_paused
from shared.rebuild_index import MessageSource, index_rebuild


@dataclass(frozen=True, slots=True)
class RebuiltFacts:
    """What Stop, Resume and Fork need of a rebuild, without its payloads.

    ``damage`` is the first damaged line (None: sound); ``digest`` the shared.digest
    of the rebuilt messages ("" when not asked for); ``call_ids`` the calls an
    output may still answer, ``unanswered_call_ids`` those without one, in call
    order; ``committed_bytes`` the length up to the last ``\\n`` read.
    """

    damage: DegradedEntry | None
    digest: str
    message_count: int
    unanswered_call_ids: list[str]
    call_ids: set[str]
    session_meta: dict[str, Any] | None
    last_seq: int
    committed_bytes: int


def file_facts(path: Path, with_digest: bool, end: int | None = None) -> RebuiltFacts:
    """Rebuild ``path`` (its first ``end`` bytes when given) and keep only its facts.

    CPU-bound (about 1 s per 100 MB, more with the digest): run it on an I/O thread,
    never on the event loop. Raises OSError when the file cannot be read; never
    raises on bad content (see ``damage``). Source: SPEC §2.6 (the checkpoint
    digest, from the whole file, with the reader's own rebuild), §2.8.
    """
    with collector_paused():
        found = index_rebuild(path, end=end)
        message_digest = ""
        if with_digest:
            builder = DigestBuilder(len(found.messages))
            with MessageSource(path) as source:
                for handle in found.messages:
                    builder.add(source.message(handle))
            message_digest = builder.result()
        facts = RebuiltFacts(
            found.damage,
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


def refuse_damage(damage: DegradedEntry | None, name: str, operation: str) -> None:
    """Raise CorruptSessionError (DATA_LOSS) naming the first damaged line of a rebuild, if any."""
    if damage is not None:
        raise CorruptSessionError(
            f"cannot {operation}: session file {name} is damaged at line {damage.line} (byte"
            f" {damage.offset}): {damage.kind}: {damage.detail}; nothing was written (see rollout verify)"
        )
