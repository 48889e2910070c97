"""The RolloutReader gRPC servicer and its server (grpc.aio); it never writes.

Translation only: each RPC checks and converts its request
(:mod:`reader_service.wire`), calls the reading code on an I/O thread, and
returns the converted answer; errors become statuses in
:func:`serving.status.rpc_statuses` (one decorator per RPC). Heavy reads
(replays, memory views, verification) first wait for admission within the read
budget (:mod:`reader_service.admission`) and run on a pool of their own, so cheap
reads (stop facts, listing pages, delegations) keep their latency while big
replays run. Replies already serialized (bytes) are sent as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio

from memory_store.store import MemoryStore
from reader_service import memories, metrics, replies, wire
from reader_service.admission import ReadBudget, bounded_read_cost, unary_reply_cost
from reader_service.delegations import find_children, find_parent
from reader_service.limits import (
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_READ_BUDGET_BYTES,
    DEFAULT_REPLAY_CACHE_BYTES,
    MiB,
)
from reader_service.listing import list_sessions
from reader_service.listing_index import ListingIndex
from reader_service.memory_view import (
    DEFAULT_MAX_REASONING_CHARS,
    DEFAULT_MAX_TOOL_OUTPUT_CHARS,
    MemoryViewer,
)
from reader_service.owner_probe import OwnerProbe
from reader_service.pending_rounds import check_pending_request, last_append_at, pending_rounds
from reader_service.replay import STREAM_CHUNK_BYTES, verify_findings, verify_session
from reader_service.replay_cache import ReplayCache
from reader_service.round_index import find_origin, holders
from reader_service.rounds import RoundCache, check_list_request, round_records
from reader_service.search_index import SearchFilters, SearchIndex, SearchPage
from reader_service.stop_facts import DEFAULT_TAIL_WINDOW, StopFactsResult, read_stop_facts
from reader_service.watch import DEFAULT_POLL_SECONDS, WatchHub
from rollout.v1 import reader_pb2, reader_pb2_grpc
from serving.server import PLAINTEXT, RunningService, ServerSettings, ServiceServer
from serving.status import rpc_statuses
from serving.tenancy import caller_tenant, current_caller, keyed_session_id, memory_tenant
from shared.deletions import Deletion, deletion_in
from shared.errors import (
    InvalidArgumentError,
    RoundNotFoundError,
    SearchUnavailableError,
    SessionNotFoundError,
)
from shared.layout import DataRoot, session_file_stat
from shared.lineage import lineage_of
from shared.naming import is_session_id
from shared.rounds import Lineage, Round, round_at
from shared.wire import round_to_proto

log = logging.getLogger(__name__)

SERVICE = reader_pb2.DESCRIPTOR.services_by_name["RolloutReader"]
SERVICE_NAME = SERVICE.full_name
#: How long a thread may hold the GIL while others wait (seconds; CPython's default is 0.005). A
#: heavy read's Python loop then hands it to a cheap call's thread, or to the event loop, sooner.
SWITCH_INTERVAL_S = 0.001
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """Reader settings. Sizes in bytes.

    ``max_reply_bytes``: the largest unary reply (and gRPC send limit);
    ``replay_cache_bytes``: what the replay cache may hold (0: off);
    ``read_budget_bytes``: what heavy reads in flight may hold together;
    ``io_threads`` serve cheap reads, ``heavy_threads`` heavy ones;
    ``search``: keep the content index (reader_service.search_index) in
    ``search_index_dir`` (None: a temporary folder);
    ``follow_poll_seconds``: how often WatchSession looks at every followed file besides
    inotify (writes made on another host: reader_service.watch; 0: inotify alone);
    ``writers``: ``host:port`` of a cluster's writers, asked whether a session whose file this
    reader does not see exists (reader_service.owner_probe; empty: NOT_FOUND from the files
    alone), over TLS with the roots of ``writers_tls_ca`` when given.
    """

    data_dir: Path
    tail_window: int = DEFAULT_TAIL_WINDOW
    io_threads: int = 4
    heavy_threads: int = 2
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    replay_cache_bytes: int = DEFAULT_REPLAY_CACHE_BYTES
    read_budget_bytes: int = DEFAULT_READ_BUDGET_BYTES
    search: bool = True
    search_index_dir: Path | None = None
    follow_poll_seconds: float = DEFAULT_POLL_SECONDS
    writers: tuple[str, ...] = ()
    writers_tls_ca: Path | None = None


def _writer_credentials(tls_ca: Path | None) -> grpc.ChannelCredentials | None:
    """Channel credentials trusting the roots in ``tls_ca`` (None: plaintext). OSError when it
    cannot be read."""
    return None if tls_ca is None else grpc.ssl_channel_credentials(root_certificates=tls_ca.read_bytes())


def _located(index: ListingIndex, session_id: str) -> tuple[Path, int]:
    _, path = index.locate(session_id)
    return path, session_file_stat(path).st_size


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


def _resolved(index: ListingIndex, session_key: str, tenant: str) -> tuple[str, bool]:
    """(session id, found) of a caller's session key (serving.tenancy.keyed_session_id: after a
    deletion of its session the key names its next id), or of a session id the caller sees
    given as the key."""
    if is_session_id(session_key):
        with contextlib.suppress(SessionNotFoundError):
            index.locate(session_key)
            return session_key, True
    found: set[str] = set()

    def deleted(session_id: str) -> bool:  # a listed session is not deleted: no record is read
        try:
            index.locate(session_id)
        except SessionNotFoundError:
            return deletion_in(index.root, session_id) is not None
        found.add(session_id)
        return False

    session_id = keyed_session_id(tenant, session_key, shard_of=index.root.shard_of, deleted=deleted)
    return session_id, session_id in found


def _stop_facts_and_meta(index: ListingIndex, path: Path) -> tuple[StopFactsResult, dict[str, Any]]:
    return read_stop_facts(path, index.tail_window), index.meta(path.name)


def _searched(
    listing: ListingIndex, index: SearchIndex, query: str, filters: SearchFilters, size: int, offset: int
) -> SearchPage:
    """:meth:`SearchIndex.search`, after the listing index learnt of every session file gone
    (deleted sessions leave the content index through its removal listeners); an index that
    cannot be read is SearchUnavailableError."""
    listing.sync()
    try:
        return index.search(query, filters, size, offset)
    except sqlite3.Error as exc:
        raise SearchUnavailableError(
            f"the content index cannot be read ({exc}); a damaged or missing index is built again"
            " from the files by the reader; retry shortly"
        ) from exc


class RolloutReaderServicer(reader_pb2_grpc.RolloutReaderServicer):
    """gRPC front of replay, stop facts, listing and delegations."""

    def __init__(self, config: ReaderConfig) -> None:
        self.config = config
        self.root = DataRoot(config.data_dir)
        self.root.resolve()  # a shard record that cannot be read stops the start (ClusterFileError)
        self.index = ListingIndex(self.root, config.tail_window)
        self.replays = ReplayCache(config.replay_cache_bytes)
        self.budget = ReadBudget(config.read_budget_bytes)
        metrics.watch(self.replays, self.index)
        self._cheap = ThreadPoolExecutor(config.io_threads, thread_name_prefix="rollout-read")
        self._heavy = ThreadPoolExecutor(config.heavy_threads, thread_name_prefix="rollout-heavy-read")
        self.watches = WatchHub(
            self._cheap_run, wire.watch_reply, config.follow_poll_seconds, deleted=self._was_deleted
        )
        self.round_cache = RoundCache()
        self.search_index = SearchIndex(self.root, config.search_index_dir) if config.search else None
        #: Asks a session's owner about a session whose file is not seen here (docs/cluster.md §5).
        self.owner_probe = (
            OwnerProbe(config.writers, self.root.shards, _writer_credentials(config.writers_tls_ca))
            if config.writers
            else None
        )
        #: The memory artifacts (read only: docs/memory.md §6).
        self.memory_store = MemoryStore(self.root.memories_folder)
        # A session file that goes (deleted) takes its cached replay, rounds and indexed text with it.
        self.index.removal_listeners += [self.replays.forget, self.round_cache.forget]
        if self.search_index is not None:
            self.index.removal_listeners.append(self.search_index.forget)

    def _was_deleted(self, session_id: str) -> bool:
        """Whether a deletion record names ``session_id`` (False when it cannot be read)."""
        return deletion_in(self.root, session_id) is not None

    async def _cheap_run(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function`` on a cheap-read thread, as the caller of this RPC (serving.tenancy)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._cheap, contextvars.copy_context().run, function, *args
        )

    async def _heavy_run(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function`` on a heavy-read thread, as the caller of this RPC (serving.tenancy)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._heavy, contextvars.copy_context().run, function, *args
        )

    async def _locate(self, session_id: str) -> tuple[Path, int]:
        """The path and size (bytes) of a session's file, found off the event loop (a miss
        rescans the sessions folder; a header may be read for the tenant check). Raises what
        :meth:`ListingIndex.locate` raises, a NOT_FOUND confirmed by :meth:`_missing`."""
        return await self._cheap_read(session_id, _located, self.index, session_id)

    async def _cheap_read(self, session_id: str, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on a cheap-read thread (:meth:`_cheap_run`), where a
        SessionNotFoundError, about ``session_id``, stands only once :meth:`_missing` confirms it."""
        try:
            return await self._cheap_run(function, *args)
        except SessionNotFoundError:
            await self._missing(session_id)
            raise

    async def _missing(self, session_id: str) -> None:
        """Return when ``session_id``, whose file this reader does not see, is missing for the
        cluster too: always without ``ReaderConfig.writers``; in a cluster, when the owner of its
        shard does not hold it either. Raises SessionNotVisibleError (UNAVAILABLE,
        SESSION_NOT_VISIBLE or OWNER_UNREACHED: reader_service.owner_probe, docs/cluster.md §5)."""
        if self.owner_probe is not None:
            await self.owner_probe.check_missing(session_id, self.root.shard_of(session_id))

    async def _holds(self, session_id: str) -> bool:
        """Whether the cluster holds ``session_id``, whose file this reader does not see (False
        without ``ReaderConfig.writers``). Raises SessionNotVisibleError (OWNER_UNREACHED)."""
        if self.owner_probe is None:
            return False
        return await self.owner_probe.holder(session_id, self.root.shard_of(session_id)) is not None

    async def _admit(self, context: grpc.aio.ServicerContext, cost: int) -> None:
        """Wait for ``cost`` bytes of the read budget, held until the RPC is done (reply sent)."""
        charge = await self.budget.acquire(cost)
        context.add_done_callback(lambda _: self.budget.release(charge))

    async def _stream(self, chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
        """Each serialized chunk, made on a heavy I/O thread; the generator is closed there too,
        once no chunk is in the making (a stream cancelled meanwhile waits for it: closing a
        generator another thread runs fails)."""
        loop = asyncio.get_running_loop()
        making: asyncio.Future[bytes | None] | None = None
        try:
            while True:
                making = loop.run_in_executor(
                    self._heavy, contextvars.copy_context().run, _next_chunk, chunks
                )
                chunk = await asyncio.shield(making)
                if chunk is None:
                    break
                yield chunk
        finally:
            if making is not None and not making.done():
                await asyncio.wait([making])
            await self._heavy_run(getattr(chunks, "close", lambda: None))

    @rpc_statuses("GetReplay")
    async def GetReplay(self, request: reader_pb2.ReplayRequest, context: grpc.aio.ServicerContext) -> bytes:
        wire.check_replay_request(request)
        session_id, limit = request.session_id, self.config.max_reply_bytes
        path, size = await self._locate(session_id)
        if not request.max_messages:
            replies.check_unary_size("GetReplay", "StreamReplay", session_id, size, limit)
        await self._admit(context, unary_reply_cost(size, limit))
        return await self._heavy_run(
            replies.replay_reply,
            self.replays,
            session_id,
            path,
            request.token_budget,
            request.max_messages,
            limit,
        )

    @rpc_statuses("StreamReplay")
    async def StreamReplay(
        self, request: reader_pb2.ReplayRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        wire.check_replay_request(request)
        path, size = await self._locate(request.session_id)
        await self._admit(context, bounded_read_cost(size, STREAM_CHUNK_BYTES))
        chunks = replies.replay_chunks(request.session_id, path, request.token_budget, request.max_messages)
        async for chunk in self._stream(chunks):
            yield chunk

    @rpc_statuses("GetRecentMessages")
    async def GetRecentMessages(
        self, request: reader_pb2.RecentMessagesRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        view = wire.check_recent_request(request)
        session_id, limit = request.session_id, self.config.max_reply_bytes
        path, size = await self._locate(session_id)
        await self._admit(context, unary_reply_cost(size, limit))
        return await self._heavy_run(
            replies.recent_reply,
            self.replays,
            session_id,
            path,
            request.limit,
            request.canonical,
            limit,
            view,
        )

    def _viewer(self, request: reader_pb2.MemoryViewRequest) -> MemoryViewer:
        wire.check_memory_view_request(request)
        return MemoryViewer(
            request.max_tool_output_chars or DEFAULT_MAX_TOOL_OUTPUT_CHARS,
            request.max_reasoning_chars or DEFAULT_MAX_REASONING_CHARS,
        )

    @rpc_statuses("GetMemoryView")
    async def GetMemoryView(
        self, request: reader_pb2.MemoryViewRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        viewer = self._viewer(request)
        session_id, limit = request.session_id, self.config.max_reply_bytes
        path, size = await self._locate(session_id)
        replies.check_unary_size("GetMemoryView", "StreamMemoryView", session_id, size, limit)
        await self._admit(context, unary_reply_cost(size, limit))
        return await self._heavy_run(replies.memory_view_reply, session_id, path, viewer, limit)

    @rpc_statuses("StreamMemoryView")
    async def StreamMemoryView(
        self, request: reader_pb2.MemoryViewRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        viewer = self._viewer(request)
        path, size = await self._locate(request.session_id)
        await self._admit(context, bounded_read_cost(size, replies.CHUNK_BYTES))
        async for chunk in self._stream(replies.memory_view_chunks(request.session_id, path, viewer)):
            yield chunk

    @rpc_statuses("VerifySession")
    async def VerifySession(
        self, request: reader_pb2.VerifyRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.VerifyReport:
        path, size = await self._locate(request.session_id)
        await self._admit(context, bounded_read_cost(size, STREAM_CHUNK_BYTES))
        facts = await self._heavy_run(verify_session, path)
        ok, findings = verify_findings(facts)
        return wire.verify_report(request.session_id, facts, ok, findings)

    @rpc_statuses("GetStopFacts")
    async def GetStopFacts(
        self, request: reader_pb2.StopFactsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.StopFacts:
        path, _ = await self._locate(request.session_id)
        facts, meta = await self._cheap_run(_stop_facts_and_meta, self.index, path)
        return wire.stop_facts_to_proto(request.session_id, facts, meta)

    @rpc_statuses("ListSessions")
    async def ListSessions(
        self, request: reader_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.ListSessionsResponse:
        filters = replace(wire.listing_filters(request), tenant=caller_tenant(request.tenant))
        page = await self._cheap_run(
            list_sessions, self.index, request.page_size, request.page_token, filters, request.max_scan
        )
        return wire.listing_page(page)

    @rpc_statuses("ResolveSession")
    async def ResolveSession(
        self, request: reader_pb2.ResolveSessionRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.ResolveSessionResponse:
        key = request.session_key
        session_id, found = await self._cheap_run(_resolved, self.index, key, request.tenant)
        if not found:  # in a cluster, a session its owner holds is found (docs/cluster.md §5)
            for candidate in dict.fromkeys([key, session_id] if is_session_id(key) else [session_id]):
                if await self._holds(candidate):
                    return reader_pb2.ResolveSessionResponse(session_id=candidate, found=True)
        return reader_pb2.ResolveSessionResponse(session_id=session_id, found=found)

    @rpc_statuses("FindDelegations")
    async def FindDelegations(
        self, request: reader_pb2.FindDelegationsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.FindDelegationsResponse:
        direction = request.WhichOneof("from")
        if direction is None:
            raise InvalidArgumentError("from", "give parent_session_id or child_session_id")
        if direction == "child_session_id" and request.delegation_id:
            raise InvalidArgumentError(
                "delegation_id", "narrows a lookup from a parent; a child has exactly one parent"
            )
        if direction == "parent_session_id":
            parent = request.parent_session_id
            children = await self._cheap_read(
                parent, find_children, self.index, parent, request.delegation_id
            )
            # A child whose marker is listed but whose file is not seen here: left out once the
            # cluster does not hold it either; one the cluster holds fails the whole list
            # (SESSION_NOT_VISIBLE: retry), never a list missing it (docs/cluster.md §5).
            asked = await asyncio.gather(*map(self._missing, children.unseen), return_exceptions=True)
            for answer in asked:
                if isinstance(answer, BaseException):
                    raise answer
            found = children.links
        else:
            child = request.child_session_id
            found = [await self._cheap_read(child, find_parent, self.index, child)]
        return reader_pb2.FindDelegationsResponse(
            delegations=[wire.delegation_to_proto(link) for link in found]
        )

    @rpc_statuses("WatchSession")
    async def WatchSession(
        self, request: reader_pb2.WatchSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        wire.check_watch_request(request)
        path, _ = await self._locate(request.session_id)
        async for reply in self.watches.follow(request.session_id, path, request.from_seq):
            yield reply

    def _live_meta(self, session_id: str) -> dict[str, Any] | None:
        """The session_meta of a session whose file is listed (None when none is; {} when its head
        cannot be read, as for a file deleted before the listing learnt it went): the live lookup
        of a lineage walk (shared.lineage)."""
        try:
            return self.index.meta(self.index.locate(session_id)[1].name)
        except (SessionNotFoundError, InvalidArgumentError, OSError):
            return None

    def _tombstone(self, session_id: str) -> Deletion | None:
        """The deletion record of a deleted session (shared.deletions.deletion_in)."""
        return deletion_in(self.root, session_id)

    def _lineage(self, session_id: str, path: Path) -> Callable[[], Lineage]:
        """How the round cache learns a located session's lineage (shared.lineage.lineage_of,
        through live and deleted sources: the walk the writer's Resume makes too)."""
        return lambda: lineage_of(session_id, self.index.meta(path.name), self._live_meta, self._tombstone)

    def _rounds_of(self, session_id: str, path: Path) -> list[Round]:
        """The rounds of a located session file, from the round cache (reader_service.rounds)."""
        return self.round_cache.rounds(path, self._lineage(session_id, path))

    def _round_to_close(self, session_id: str, path: Path) -> Round | None:
        """The round a located session file leaves pending (shared.rounds.round_to_close)."""
        return self.round_cache.to_close(path, self._lineage(session_id, path))

    @rpc_statuses("ListRounds")
    async def ListRounds(
        self, request: reader_pb2.ListRoundsRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        size, start = check_list_request(request)
        path, _ = await self._locate(request.session_id)
        return await self._heavy_run(
            self.round_cache.page, path, self._lineage(request.session_id, path), size, start
        )

    @rpc_statuses("GetRound")
    async def GetRound(
        self, request: reader_pb2.GetRoundRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.GetRoundResponse:
        if not is_session_id(request.round_id):
            raise InvalidArgumentError(
                "round_id", f"{request.round_id[:64]!r} is not a round id (a lowercase UUID)"
            )
        session_id = request.session_id
        if not session_id:  # by id alone: the reader's index of rounds read (reader_service.round_index)
            origin = await self._heavy_run(
                find_origin, self.index, self.round_cache, request.round_id, self._lineage
            )
            held = (
                await self._cheap_run(holders, self.index, *origin, self._tombstone)
                if origin is not None
                else []
            )
            if not held:
                raise RoundNotFoundError("", request.round_id)
            session_id = held[0]
        path, _ = await self._locate(session_id)
        rounds = await self._heavy_run(self._rounds_of, session_id, path)
        found = round_at(rounds, request.round_id)
        if found is None:
            raise RoundNotFoundError(request.session_id, request.round_id)
        if request.session_id:
            origin = self.round_cache.origin(request.round_id)  # noted by the reading above
            held = (
                await self._cheap_run(holders, self.index, *origin, self._tombstone)
                if origin is not None
                else [session_id]
            )
        records = await self._heavy_run(round_records, path, found, self.config.max_reply_bytes)
        return reader_pb2.GetRoundResponse(
            round=round_to_proto(found), records=records, held_by=len(held), session_id=session_id
        )

    @rpc_statuses("ListPendingRounds")
    async def ListPendingRounds(
        self, request: reader_pb2.ListPendingRoundsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.ListPendingRoundsResponse:
        query = check_pending_request(request, caller_tenant(request.tenant))
        found, scanned = await self._heavy_run(
            pending_rounds, self.index, self._round_to_close, query, time.time_ns()
        )
        return reader_pb2.ListPendingRoundsResponse(
            rounds=[
                reader_pb2.PendingRound(
                    session_id=pending.session_id,
                    round=round_to_proto(pending.round),
                    last_append_at=last_append_at(pending),
                )
                for pending in found
            ],
            scanned=scanned,
        )

    @rpc_statuses("SearchSessions")
    async def SearchSessions(
        self, request: reader_pb2.SearchSessionsRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.SearchSessionsResponse:
        size, offset, filters = wire.search_request(request)
        caller = current_caller()
        tenant = caller_tenant(request.tenant)
        filters = replace(filters, tenant=tenant if caller.tenant is not None or tenant else None)
        if self.search_index is None:
            raise SearchUnavailableError(
                "this reader runs without a content index (serve-reader --no-search)"
            )
        page = await self._cheap_run(
            _searched, self.index, self.search_index, request.query, filters, size, offset
        )
        return wire.search_page(page)

    @rpc_statuses("GetMemories")
    async def GetMemories(
        self, request: reader_pb2.GetMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.GetMemoriesResponse:
        return await self._cheap_run(memories.read_memories, self.memory_store, request)

    @rpc_statuses("ResolveProvenance")
    async def ResolveProvenance(
        self, request: reader_pb2.ResolveProvenanceRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.ResolveProvenanceResponse:
        tenant = memory_tenant(request.tenant)
        view = await self._cheap_run(memories.artifact_view, self.memory_store, request.artifact_id, tenant)
        held = 0
        for source in view.artifact.sources:
            held += (await self._locate(source.session_id))[1]
        # Each source's records up to its last cited seq are held while they are checked.
        await self._admit(context, unary_reply_cost(held, self.config.max_reply_bytes))
        return await self._heavy_run(memories.resolve, self.index, view, tenant)

    def close(self) -> None:
        if self.search_index is not None:
            self.search_index.close()
        self.index.close()
        self._cheap.shutdown(wait=False)
        self._heavy.shutdown(wait=False)


@dataclass
class RunningReader(RunningService):
    """A started reader server; ``address`` is the bound host:port, ``port`` its port."""

    service: ServiceServer
    servicer: RolloutReaderServicer

    async def stop(self, grace: float = 5.0) -> None:
        self.servicer.watches.close()  # endless streams end now, not at the end of the grace
        await self.service.stop(grace)
        if self.servicer.owner_probe is not None:
            await self.servicer.owner_probe.close()
        self.servicer.close()


async def start_reader(
    config: ReaderConfig, address: str = "127.0.0.1:0", settings: ServerSettings = PLAINTEXT
) -> RunningReader:
    """Start serving on ``address`` with ``settings`` (TLS, authentication, interceptors:
    serving.server); BindError when it cannot be bound, OSError when a TLS file cannot be read."""
    service = ServiceServer(
        "reader",
        settings,
        options=[
            ("grpc.max_receive_message_length", 4 * MiB),
            # A reply over max_reply_bytes is refused with a documented status before gRPC sees it.
            ("grpc.max_send_message_length", config.max_reply_bytes + MiB),
        ],
    )
    servicer = RolloutReaderServicer(config)
    service.add(SERVICE, servicer)
    bound = service.bind(address)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    servicer.index.start_warming()
    if servicer.search_index is not None:
        servicer.search_index.start()
    await service.start()
    log.info("reader serving on %s (%s), data root %s", bound, settings.describe(), config.data_dir)
    return RunningReader(service, servicer)
