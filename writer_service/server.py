"""The RolloutWriter gRPC servicer and its server (grpc.aio).

The servicer only translates: protobuf in, :class:`SessionLedger` call, protobuf
out; errors become statuses in :func:`serving.status.rpc_statuses` (one decorator
per RPC). Standard health checking and server reflection are served beside it.
By default the writer owns every shard of its data root (writer_service.ownership:
EmbeddedOwnership), the root's ``writer.lock`` held for the life of the process: a
second writer on the same root fails fast (docs/spec.md §2.1); or, given a static shard map
(``WriterConfig.static_shard_map``, a testing option: StaticOwnership), the shards the map
gives its address, beside other writers on the same root. Given a served ownership (a
writer of a cluster: docs/cluster.md), it owns the shards that ownership takes, indexing
each when it is taken, and releases them when it stops. Calls about a session of a
shard it does not own are answered UNAVAILABLE, ErrorInfo NOT_OWNER naming the owner;
GetShardMap tells clients every owner it knows (docs/cluster.md §4).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

from memory_store.store import MemoryStore
from rollout.v1 import writer_pb2, writer_pb2_grpc
from serving.server import PLAINTEXT, RunningService, ServerSettings, ServiceServer
from serving.status import StreamRequestError, check_decoded, rpc_statuses
from serving.tenancy import check_importer, check_may_set_times
from shared.errors import InvalidArgumentError, RecordValidationError
from shared.layout import DataRoot
from shared.records import normalize_timestamp
from shared.shards import HASH_NAME
from shared.stop_kinds import StopKind
from shared.wire import append_payloads, record_time, session_spec, stop_kind_from_proto
from writer_service.committer import durable_write_method
from writer_service.heap_trim import HeapTrimmer, keep_large_blocks_mapped
from writer_service.importing import SessionImport
from writer_service.memories import forget_memories
from writer_service.open_session import RecordTimes, RequestRecords
from writer_service.ownership import EmbeddedOwnership, ServedOwnership, StaticOwnership, StaticShardMapError
from writer_service.refusal_pacing import RefusalPacer
from writer_service.retention import retain
from writer_service.session_index import build_index
from writer_service.sessions import SessionLedger, WriterConfig
from writer_service.storage_probe import StorageProbe

log = logging.getLogger(__name__)

SERVICE = writer_pb2.DESCRIPTOR.services_by_name["RolloutWriter"]
SERVICE_NAME = SERVICE.full_name
#: Requests of one AppendStream read ahead of their acknowledgements.
STREAM_READ_AHEAD = 64
#: Replies are small (seqs, ids); this caps them all the same.
MAX_REPLY_BYTES = 4 * 1024 * 1024


def request_limit(max_record_bytes: int) -> int:
    """The largest request gRPC lets in (bytes): twice the record limit plus 4 MiB.

    Roomy enough that a record over the limit reaches the writer's own check and is
    refused with INVALID_ARGUMENT naming the limit (an 80 MB record under the 64 MiB
    default, say); a request beyond it is refused by gRPC itself (RESOURCE_EXHAUSTED,
    "larger than max") before any of it is held. Capped at 2 GiB - 1, gRPC's own ceiling.
    """
    return min(2 * max_record_bytes + 4 * 1024 * 1024, 2**31 - 1)


#: No stored line is shorter than its record's protobuf encoding divided by this (the
#: worst case is a list of numbers: 11 protobuf bytes for the 2 JSON bytes of "0,").
PROTO_TO_LINE_BOUND = 6
#: AppendRequest.records: field number of the repeated AppendRecord.
_RECORDS_FIELD = writer_pb2.AppendRequest.DESCRIPTOR.fields_by_name["records"].number
_RECORD_KINDS = writer_pb2.AppendRecord.DESCRIPTOR.fields_by_number


def _varint(raw: bytes, position: int) -> tuple[int, int]:
    """The protobuf varint at ``position`` and the position after it (IndexError past the end)."""
    value = shift = 0
    while True:
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def oversized_record(raw: bytes, max_record_bytes: int) -> RecordValidationError | None:
    """Refuse an AppendRequest, from its bytes, when one of its records is provably over the limit.

    A record whose protobuf encoding is more than :data:`PROTO_TO_LINE_BOUND` times
    ``max_record_bytes`` cannot make a line within the limit: it is refused before the
    request is decoded, so a rejected large request costs no memory beyond gRPC's own
    receive buffer (no parsed copy, no re-encoding to measure it). A request no larger
    than that bound is not looked at (no record in it can be over it); a larger one is
    walked field by field, skipping each record's bytes. Bytes that are not well-formed
    protobuf are left to the decoder (None). Returns the RecordValidationError naming the
    record's index and kind (INVALID_ARGUMENT).
    """
    ceiling = PROTO_TO_LINE_BOUND * max_record_bytes
    if len(raw) <= ceiling:
        return None
    position, index = 0, 0
    try:
        while position < len(raw):
            tag, position = _varint(raw, position)
            match tag & 7:
                case 0:
                    _, position = _varint(raw, position)
                case 1:
                    position += 8
                case 2:
                    length, position = _varint(raw, position)
                    if position + length > len(raw):
                        return None  # truncated
                    if tag >> 3 == _RECORDS_FIELD:
                        if length > ceiling:
                            kind = _RECORD_KINDS.get(_varint(raw, position)[0] >> 3)
                            return RecordValidationError(
                                index,
                                kind.name if kind is not None else "record",
                                f"record is {length} bytes encoded, so its line is over the limit of"
                                f" {max_record_bytes} bytes; it is rejected, never truncated",
                            )
                        index += 1
                    position += length
                case 5:
                    position += 4
                case _:
                    return None
    except IndexError:
        return None
    return None


def screen_append(raw: bytes, max_record_bytes: int, trimmer: HeapTrimmer) -> RecordValidationError | None:
    """The screen of Append and AppendStream requests (before decoding): refuses a record
    provably over the limit (:func:`oversized_record`) and has the heap trimmed after a large
    request, refused or not (writer_service.heap_trim), so that RSS returns near idle."""
    trimmer.after(len(raw))
    return oversized_record(raw, max_record_bytes)


def screen_request(raw: bytes, trimmer: HeapTrimmer) -> None:
    """The screen of CreateSession, Stop, Resume and Fork requests: refuses nothing (their fields
    are checked when decoded) and has the heap trimmed after a large one (a 20 MB field refused
    by its limit), as :func:`screen_append` does."""
    trimmer.after(len(raw))


def screen_import(raw: bytes, trimmer: HeapTrimmer) -> None:
    """The screen of ImportSessions parts: refuses nothing (the records are checked as they are
    staged) and has the heap trimmed after a large part, as :func:`screen_append` does."""
    trimmer.after(len(raw))


def request_payloads(
    request: writer_pb2.AppendRequest | writer_pb2.ImportRecords,
) -> tuple[RequestRecords, RecordTimes]:
    """The payloads and source times of every record of a request (RecordValidationError on bad ones,
    InvalidArgumentError, field ``records``, when there are none).

    Times are None when no record carries one (the writer's clock for all), else
    one per record in the ledger's ``ts`` form ("" where absent). Records provably
    over the size limit were refused from the request's bytes (:func:`oversized_record`);
    the line limit itself is checked when they are encoded.
    """
    if not request.records:
        raise InvalidArgumentError("records", "is empty: an Append needs at least one record")
    payloads = []
    times: list[str] | None = None
    for index, record in enumerate(request.records):
        payloads.append(append_payloads(record, index))
        if record.ts:
            check_may_set_times(f"records[{index}].ts")
            if times is None:
                times = [""] * len(request.records)
            times[index] = record_time(record.ts, index)
    return payloads, times


_Accepted = tuple[writer_pb2.AppendResponse, asyncio.Future[None]]
#: What a refused unary Append returns after setting its status (never sent: the code is not OK).
_REFUSED = writer_pb2.AppendResponse()


class RolloutWriterServicer(writer_pb2_grpc.RolloutWriterServicer):
    """gRPC front of :class:`SessionLedger`."""

    def __init__(self, ledger: SessionLedger) -> None:
        self.ledger = ledger
        self.pacer = RefusalPacer(ledger.config.unknown_id_rate)
        #: Where clients reach this writer (set once bound).
        self.address = ""
        #: The memory artifacts, which only ForgetMemories writes here (writer_service.memories).
        self.memory_store = MemoryStore(DataRoot(ledger.config.data_dir).memories_folder)

    @rpc_statuses("CreateSession")
    async def CreateSession(
        self, request: writer_pb2.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.CreateSessionResponse:
        spec = session_spec(request)
        session_id, created_at = await self.ledger.create_session(spec)
        return writer_pb2.CreateSessionResponse(session_id=session_id, created_at=created_at, next_seq=1)

    async def _enqueue(
        self, request: writer_pb2.AppendRequest
    ) -> tuple[writer_pb2.AppendResponse, asyncio.Future[None]]:
        self.ledger.check_known(request.session_id)  # before any record is decoded
        expected = request.expected_next_seq if request.HasField("expected_next_seq") else None
        since = request.request_since_seq if request.HasField("request_since_seq") else None
        payloads, times = request_payloads(request)
        seqs, next_seq, durable = await self.ledger.enqueue(
            request.session_id, payloads, expected, request.request_id, times, since
        )
        response = writer_pb2.AppendResponse(session_id=request.session_id, seqs=seqs, next_seq=next_seq)
        return response, durable

    @rpc_statuses("Append")
    async def Append(
        self, request: writer_pb2.AppendRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.AppendResponse:
        unknown = self.ledger.unknown_id_message(request.session_id)
        if unknown is not None:
            # The cheapest refusal (docs/spec.md §2.10): no record decoded, no exception raised, no
            # status details built; gRPC discards the reply of a call whose code is not OK.
            # A peer that keeps doing it is answered at a paced rate (writer_service.refusal_pacing).
            delay = self.pacer.delay(context.peer())
            if delay:
                await asyncio.sleep(delay)
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details(unknown)
            return _REFUSED
        response, durable = await self._enqueue(request)
        await durable
        return response

    @rpc_statuses("AppendStream")
    async def AppendStream(
        self,
        request_iterator: AsyncIterator[writer_pb2.AppendRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[writer_pb2.AppendResponse]:
        """Pipelined appends: each request is validated and queued on arrival, acked in order.

        A reader task queues requests as they arrive (so later requests are
        written while earlier ones are being fsynced); this generator acknowledges
        them in stream order. The first failing request ends the stream with its
        status, and no request after it is read.
        """
        # Bounded read-ahead: once this many requests await their acks, reading pauses
        # and gRPC flow control slows the client instead of the writer's queue filling.
        acks: asyncio.Queue[tuple[int, _Accepted | Exception] | None] = asyncio.Queue(STREAM_READ_AHEAD)

        async def accept() -> None:
            position = 0
            try:
                async for request in request_iterator:
                    check_decoded(request)
                    await acks.put((position, await self._enqueue(request)))
                    position += 1
            except Exception as exc:  # a bad request (or an undecodable one) ends the stream
                await acks.put((position, exc))
            finally:
                await acks.put(None)

        reader = asyncio.ensure_future(accept())
        try:
            while (item := await acks.get()) is not None:
                position, outcome = item
                try:
                    if isinstance(outcome, Exception):
                        raise outcome
                    response, durable = outcome
                    await durable
                except Exception as error:
                    raise StreamRequestError(position, error) from error
                yield response
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    @rpc_statuses("Stop")
    async def Stop(
        self, request: writer_pb2.StopRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.StopResponse:
        kind, error, ts = _stop_fields(request)
        result = await self.ledger.stop(request.session_id, kind, request.reason, error, ts)
        return writer_pb2.StopResponse(
            checkpoint_seq=result.checkpoint_seq,
            stop_seq=result.stop_seq,
            digest=result.digest,
            message_count=result.message_count,
        )

    @rpc_statuses("Resume")
    async def Resume(
        self, request: writer_pb2.ResumeRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.ResumeResponse:
        result = await self.ledger.resume(request.session_id, request.force)
        return writer_pb2.ResumeResponse(
            session_id=request.session_id,
            closed_call_ids=result.closed_call_ids,
            previous_stop_kind=result.previous_stop_kind,
            next_seq=result.next_seq,
            interrupted_round_id=result.interrupted_round_id,
        )

    @rpc_statuses("Fork")
    async def Fork(
        self, request: writer_pb2.ForkRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.ForkResponse:
        point = request.WhichOneof("at")
        result = await self.ledger.fork(
            request.session_id,
            request.at_seq if point == "at_seq" else None,
            request.before_user_message if point == "before_user_message" else None,
            request.session_key,
        )
        return writer_pb2.ForkResponse(
            session_id=result.session_id,
            forked_at_seq=result.forked_at_seq,
            digest=result.digest,
            next_seq=result.next_seq,
        )

    @rpc_statuses("DeleteSession")
    async def DeleteSession(
        self, request: writer_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.DeleteSessionResponse:
        result = await self.ledger.delete(request.session_id)
        return writer_pb2.DeleteSessionResponse(
            session_id=result.session_id, deleted_at=result.deleted_at, already_deleted=result.already_deleted
        )

    @rpc_statuses("ForgetMemories")
    async def ForgetMemories(
        self, request: writer_pb2.ForgetMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.ForgetMemoriesResponse:
        """Off the event loop (files rewritten and fsynced), as the caller (serving.tenancy)."""
        run = functools.partial(contextvars.copy_context().run, forget_memories, self.memory_store, request)
        return await asyncio.get_running_loop().run_in_executor(None, run)

    @rpc_statuses("GetShardMap")
    async def GetShardMap(
        self, request: writer_pb2.GetShardMapRequest, context: grpc.aio.ServicerContext
    ) -> writer_pb2.GetShardMapResponse:
        """Every shard's owner as this writer knows it (docs/cluster.md §4), from memory."""
        ownership = self.ledger.ownership
        shards = self.ledger.root.shards
        owners = []
        for shard in range(shards):
            owner = ownership.owner_of(shard)
            if owner is not None:
                owners.append(writer_pb2.ShardOwner(shard=shard, address=owner[0], epoch=owner[1]))
        return writer_pb2.GetShardMapResponse(
            shard_count=shards, hash=HASH_NAME, owners=owners, address=self.address
        )

    @rpc_statuses("ImportSessions")
    async def ImportSessions(
        self,
        request_iterator: AsyncIterator[writer_pb2.ImportSessionsRequest],
        context: grpc.aio.ServicerContext,
    ) -> writer_pb2.ImportSessionsResponse:
        """Whole sessions, all or nothing (writer_service.importing); importers only (serving.tenancy)."""
        session_import = SessionImport(self.ledger)
        check_importer("ImportSessions")
        try:
            async for request in request_iterator:
                check_decoded(request)
                part = request.WhichOneof("part")
                if part == "create":
                    try:
                        spec = session_spec(request.create)
                    except InvalidArgumentError as exc:
                        raise session_import.named(exc, opening=True) from exc
                    await session_import.create(spec)
                elif part == "records":
                    try:
                        payloads, times = request_payloads(request.records)
                    except RecordValidationError as exc:
                        raise session_import.refusal(exc) from exc
                    except InvalidArgumentError as exc:
                        raise session_import.named(exc) from exc
                    await session_import.append(payloads, times)
                elif part == "stop":
                    try:
                        kind, error, ts = _stop_fields(request.stop)
                    except InvalidArgumentError as exc:
                        raise session_import.named(exc) from exc
                    await session_import.stop(kind, request.stop.reason, error, ts)
                else:
                    raise InvalidArgumentError("part", "is empty: set create, records or stop")
            results = await session_import.commit()
        finally:
            await session_import.abort()
        return writer_pb2.ImportSessionsResponse(
            sessions=[
                writer_pb2.ImportedSessionResult(
                    session_id=result.session_id,
                    already_present=result.already_present,
                    records=result.records,
                    message_count=result.message_count,
                    digest=result.digest,
                )
                for result in results
            ]
        )


def _stop_fields(request: writer_pb2.StopRequest) -> tuple[StopKind, dict[str, str] | None, str]:
    """(stop kind, error or None, time in the ledger's form or "") of a StopRequest."""
    error = None
    if request.HasField("error"):
        error = {"message": request.error.message, "category": request.error.category}
    ts = ""
    if request.ts:
        check_may_set_times("ts")
        try:
            ts = normalize_timestamp(request.ts)
        except ValueError as exc:
            raise InvalidArgumentError("ts", str(exc)) from exc
    return stop_kind_from_proto(request.stop_kind), error, ts


def _health_observer(health: HealthServicer, ledger: SessionLedger) -> Callable[[bool], None]:
    """Mirror storage health into the writer's gRPC health status: NOT_SERVING after a failed
    round, or while a session awaits a repair that failed (the others keep serving)."""
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    def observe(_: bool) -> None:
        healthy = ledger.storage_health.healthy and not ledger.index.repairs.pending
        status = (
            health_pb2.HealthCheckResponse.SERVING if healthy else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        task = loop.create_task(health.set(SERVICE_NAME, status))
        pending.add(task)
        task.add_done_callback(pending.discard)

    return observe


async def _retry_repairs(ledger: SessionLedger, interval: float) -> None:
    """Every ``interval`` seconds, try again the repairs that failed (until the server stops)."""
    while True:
        await asyncio.sleep(interval)
        if ledger.index.repairs.pending:
            await ledger.retry_repairs()


@dataclass
class RunningWriter(RunningService):
    """A started writer server; ``address`` is the bound host:port, ``port`` its port."""

    service: ServiceServer
    ledger: SessionLedger
    ownership: ServedOwnership
    repairs: asyncio.Task[None] | None = None
    storage_probe: StorageProbe | None = None
    #: The retention passes (writer_service.retention), when the writer has a retention.
    retention: asyncio.Task[None] | None = None

    async def wait_drained(self) -> None:
        """Return once the writer's ownership was drained from outside (``rollout cluster drain``):
        the writer should then stop. Never returns for the embedded default."""
        await self.ownership.wait_drained()

    async def stop(self, grace: float = 5.0) -> None:
        """Release the shards (in-flight batches finish first), stop accepting, let in-flight
        calls finish, drain queues, then release the data root's lock (or the lease)."""
        await self.ownership.stop()
        for task in (self.repairs, self.retention):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.storage_probe is not None:
            await self.storage_probe.close()
        await self.service.stop(grace)
        await self.ledger.close()
        await self.ownership.close()


#: Hosts a server binds to listen on every interface: no client can be sent there.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def reachable_address(bound: str) -> str:
    """The address a writer bound to ``bound`` tells clients (GetShardMap, NOT_OWNER): ``bound``
    itself, or "" (none: clients keep the address they were given) for a wildcard host."""
    return "" if bound.rsplit(":", 1)[0] in WILDCARD_HOSTS else bound


def acquire_data_root(config: WriterConfig, address: str) -> EmbeddedOwnership | StaticOwnership:
    """Create the data root if new (``config.shards`` shards: shared.layout) and own every shard
    of it, its lock held, for this process; DataRootLockedError when another writer holds it.

    With ``config.static_shard_map``: own the shards that map gives ``address`` (the address to
    bind, its port given), holding no lock; StaticShardMapError for a map that cannot be used.
    """
    root = DataRoot(config.data_dir)
    root.create(config.shards)
    if config.static_shard_map is None:
        return EmbeddedOwnership.claim(root)
    if address.rsplit(":", 1)[-1] in ("", "0"):
        raise StaticShardMapError(
            f"a writer with a static shard map needs the address the map names, port included (not {address!r})"
        )
    ownership = StaticOwnership.load(config.static_shard_map, root.shards, address)
    if not ownership.owned_shards():
        log.warning("the static shard map %s gives %s no shard", config.static_shard_map, address)
    return ownership


async def start_writer(
    config: WriterConfig,
    address: str = "127.0.0.1:0",
    settings: ServerSettings = PLAINTEXT,
    ownership: ServedOwnership | None = None,
) -> RunningWriter:
    """Lock the root, repair torn tails, start serving on ``address`` with ``settings``
    (TLS, authentication, interceptors: serving.server).

    ``ownership``: a served ownership (a writer of a cluster) instead of the embedded default:
    nothing is locked or indexed up front; each shard is recovered and indexed when it is
    taken, after the server listens (its bound address is advertised unless the ownership
    was given another).

    Raises DataRootLockedError when another writer holds the data root, BindError
    when the address cannot be bound, OSError when a TLS file cannot be read and
    OwnershipStartError when the served ownership cannot start.
    """
    if ownership is None:
        ownership = acquire_data_root(config, address)
        # every shard now (None), or a static map's
        indexed = ownership.owned_shards() if isinstance(ownership, StaticOwnership) else None
    else:
        DataRoot(config.data_dir).create(config.shards)
        indexed = []  # none: each as it is taken
    keep_large_blocks_mapped()
    try:
        index = await asyncio.get_running_loop().run_in_executor(
            None, build_index, DataRoot(config.data_dir), indexed
        )
        ledger = SessionLedger(config, index, ownership)
        service = ServiceServer(
            "writer",
            settings,
            options=[
                ("grpc.max_receive_message_length", request_limit(config.max_record_bytes)),
                ("grpc.max_send_message_length", MAX_REPLY_BYTES),
            ],
        )
        screen = functools.partial(
            screen_append, max_record_bytes=config.max_record_bytes, trimmer=ledger.heap_trimmer
        )
        large_import_parts = functools.partial(screen_import, trimmer=ledger.heap_trimmer)
        large_requests = functools.partial(screen_request, trimmer=ledger.heap_trimmer)
        servicer = RolloutWriterServicer(ledger)
        service.add(
            SERVICE,
            servicer,
            {
                "Append": screen,
                "AppendStream": screen,
                "ImportSessions": large_import_parts,
                **dict.fromkeys(("CreateSession", "Stop", "Resume", "Fork", "DeleteSession"), large_requests),
            },
        )
        bound = service.bind(address)
        advertised = address if isinstance(ownership, StaticOwnership) else reachable_address(bound)
        await service.start()
        if ledger.index.repairs.pending:
            await service.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
        observer = _health_observer(service.health, ledger)
        ledger.storage_health.observe(observer)
        storage_probe = StorageProbe(ledger.storage_health, config.data_dir, ledger.run_io)
        ledger.storage_health.observe(storage_probe)
        ledger.index.repairs.observe(observer)
        repairs = asyncio.ensure_future(_retry_repairs(ledger, config.repair_retry_seconds))
        retention = None
        try:
            await ownership.start(advertised, ledger)
            servicer.address = ownership.address  # a cluster writer's --advertise, if given
            if config.retain_stopped_days is not None:
                retention = asyncio.ensure_future(
                    retain(ledger, config.retain_stopped_days, config.retention_interval_seconds)
                )
        except BaseException:
            repairs.cancel()
            await storage_probe.close()
            await service.stop(0)
            await ledger.close()
            raise
    except BaseException:
        await ownership.stop()
        await ownership.close()
        raise
    log.info(
        "writer serving on %s (%s), data root %s; durable writes: %s",
        bound,
        settings.describe(),
        config.data_dir,
        durable_write_method(config.commit),
    )
    return RunningWriter(service, ledger, ownership, repairs, storage_probe, retention)
