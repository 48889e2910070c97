"""Every conversion between the reader's protobuf messages and its domain objects.

Requests in: replay and memory-view limits, listing filters (INVALID_ARGUMENT on
bad values). Replies out: messages, degraded entries, checkpoints, stop facts,
replay summaries, verify reports, memory views, listings and delegations. The
record payload -> ``ChatMessage`` direction is the reader half of the reasoning
duality of docs/spec.md §2.5 (the writer half, ``ChatMessage`` -> payloads, is
:func:`shared.wire.append_payloads`): one reasoning block travels in
``reasoning``, several in ``reasoning_blocks`` (:func:`shared.wire.fill_message`,
shared with the Python client).

Replay replies are assembled from bytes rather than built as one message: each
returned message is rendered once into its serialized entry of the reply's
``messages`` field (:func:`message_entry`), and a reply is the serialized header
(field 1) + the entries (field 2) + the serialized summary fields (3-9). Protobuf
writes known fields in field-number order and a repeated message field as one
entry per element, so these bytes equal ``ReplayResponse.SerializeToString(
deterministic=True)`` of the same reply (a test pins it), while the replay cache
(:mod:`reader_service.replay_cache`) keeps the rendered entries and answers a
repeated replay by joining them. An entry is written straight from the payload
(:func:`message_entry`: the bytes protobuf gives for the ChatMessage
:func:`shared.wire.fill_message` makes, pinned over generated payloads): filling a
ChatMessage per message costs more than writing its bytes (the "entries" stage of
bench/replay_stages.py). Content parts (Struct maps) are still filled and
serialized by protobuf.
"""

from __future__ import annotations

import io
import re
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from reader_service.listing import SessionFilters
from reader_service.replay import DigestStatus, ReplayFacts
from reader_service.search_index import SearchFilters, SearchPage
from reader_service.stop_facts import StopFactsResult, eligibility_of
from rollout.v1 import reader_pb2, records_pb2
from shared.digest import framed_canonical
from shared.errors import InvalidArgumentError, ReplyTooLargeError, clip
from shared.rebuild import CheckpointRecord, DegradedEntry
from shared.records import ORIGIN_INDEX_BITS, format_timestamp, parse_timestamp, reasoning_blocks_of
from shared.wire import fill_message

if TYPE_CHECKING:
    from reader_service.delegations import DelegationLink
    from reader_service.listing import ListingPage, SessionListing
    from reader_service.memory_view import MemoryView
    from reader_service.watch import WatchedLine

DIGEST_STATUS = {
    DigestStatus.VERIFIED: reader_pb2.DIGEST_STATUS_VERIFIED,
    DigestStatus.MISMATCH: reader_pb2.DIGEST_STATUS_MISMATCH,
    DigestStatus.NO_CHECKPOINT: reader_pb2.DIGEST_STATUS_NO_CHECKPOINT,
}


# -- requests ---------------------------------------------------------------------------------


def check_replay_request(request: reader_pb2.ReplayRequest) -> None:
    """INVALID_ARGUMENT (InvalidArgumentError) for a negative token budget or message cap."""
    if request.token_budget < 0:
        raise InvalidArgumentError("token_budget", f"must be >= 0, got {request.token_budget}")
    if request.max_messages < 0:
        raise InvalidArgumentError("max_messages", f"must be >= 0, got {request.max_messages}")


def check_memory_view_request(request: reader_pb2.MemoryViewRequest) -> None:
    """INVALID_ARGUMENT (InvalidArgumentError) for a negative character limit."""
    for field in ("max_tool_output_chars", "max_reasoning_chars"):
        if getattr(request, field) < 0:
            raise InvalidArgumentError(field, f"must be >= 0, got {getattr(request, field)}")


def _timestamp_filter(field: str, text: str) -> datetime | None:
    if not text:
        return None
    try:
        return parse_timestamp(text)
    except ValueError as exc:  # the reason quotes the text clipped (shared.records.clip)
        raise InvalidArgumentError(field, str(exc)) from exc


def listing_filters(request: reader_pb2.ListSessionsRequest) -> SessionFilters:
    """The filters of a ListSessions request; InvalidArgumentError for a bad time, id or stop state."""
    return SessionFilters(
        tenant=request.tenant,
        agent_name=request.agent_name,
        parent_session_id=request.parent_session_id,
        created_after=_timestamp_filter("created_after", request.created_after),
        created_before=_timestamp_filter("created_before", request.created_before),
        stop_state=request.stop_state,
        cwd=request.cwd,
    )


# -- messages ---------------------------------------------------------------------------------


def _tag(message: Any, field: str) -> bytes:
    """The wire tag of a length-delimited (or, for a bool, varint) field, from the descriptor."""
    descriptor = message.DESCRIPTOR.fields_by_name[field]
    wire_type = 0 if descriptor.type == descriptor.TYPE_BOOL else 2
    return bytes((descriptor.number << 3 | wire_type,))


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: Every varint below 2**14 (lengths of up to 16 KiB), looked up rather than computed.
_VARINTS = tuple(_encode_varint(value) for value in range(1 << 14))


def _varint(value: int) -> bytes:
    return _VARINTS[value] if value < 16384 else _encode_varint(value)


_ChatMessage, _ToolCall = records_pb2.ChatMessage, records_pb2.ToolCall
_FunctionCall, _Reasoning = records_pb2.FunctionCall, records_pb2.Reasoning
_ROLE, _TEXT, _NAME = _tag(_ChatMessage, "role"), _tag(_ChatMessage, "text"), _tag(_ChatMessage, "name")
_TOOL_CALLS, _TOOL_CALL_ID = _tag(_ChatMessage, "tool_calls"), _tag(_ChatMessage, "tool_call_id")
_TRUNCATION_MARKER, _REASONING = _tag(_ChatMessage, "truncation_marker"), _tag(_ChatMessage, "reasoning")
_REASONING_BLOCKS = _tag(_ChatMessage, "reasoning_blocks")
#: A bool field set to true: its tag and the varint 1.
_IS_ANCHORED, _SYNTHETIC, _IS_ERROR = (
    _tag(_ChatMessage, name) + b"\x01" for name in ("is_anchored", "synthetic", "is_error")
)
_CALL_ID, _CALL_TYPE, _FUNCTION = _tag(_ToolCall, "id"), _tag(_ToolCall, "type"), _tag(_ToolCall, "function")
_FUNCTION_NAME, _ARGUMENTS = _tag(_FunctionCall, "name"), _tag(_FunctionCall, "arguments")
_REASONING_CONTENT, _SIGNATURE = _tag(_Reasoning, "content"), _tag(_Reasoning, "signature")
_ENCRYPTED = _tag(_Reasoning, "encrypted")
#: The ``messages`` field of the replies (ReplayResponse, MemoryViewResponse) and of the chunks.
_REPLY_MESSAGES = _tag(reader_pb2.ReplayResponse, "messages")
_CHUNK_MESSAGES = _tag(reader_pb2.ReplayChunk, "messages")
_ABSENT: Any = object()


def _utf8(value: object) -> bytes:
    """A value a ChatMessage keeps as a string: a str as is, any other value as its text."""
    return value.encode() if type(value) is str else str(value).encode()


def _strings(pieces: list[bytes], fields: tuple[tuple[bytes, object], ...]) -> None:
    """Append string fields of implicit presence (written only when not empty) to ``pieces``."""
    for tag, value in fields:
        data = _utf8(value)
        if data:
            pieces += (tag, _varint(len(data)), data)


def _tool_call(call: Mapping[str, Any]) -> bytes:
    """A ToolCall's bytes as :func:`shared.wire.fill_message` sets it (``function`` always present)."""
    pieces: list[bytes] = []
    _strings(pieces, ((_CALL_ID, call.get("id", "")), (_CALL_TYPE, call.get("type", "function"))))
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    inner: list[bytes] = []
    _strings(inner, ((_FUNCTION_NAME, function.get("name", "")), (_ARGUMENTS, function.get("arguments", ""))))
    data = b"".join(inner)
    pieces += (_FUNCTION, _varint(len(data)), data)
    return b"".join(pieces)


def _reasoning(block: Mapping[str, Any]) -> bytes:
    """A Reasoning's bytes (``content`` always set, the optional fields when present)."""
    pieces: list[bytes] = []
    data = _utf8(block.get("content", ""))
    if data:
        pieces += (_REASONING_CONTENT, _varint(len(data)), data)
    if "signature" in block:
        data = _utf8(block["signature"])
        pieces += (_SIGNATURE, _varint(len(data)), data)
    if "encrypted" in block:
        data = _utf8(block["encrypted"])
        pieces += (_ENCRYPTED, _varint(len(data)), data)
    return b"".join(pieces)


def _message_pieces(tag: bytes, payload: Mapping[str, Any]) -> list[bytes] | None:
    """``tag``, the length and the fields of a payload's ChatMessage, in field-number order.

    The bytes are those of :func:`shared.wire.fill_message` and a serialization by
    protobuf (tests/reader/test_wire.py compares them over generated payloads),
    written here because filling a ChatMessage costs more than the rest of a cold
    replay's rendering. None when the content holds parts: their Struct maps are
    left to protobuf.
    """
    content = payload.get("content")
    if isinstance(content, list):
        return None
    pieces = [tag, b""]
    role = payload.get("role", _ABSENT)
    rest = len(payload)
    if role is not _ABSENT:
        rest -= 1
        data = _utf8(role)
        if data:
            pieces += (_ROLE, _varint(len(data)), data)
    if content is not None:
        rest -= 1
        data = content.encode() if isinstance(content, str) else str(content).encode()
        pieces += (_TEXT, _varint(len(data)), data)
    elif "content" in payload:
        rest -= 1
    if rest:
        _other_fields(payload, pieces)
    pieces[1] = _varint(sum(map(len, pieces)) - len(tag))
    return pieces


def _other_fields(payload: Mapping[str, Any], pieces: list[bytes]) -> None:
    """Append the fields after ``text`` (4-12) of a payload's ChatMessage to ``pieces``."""
    if "name" in payload:
        data = _utf8(payload["name"])
        pieces += (_NAME, _varint(len(data)), data)
    calls = payload.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, dict):
                data = _tool_call(call)
                pieces += (_TOOL_CALLS, _varint(len(data)), data)
    if "tool_call_id" in payload:
        data = _utf8(payload["tool_call_id"])
        pieces += (_TOOL_CALL_ID, _varint(len(data)), data)
    if payload.get("is_anchored"):
        pieces.append(_IS_ANCHORED)
    if "truncation_marker" in payload:
        data = _utf8(payload["truncation_marker"])
        pieces += (_TRUNCATION_MARKER, _varint(len(data)), data)
    blocks = reasoning_blocks_of(payload)
    if len(blocks) == 1:
        data = _reasoning(blocks[0])
        pieces += (_REASONING, _varint(len(data)), data)
    if payload.get("synthetic"):
        pieces.append(_SYNTHETIC)
    if len(blocks) > 1:
        for block in blocks:
            data = _reasoning(block)
            pieces += (_REASONING_BLOCKS, _varint(len(data)), data)
    if payload.get("is_error"):
        pieces.append(_IS_ERROR)


def message_entry(payload: Mapping[str, Any]) -> bytes:
    """One message as its serialized entry of field 2 (``messages``) of a reply: tag, length, bytes.

    The same bytes serve ReplayResponse and MemoryViewResponse, whose ``messages``
    are both field 2; :func:`chunk_entry` gives the ``messages`` entry (field 3) of
    a stream chunk. The ChatMessage is the one :func:`shared.wire.fill_message`
    makes of the payload; content parts are serialized deterministically (sorted
    Struct keys), so equal payloads give equal bytes.
    """
    pieces = _message_pieces(_REPLY_MESSAGES, payload)
    if pieces is not None:
        return b"".join(pieces)
    holder = reader_pb2.ReplayResponse()
    fill_message(holder.messages.add(), payload)
    entry: bytes = holder.SerializeToString(deterministic=True)
    return entry


def chunk_entry(payload: Mapping[str, Any]) -> bytes:
    """One message as its serialized entry of field 3 (``messages``) of a ReplayChunk or MemoryViewChunk."""
    pieces = _message_pieces(_CHUNK_MESSAGES, payload)
    if pieces is not None:
        return b"".join(pieces)
    holder = reader_pb2.ReplayChunk()
    fill_message(holder.messages.add(), payload)
    entry: bytes = holder.SerializeToString(deterministic=True)
    return entry


def degraded_to_proto(entry: DegradedEntry) -> records_pb2.DegradedEntry:
    return records_pb2.DegradedEntry(
        kind=str(entry.kind), line=entry.line, offset=entry.offset, detail=entry.detail
    )


def checkpoint_to_proto(checkpoint: CheckpointRecord) -> records_pb2.AgentCheckpoint:
    return records_pb2.AgentCheckpoint(
        digest=checkpoint.digest,
        message_count=checkpoint.message_count,
        covers_seq=checkpoint.covers_seq,
        stop_kind=checkpoint.stop_kind,
        seq=checkpoint.seq,
        lines_digest=checkpoint.lines_digest,
    )


# -- replay -----------------------------------------------------------------------------------


def _summary_fields(facts: ReplayFacts, token_budget: int) -> dict[str, Any]:
    """The fields ReplayResponse (3-9) and ReplaySummary share, by name."""
    rebuilt = facts.rebuilt
    fields: dict[str, Any] = {
        "degraded": [degraded_to_proto(entry) for entry in rebuilt.degraded],
        "superseded_outputs": rebuilt.superseded_outputs,
        "digest_status": DIGEST_STATUS[facts.digest_status],
        "computed_digest": facts.computed_digest,
        "estimated_tokens": facts.estimated_tokens,
    }
    if rebuilt.last_checkpoint is not None:
        fields["last_checkpoint"] = checkpoint_to_proto(rebuilt.last_checkpoint)
    if facts.too_large(token_budget):
        fields["too_large"] = reader_pb2.ReplayTooLarge(
            estimated_tokens=facts.estimated_tokens, token_budget=token_budget
        )
    return fields


def replay_reply(session_id: str, entries: Iterable[bytes], facts: ReplayFacts, token_budget: int) -> bytes:
    """The serialized ReplayResponse: header, message entries (:func:`message_entry`), summary."""
    head = reader_pb2.ReplayResponse(session_id=session_id).SerializeToString()
    tail = reader_pb2.ReplayResponse(**_summary_fields(facts, token_budget)).SerializeToString(
        deterministic=True
    )
    return b"".join((head, *entries, tail))


def recent_reply(
    session_id: str,
    entries: Iterable[bytes],
    origins: Iterable[int],
    message_count: int,
    next_seq: int,
    count_at_least: bool = False,
    continues: bool = False,
) -> bytes:
    """The serialized RecentMessagesResponse: header, message entries (:func:`message_entry`, field 2
    as in a ReplayResponse), then each message's origin, the count (a lower bound with
    ``count_at_least``), the next seq, and whether the entries continue the caller's view."""
    head = reader_pb2.RecentMessagesResponse(session_id=session_id).SerializeToString()
    seqs, indexes = origin_arrays(origins)
    tail = reader_pb2.RecentMessagesResponse(
        origin_seqs=seqs,
        origin_history_indexes=indexes,
        message_count=message_count,
        next_seq=next_seq,
        message_count_at_least=count_at_least,
        continues_view=continues,
    ).SerializeToString()
    return b"".join((head, *entries, tail))


def origin_arrays(origins: Iterable[int]) -> tuple[list[int], list[int]]:
    """Message origins (shared.records.message_origin) as RecentMessagesResponse's two arrays:
    the seqs, and the replacement-history indexes (-1: a message record or a summary)."""
    bits = ORIGIN_INDEX_BITS
    mask = (1 << bits) - 1
    held = list(origins)
    return [origin >> bits for origin in held], [(origin & mask) - 1 for origin in held]


#: Tag of RecentMessagesResponse.canonical_messages (field 6, length-delimited).
_CANONICAL_TAG = _tag(reader_pb2.RecentMessagesResponse, "canonical_messages")


def canonical_entry(framed: bytes) -> bytes:
    """One message's entry of RecentMessagesResponse.canonical_messages, from its framed canonical
    bytes (:func:`shared.digest.framed_canonical`: an 8-byte length, then the canonical JSON)."""
    return _CANONICAL_TAG + _varint(len(framed) - 8) + framed[8:]


def canonical_message_entry(payload: Mapping[str, Any]) -> bytes:
    """One rebuilt message payload as its entry of RecentMessagesResponse.canonical_messages."""
    return canonical_entry(framed_canonical(payload))


@dataclass(frozen=True, slots=True)
class ViewHeld:
    """The view a GetRecentMessages caller already holds: the next seq it was read at, and its
    message count when known exactly (RecentMessagesRequest.since_next_seq, since_message_count)."""

    next_seq: int
    message_count: int | None


def check_recent_request(request: reader_pb2.RecentMessagesRequest) -> ViewHeld | None:
    """The view the caller holds (None: none given); refuses (InvalidArgumentError naming the
    field) a negative limit, since_next_seq or since_message_count."""
    if request.limit < 0:
        raise InvalidArgumentError("limit", f"must be 0 (all messages) or more, got {request.limit}")
    if request.since_next_seq < 0:
        raise InvalidArgumentError(
            "since_next_seq",
            f"must be the next_seq of a reply (0: no view held), got {request.since_next_seq}",
        )
    count = request.since_message_count if request.HasField("since_message_count") else None
    if count is not None and count < 0:
        raise InvalidArgumentError(
            "since_message_count", f"must be the held view's message count (0 or more), got {count}"
        )
    return ViewHeld(request.since_next_seq, count) if request.since_next_seq else None


def replay_summary(facts: ReplayFacts, token_budget: int) -> reader_pb2.ReplaySummary:
    """The summary the last StreamReplay chunk carries."""
    return reader_pb2.ReplaySummary(**_summary_fields(facts, token_budget), message_count=facts.message_count)


def replay_chunk(
    session_id: str, first: int, payloads: list[dict[str, Any]], facts: ReplayFacts | None, token_budget: int
) -> bytes:
    """One serialized ReplayChunk: its messages, and the summary when ``facts`` is given (the last)."""
    head = reader_pb2.ReplayChunk(session_id=session_id, first_index=first).SerializeToString()
    entries = [chunk_entry(payload) for payload in payloads]
    tail = b""
    if facts is not None:
        summary = reader_pb2.ReplayChunk(summary=replay_summary(facts, token_budget))
        tail = summary.SerializeToString(deterministic=True)
    return b"".join((head, *entries, tail))


def replay_reply_from_stream(
    session_id: str,
    chunks: Generator[tuple[int, list[dict[str, Any]], ReplayFacts | None], None, None],
    token_budget: int,
    max_reply_bytes: int,
) -> bytes:
    """A ReplayResponse rendered from :func:`reader_service.replay.stream_replay`'s chunks.

    Each message's entry is written into one growing buffer as soon as it is
    rendered (never kept besides it), so the reply is held about once while it is
    built. Raises ReplyTooLargeError (RESOURCE_EXHAUSTED) as soon as the messages
    exceed ``max_reply_bytes``, pointing to StreamReplay; the generator is closed
    either way.
    """
    reply = io.BytesIO()
    reply.write(reader_pb2.ReplayResponse(session_id=session_id).SerializeToString())
    facts: ReplayFacts | None = None
    try:
        for _, payloads, last in chunks:
            for payload in payloads:
                reply.write(message_entry(payload))
            if reply.tell() > max_reply_bytes:
                raise ReplyTooLargeError(
                    f"the replay of {session_id} holds more than {max_reply_bytes} bytes of messages,"
                    " over the unary reply limit; use StreamReplay"
                )
            facts = last if last is not None else facts
    finally:
        chunks.close()
    if facts is None:
        raise RuntimeError("stream_replay ended without its summary")
    tail = reader_pb2.ReplayResponse(**_summary_fields(facts, token_budget))
    reply.write(tail.SerializeToString(deterministic=True))
    return reply.getvalue()


def verify_report(
    session_id: str, facts: ReplayFacts, ok: bool, findings: list[str]
) -> reader_pb2.VerifyReport:
    """A VerifySession answer."""
    rebuilt = facts.rebuilt
    report = reader_pb2.VerifyReport(
        session_id=session_id,
        ok=ok,
        records=rebuilt.records,
        last_seq=rebuilt.last_seq,
        committed_bytes=rebuilt.committed_bytes,
        message_count=facts.message_count,
        digest_status=DIGEST_STATUS[facts.digest_status],
        computed_digest=facts.computed_digest,
        degraded=[degraded_to_proto(entry) for entry in rebuilt.degraded],
        findings=findings,
    )
    if rebuilt.last_checkpoint is not None:
        report.last_checkpoint.CopyFrom(checkpoint_to_proto(rebuilt.last_checkpoint))
    return report


# -- memory view ------------------------------------------------------------------------------


def memory_view_reply(session_id: str, entries: Iterable[bytes], view: MemoryView) -> bytes:
    """The serialized MemoryViewResponse: header, message entries (field 2), counters."""
    head = reader_pb2.MemoryViewResponse(session_id=session_id).SerializeToString()
    tail = reader_pb2.MemoryViewResponse(
        dropped_system_messages=view.dropped_system_messages,
        truncated_tool_outputs=view.truncated_tool_outputs,
        shortened_reasoning=view.shortened_reasoning,
    ).SerializeToString()
    return b"".join((head, *entries, tail))


def memory_view_chunk(
    session_id: str,
    first: int,
    messages: list[dict[str, Any]],
    view: MemoryView | None,
    message_count: int = 0,
) -> bytes:
    """One serialized MemoryViewChunk; the counters and the view's length only when ``view`` is given."""
    head = reader_pb2.MemoryViewChunk(session_id=session_id, first_index=first).SerializeToString()
    entries = [chunk_entry(message) for message in messages]
    tail = b""
    if view is not None:
        summary = reader_pb2.MemoryViewSummary(
            dropped_system_messages=view.dropped_system_messages,
            truncated_tool_outputs=view.truncated_tool_outputs,
            shortened_reasoning=view.shortened_reasoning,
            message_count=message_count,
        )
        tail = reader_pb2.MemoryViewChunk(summary=summary).SerializeToString()
    return b"".join((head, *entries, tail))


# -- stop facts, listing, delegations ---------------------------------------------------------


def stop_facts_to_proto(
    session_id: str, facts: StopFactsResult, meta: Mapping[str, Any]
) -> reader_pb2.StopFacts:
    """StopFacts with its resume eligibility (default-deny, shared.stop_kinds)."""
    message = reader_pb2.StopFacts(
        session_id=session_id,
        found=facts.found,
        stop_kind=facts.stop_kind,
        reason=facts.reason,
        has_stop_record=facts.has_stop_record,
        stop_seq=facts.stop_seq,
        tail_bytes_read=facts.tail_bytes_read,
        next_seq=facts.next_seq,
    )
    if facts.error:
        message.error.message = str(facts.error.get("message", ""))
        message.error.category = str(facts.error.get("category", ""))
    if facts.checkpoint is not None:
        message.checkpoint.CopyFrom(checkpoint_to_proto(facts.checkpoint))
    eligibility = eligibility_of(facts, dict(meta))
    message.resume.replayable = eligibility.replayable
    message.resume.reason = eligibility.reason
    message.damage.extend(degraded_to_proto(entry) for entry in facts.damage)
    return message


def session_summary(listing: SessionListing) -> reader_pb2.SessionSummary:
    """One ListSessions entry: the file name, the head, the activity and the stop facts."""
    name, meta, activity = listing.name, listing.meta, listing.activity
    return reader_pb2.SessionSummary(
        session_id=name.session_id,
        agent_name=name.agent_name,
        created_at=str(meta.get("created_at", name.created_at.isoformat())),
        tenant=str(meta.get("tenant", "")),
        parent_session_id=str(meta.get("parent_session_id", "")),
        delegation_id=str(meta.get("delegation_id", "")),
        stop_facts=stop_facts_to_proto(name.session_id, listing.stop_facts, meta),
        preview=activity.preview,
        updated_at=activity.updated_at,
        message_count=activity.message_count,
        cwd=str(meta.get("cwd", "")),
        model=str(meta.get("model", "")),
        size_bytes=activity.size,
        title=activity.title,
        branch=activity.branch,
    )


def listing_page(page: ListingPage) -> reader_pb2.ListSessionsResponse:
    """A ListSessions answer."""
    return reader_pb2.ListSessionsResponse(
        sessions=[session_summary(listing) for listing in page.sessions],
        next_page_token=page.next_page_token,
        scanned=page.scanned,
        scan_capped=page.scan_capped,
    )


#: Hits per SearchSessions page: the default and the most.
SEARCH_PAGE_SIZE, MAX_SEARCH_PAGE_SIZE = 20, 100
_SEARCH_TOKEN = re.compile(r"s1:([0-9]{1,9})")


def search_request(request: reader_pb2.SearchSessionsRequest) -> tuple[int, int, SearchFilters]:
    """(page size, offset, filters but the tenant) of a SearchSessions request;
    InvalidArgumentError for a page size out of range, a malformed page_token or since (the
    query is checked by reader_service.search_index.fts_terms)."""
    if not 0 <= request.page_size <= MAX_SEARCH_PAGE_SIZE:
        raise InvalidArgumentError("page_size", f"must be 0..{MAX_SEARCH_PAGE_SIZE}, got {request.page_size}")
    offset = 0
    if request.page_token:
        token = _SEARCH_TOKEN.fullmatch(request.page_token)
        if token is None:
            raise InvalidArgumentError(
                "page_token", f"{clip(request.page_token)!r} is not a token this reader gave; leave it empty"
            )
        offset = int(token.group(1))
    since = _timestamp_filter("since", request.since)
    filters = SearchFilters(
        cwd=request.cwd,
        branch=request.branch,
        agent=request.agent_name,
        since=format_timestamp(since) if since is not None else "",
    )
    return request.page_size or SEARCH_PAGE_SIZE, offset, filters


def search_page(page: SearchPage) -> reader_pb2.SearchSessionsResponse:
    """A SearchSessions answer."""
    return reader_pb2.SearchSessionsResponse(
        hits=[
            reader_pb2.SessionHit(
                session_id=hit.session_id,
                tenant=hit.tenant,
                agent_name=hit.agent,
                cwd=hit.cwd,
                branch=hit.branch,
                created_at=hit.created_at,
                updated_at=hit.updated_at,
                title=hit.title,
                title_match=hit.title_match,
                match_count=hit.match_count,
                score=hit.score,
                matches=[
                    reader_pb2.SearchMatch(seq=match.seq, kind=match.kind, snippet=match.snippet)
                    for match in hit.matches
                ],
            )
            for hit in page.hits
        ],
        next_page_token=f"s1:{page.next_offset}" if page.next_offset is not None else "",
        pending=page.pending,
        capped=page.capped,
    )


def delegation_to_proto(link: DelegationLink) -> reader_pb2.Delegation:
    """One FindDelegations entry."""
    return reader_pb2.Delegation(
        parent_session_id=link.parent_session_id,
        delegation_id=link.delegation_id,
        child_session_id=link.child_session_id,
        agent_name=link.agent_name,
        created_at=link.created_at,
        stop_facts=stop_facts_to_proto(link.child_session_id, link.stop_facts, link.meta),
    )


# -- live follow ------------------------------------------------------------------------------


def check_watch_request(request: reader_pb2.WatchSessionRequest) -> None:
    """INVALID_ARGUMENT (InvalidArgumentError) for a negative ``from_seq``."""
    if request.from_seq < 0:
        raise InvalidArgumentError("from_seq", f"must be >= 0, got {request.from_seq}")


def watch_reply(lines: Iterable[WatchedLine]) -> bytes:
    """One serialized WatchSessionResponse holding ``lines`` as WatchedRecords (raw line bytes)."""
    reply: bytes = reader_pb2.WatchSessionResponse(
        records=[
            reader_pb2.WatchedRecord(seq=line.seq, type=line.type, ts=line.ts, line=line.line)
            for line in lines
        ]
    ).SerializeToString()
    return reply
