"""The RolloutReader gRPC servicer and its server (grpc.aio); it never writes.

File reads and rebuilds run in a thread pool so that health checks stay
responsive; errors become statuses in :func:`shared.status.status_mapping`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from reader_service.delegations import find_children, find_parent
from reader_service.listing import SessionFilters, list_sessions, read_session_meta
from reader_service.memory_view import DEFAULT_MAX_REASONING_CHARS, DEFAULT_MAX_TOOL_OUTPUT_CHARS, memory_view
from reader_service.replay import (
    DigestStatus,
    ReplaySummaryFacts,
    replay_file,
    stream_replay,
    verify_findings,
    verify_session,
)
from reader_service.stop_facts import DEFAULT_TAIL_WINDOW, StopFactsResult, eligibility_of, read_stop_facts
from rollout.v1 import reader_pb2, reader_pb2_grpc
from shared.errors import InvalidArgumentError, ReplyTooLargeError
from shared.layout import DataRoot
from shared.rebuild import collector_paused, rebuild
from shared.records import parse_timestamp
from shared.status import add_servicer, bind, status_mapping
from shared.wire import checkpoint_to_proto, degraded_to_proto, message_from_payload

log = logging.getLogger(__name__)

SERVICE = reader_pb2.DESCRIPTOR.services_by_name["RolloutReader"]
SERVICE_NAME = SERVICE.full_name
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
T = TypeVar("T")

_DIGEST_STATUS = {
    DigestStatus.VERIFIED: reader_pb2.DIGEST_STATUS_VERIFIED,
    DigestStatus.MISMATCH: reader_pb2.DIGEST_STATUS_MISMATCH,
    DigestStatus.NO_CHECKPOINT: reader_pb2.DIGEST_STATUS_NO_CHECKPOINT,
}


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """Reader settings; ``tail_window`` in bytes."""

    data_dir: Path
    tail_window: int = DEFAULT_TAIL_WINDOW
    io_threads: int = 4


def stop_facts_to_proto(
    session_id: str, facts: StopFactsResult, meta: dict[str, Any]
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
    )
    if facts.error:
        message.error.message = str(facts.error.get("message", ""))
        message.error.category = str(facts.error.get("category", ""))
    if facts.checkpoint is not None:
        message.checkpoint.CopyFrom(checkpoint_to_proto(facts.checkpoint))
    eligibility = eligibility_of(facts, meta)
    message.resume.replayable = eligibility.replayable
    message.resume.reason = eligibility.reason
    return message


def _timestamp_filter(field: str, text: str) -> datetime | None:
    if not text:
        return None
    try:
        return parse_timestamp(text)
    except ValueError as exc:
        raise InvalidArgumentError(field, f"is not an RFC 3339 timestamp: {text!r}") from exc


def _check_replay_request(request: reader_pb2.ReplayRequest) -> None:
    if request.token_budget < 0:
        raise InvalidArgumentError("token_budget", f"must be >= 0, got {request.token_budget}")
    if request.max_messages < 0:
        raise InvalidArgumentError("max_messages", f"must be >= 0, got {request.max_messages}")


def _chunk(
    session_id: str, first: int, payloads: list[dict[str, Any]], summary: ReplaySummaryFacts | None
) -> reader_pb2.ReplayChunk:
    """One StreamReplay message (the summary only on the last)."""
    chunk = reader_pb2.ReplayChunk(
        session_id=session_id, first_index=first, messages=[message_from_payload(p) for p in payloads]
    )
    if summary is not None:
        rebuilt = summary.rebuilt
        chunk.summary.degraded.extend(degraded_to_proto(entry) for entry in rebuilt.degraded)
        chunk.summary.superseded_outputs = rebuilt.superseded_outputs
        chunk.summary.digest_status = _DIGEST_STATUS[summary.digest_status]
        chunk.summary.computed_digest = summary.computed_digest
        chunk.summary.estimated_tokens = summary.estimated_tokens
        chunk.summary.message_count = summary.message_count
        if rebuilt.last_checkpoint is not None:
            chunk.summary.last_checkpoint.CopyFrom(checkpoint_to_proto(rebuilt.last_checkpoint))
        if summary.too_large:
            chunk.summary.too_large.estimated_tokens = summary.estimated_tokens
            chunk.summary.too_large.token_budget = summary.token_budget
    return chunk


def _replay_response(
    session_id: str, path: Path, request: reader_pb2.ReplayRequest
) -> reader_pb2.ReplayResponse:
    """Read, rebuild and answer one GetReplay (I/O thread); raises OSError when the file cannot be read.

    The rebuild is made, turned into the reply and released under one
    shared.rebuild.collector_paused(), so the collector never walks its payloads.
    """
    with collector_paused():
        result = replay_file(path, request.token_budget, request.max_messages)
        rebuilt = result.rebuilt
        response = reader_pb2.ReplayResponse(
            session_id=session_id,
            messages=[message_from_payload(message) for message in rebuilt.messages],
            degraded=[degraded_to_proto(entry) for entry in rebuilt.degraded],
            superseded_outputs=rebuilt.superseded_outputs,
            digest_status=_DIGEST_STATUS[result.digest_status],
            computed_digest=result.computed_digest,
            estimated_tokens=result.estimated_tokens,
        )
        if rebuilt.last_checkpoint is not None:
            response.last_checkpoint.CopyFrom(checkpoint_to_proto(rebuilt.last_checkpoint))
        if result.too_large:
            response.too_large.estimated_tokens = result.estimated_tokens
            response.too_large.token_budget = result.token_budget
        del result, rebuilt
    return response


def _memory_view_response(
    session_id: str, path: Path, request: reader_pb2.MemoryViewRequest
) -> reader_pb2.MemoryViewResponse:
    """Read, rebuild and answer one GetMemoryView (I/O thread), like :func:`_replay_response`.

    The view needs the messages only: no digest, no token estimate.
    """
    with collector_paused():
        rebuilt = rebuild(path.read_bytes())
        view = memory_view(
            rebuilt.messages,
            request.max_tool_output_chars or DEFAULT_MAX_TOOL_OUTPUT_CHARS,
            request.max_reasoning_chars or DEFAULT_MAX_REASONING_CHARS,
        )
        response = reader_pb2.MemoryViewResponse(
            session_id=session_id,
            messages=[message_from_payload(message) for message in view.messages],
            dropped_system_messages=view.dropped_system_messages,
            truncated_tool_outputs=view.truncated_tool_outputs,
            shortened_reasoning=view.shortened_reasoning,
        )
        del rebuilt, view
    return response


class RolloutReaderServicer(reader_pb2_grpc.RolloutReaderServicer):
    """gRPC front of replay, stop facts and listing."""

    def __init__(self, config: ReaderConfig) -> None:
        self.config = config
        self.root = DataRoot(config.data_dir)
        self._executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="rollout-read")

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def GetReplay(
        self, request: reader_pb2.ReplayRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.ReplayResponse:
        async with status_mapping(context, "GetReplay"):
            _check_replay_request(request)
            _, path = self.root.locate(request.session_id)
            response = await self._run(_replay_response, request.session_id, path, request)
            size = response.ByteSize()
            if size > MAX_MESSAGE_BYTES:
                raise ReplyTooLargeError(
                    f"the replay of {request.session_id} is {size} bytes, over the {MAX_MESSAGE_BYTES}-byte"
                    " reply limit; use StreamReplay"
                )
            return response
        raise AssertionError("unreachable: status_mapping aborts")

    async def StreamReplay(
        self, request: reader_pb2.ReplayRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[reader_pb2.ReplayChunk]:
        async with status_mapping(context, "StreamReplay"):
            _check_replay_request(request)
            _, path = self.root.locate(request.session_id)
            chunks = stream_replay(path, request.token_budget, request.max_messages)
            try:
                while (item := await self._run(next, chunks, None)) is not None:
                    first, payloads, summary = item
                    yield await self._run(_chunk, request.session_id, first, payloads, summary)
            finally:
                await self._run(chunks.close)

    async def GetMemoryView(
        self, request: reader_pb2.MemoryViewRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.MemoryViewResponse:
        async with status_mapping(context, "GetMemoryView"):
            if request.max_tool_output_chars < 0 or request.max_reasoning_chars < 0:
                raise InvalidArgumentError("max_tool_output_chars", "limits must be >= 0")
            _, path = self.root.locate(request.session_id)
            return await self._run(_memory_view_response, request.session_id, path, request)
        raise AssertionError("unreachable: status_mapping aborts")

    async def VerifySession(
        self, request: reader_pb2.VerifyRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.VerifyReport:
        async with status_mapping(context, "VerifySession"):
            _, path = self.root.locate(request.session_id)
            summary = await self._run(verify_session, path)
            ok, findings = verify_findings(summary)
            rebuilt = summary.rebuilt
            report = reader_pb2.VerifyReport(
                session_id=request.session_id,
                ok=ok,
                records=rebuilt.records,
                last_seq=rebuilt.last_seq,
                committed_bytes=rebuilt.committed_bytes,
                message_count=summary.message_count,
                digest_status=_DIGEST_STATUS[summary.digest_status],
                computed_digest=summary.computed_digest,
                degraded=[degraded_to_proto(entry) for entry in rebuilt.degraded],
                findings=findings,
            )
            if rebuilt.last_checkpoint is not None:
                report.last_checkpoint.CopyFrom(checkpoint_to_proto(rebuilt.last_checkpoint))
            return report
        raise AssertionError("unreachable: status_mapping aborts")

    async def GetStopFacts(
        self, request: reader_pb2.StopFactsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.StopFacts:
        async with status_mapping(context, "GetStopFacts"):
            _, path = self.root.locate(request.session_id)
            facts = await self._run(read_stop_facts, path, self.config.tail_window)
            meta = await self._run(read_session_meta, path)
            return stop_facts_to_proto(request.session_id, facts, meta)
        raise AssertionError("unreachable: status_mapping aborts")

    async def ListSessions(
        self, request: reader_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.ListSessionsResponse:
        async with status_mapping(context, "ListSessions"):
            filters = SessionFilters(
                tenant=request.tenant,
                agent_name=request.agent_name,
                parent_session_id=request.parent_session_id,
                created_after=_timestamp_filter("created_after", request.created_after),
                created_before=_timestamp_filter("created_before", request.created_before),
                stop_state=request.stop_state,
            )
            page = await self._run(
                list_sessions,
                self.root,
                request.page_size,
                request.page_token,
                filters,
                self.config.tail_window,
                request.max_scan,
            )
            response = reader_pb2.ListSessionsResponse(
                next_page_token=page.next_page_token, scanned=page.scanned, scan_capped=page.scan_capped
            )
            for listing in page.sessions:
                meta = listing.meta
                response.sessions.add(
                    session_id=listing.name.session_id,
                    agent_name=listing.name.agent_name,
                    created_at=str(meta.get("created_at", listing.name.created_at.isoformat())),
                    tenant=str(meta.get("tenant", "")),
                    parent_session_id=str(meta.get("parent_session_id", "")),
                    delegation_id=str(meta.get("delegation_id", "")),
                    stop_facts=stop_facts_to_proto(listing.name.session_id, listing.stop_facts, meta),
                )
            return response
        raise AssertionError("unreachable: status_mapping aborts")

    async def FindDelegations(
        self, request: reader_pb2.FindDelegationsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.FindDelegationsResponse:
        async with status_mapping(context, "FindDelegations"):
            direction = request.WhichOneof("from")
            if direction is None:
                raise InvalidArgumentError("from", "give parent_session_id or child_session_id")
            if direction == "child_session_id" and request.delegation_id:
                raise InvalidArgumentError(
                    "delegation_id", "narrows a lookup from a parent; a child has exactly one parent"
                )
            if direction == "parent_session_id":
                found = await self._run(
                    find_children,
                    self.root,
                    request.parent_session_id,
                    request.delegation_id,
                    self.config.tail_window,
                )
            else:
                found = [
                    await self._run(find_parent, self.root, request.child_session_id, self.config.tail_window)
                ]
            response = reader_pb2.FindDelegationsResponse()
            for link in found:
                response.delegations.add(
                    parent_session_id=link.parent_session_id,
                    delegation_id=link.delegation_id,
                    child_session_id=link.child_session_id,
                    agent_name=link.agent_name,
                    created_at=link.created_at,
                    stop_facts=stop_facts_to_proto(link.child_session_id, link.stop_facts, link.meta),
                )
            return response
        raise AssertionError("unreachable: status_mapping aborts")

    def close(self) -> None:
        self._executor.shutdown(wait=False)


@dataclass
class RunningReader:
    server: grpc.aio.Server
    servicer: RolloutReaderServicer
    health: HealthServicer
    port: int

    async def stop(self, grace: float = 5.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        self.servicer.close()


async def start_reader(config: ReaderConfig, address: str = "127.0.0.1:0") -> RunningReader:
    """Start serving on ``address``; RuntimeError when it cannot be bound."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 4 * 1024 * 1024),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # A port another server holds must fail to bind, not be silently shared.
            ("grpc.so_reuseport", 0),
        ]
    )
    servicer = RolloutReaderServicer(config)
    add_servicer(server, SERVICE, servicer)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )
    port = bind(server, address, "reader")
    await server.start()
    await health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    log.info("reader serving on port %d, data root %s", port, config.data_dir)
    return RunningReader(server, servicer, health, port)
