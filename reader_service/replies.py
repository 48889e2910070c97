"""The serialized answers of the heavy reads, each within the reader's reply limit.

A unary replay comes from the replay cache (:mod:`reader_service.replay_cache`)
when the session file is small enough to be cached, and is otherwise rendered
in bounded memory from :func:`reader_service.replay.stream_replay`; both give the
same bytes. A unary read of a file larger than the reply limit is refused before
the file is read (:func:`check_unary_size`): its messages could not fit in one
reply. Streamed answers are cut into chunks of about :data:`CHUNK_BYTES` of
rendered messages. Every function here runs on an I/O thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from reader_service import wire
from reader_service.memory_view import MemoryViewer, stream_memory_view
from reader_service.replay import stream_replay
from reader_service.replay_cache import RecentMessages, ReplayCache
from shared.errors import ReplyTooLargeError
from shared.rebuild_index import MessageSource, index_recent

#: Rendered message bytes gathered into one streamed chunk (a chunk holds at least one message).
CHUNK_BYTES = 1024 * 1024


def check_unary_size(
    rpc: str, stream_rpc: str, session_id: str, file_bytes: int, max_reply_bytes: int
) -> None:
    """Refuse, before any read, a unary answer whose session file is larger than the reply limit.

    A replay returns about the file's message bytes (each message once, without
    its line envelope), so a file over the limit cannot be answered in one reply.
    Raises ReplyTooLargeError (RESOURCE_EXHAUSTED) naming ``stream_rpc``.
    """
    if file_bytes > max_reply_bytes:
        raise ReplyTooLargeError(
            f"{rpc}: the session file of {session_id} is {file_bytes} bytes, over the {max_reply_bytes}-byte"
            f" unary reply limit; its answer cannot fit in one reply: use {stream_rpc}"
        )


def _within(reply: bytes, session_id: str, max_reply_bytes: int, stream_rpc: str) -> bytes:
    if len(reply) > max_reply_bytes:
        raise ReplyTooLargeError(
            f"the answer for {session_id} is {len(reply)} bytes, over the {max_reply_bytes}-byte unary reply"
            f" limit; use {stream_rpc}"
        )
    return reply


def replay_reply(
    cache: ReplayCache,
    session_id: str,
    path: Path,
    token_budget: int,
    max_messages: int,
    max_reply_bytes: int,
) -> bytes:
    """The serialized ReplayResponse of one session file (from the cache, or bounded).

    Raises ReplyTooLargeError when it exceeds ``max_reply_bytes``, OSError when
    the file cannot be read.
    """
    rendered = cache.rendered(path, max_messages)
    if rendered is None:
        chunks = stream_replay(path, max_messages)
        reply = wire.replay_reply_from_stream(session_id, chunks, token_budget, max_reply_bytes)
    else:
        reply = wire.replay_reply(session_id, rendered.entries, rendered.facts, token_budget)
    return _within(reply, session_id, max_reply_bytes, "StreamReplay")


def recent_reply(
    cache: ReplayCache,
    session_id: str,
    path: Path,
    limit: int,
    canonical: bool,
    max_reply_bytes: int,
    view: wire.ViewHeld | None = None,
) -> bytes:
    """The serialized RecentMessagesResponse of one session file: with a limit, of a file the
    cache does not hold, from the file's tail (shared.rebuild_tail); otherwise, or when the
    tail cannot settle it, from the cache, or rebuilt in bounded memory (offsets) with only
    the returned messages read back. ``view``: what the caller holds; the cache and the tail
    answer only what follows it when it continues (``continues_view``; for a file the cache
    does not hold, an unchanged one is told so from its last record), the bounded rebuild
    always in full.

    Raises ReplyTooLargeError when it exceeds ``max_reply_bytes``, OSError when the file
    cannot be read.
    """
    if limit > 0:
        recent = cache.recent_from_tail(path, limit, canonical, view)
    else:
        recent = cache.unchanged_since(path, view) if view is not None else None
    if recent is None:
        recent = cache.recent(path, limit, canonical, view)
    if recent is None:
        handles, origins, count, next_seq = index_recent(path, limit)
        render = wire.canonical_message_entry if canonical else wire.message_entry
        with MessageSource(path) as source:
            entries = [render(source.message(handle)) for handle in handles]
        recent = RecentMessages(entries, origins, count, next_seq)
    reply = wire.recent_reply(
        session_id,
        recent.entries,
        recent.origins,
        recent.message_count,
        recent.next_seq,
        recent.count_at_least,
        recent.continues,
    )
    return _within(reply, session_id, max_reply_bytes, "StreamReplay (or ask for fewer messages)")


def replay_chunks(session_id: str, path: Path, token_budget: int, max_messages: int) -> Iterator[bytes]:
    """Serialized ReplayChunks of one session file, then one with the summary (bounded memory)."""
    chunks = stream_replay(path, max_messages, chunk_bytes=CHUNK_BYTES)
    try:
        for first, payloads, facts in chunks:
            yield wire.replay_chunk(session_id, first, payloads, facts, token_budget)
    finally:
        chunks.close()


def memory_view_reply(session_id: str, path: Path, viewer: MemoryViewer, max_reply_bytes: int) -> bytes:
    """The serialized MemoryViewResponse of one session file, built in bounded memory.

    Raises ReplyTooLargeError as soon as the messages exceed ``max_reply_bytes``.
    """
    entries: list[bytes] = []
    size = 0
    for message in stream_memory_view(path, viewer):
        entry = wire.message_entry(message)
        size += len(entry)
        if size > max_reply_bytes:
            raise ReplyTooLargeError(
                f"the memory view of {session_id} holds more than {max_reply_bytes} bytes of messages,"
                " over the unary reply limit; use StreamMemoryView"
            )
        entries.append(entry)
    return _within(
        wire.memory_view_reply(session_id, entries, viewer.view),
        session_id,
        max_reply_bytes,
        "StreamMemoryView",
    )


def memory_view_chunks(session_id: str, path: Path, viewer: MemoryViewer) -> Iterator[bytes]:
    """Serialized MemoryViewChunks of one session file, the counters on the last (bounded memory)."""
    pending: list[dict[str, object]] = []
    first = position = size = 0
    for message in stream_memory_view(path, viewer):
        pending.append(message)
        position += 1
        size += len(str(message.get("content", "")))
        if size >= CHUNK_BYTES:
            yield wire.memory_view_chunk(session_id, first, pending, None)
            pending, first, size = [], position, 0
    yield wire.memory_view_chunk(session_id, first, pending, viewer.view, position)
