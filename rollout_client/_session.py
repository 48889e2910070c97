"""Sessions of the asyncio client: :class:`AsyncSession` (append, replay, stop, resume, fork,
stop facts, verify) and :class:`AsyncReplayStream`. Obtained from
:class:`rollout_client.SessionClient` (``create_session``, ``session``); the blocking
:class:`rollout_client.Session` runs these same calls on its client's loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import grpc

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from rollout_client._appends import (
    REFUSED_UNWRITTEN,
    Attempts,
    PendingAppend,
    RetryPolicy,
    is_reply_too_large,
    is_retryable,
)
from rollout_client._connections import ServiceConnection, UnreachedError, refused_at_connect
from rollout_client._errors import (
    AppendOutcomeUnknownError,
    FailedPreconditionError,
    FieldViolation,
    InvalidArgumentError,
    ResourceExhaustedError,
    SessionStoppedError,
    error_from_rpc,
)
from rollout_client._kept_stream import KeptAppendStream
from rollout_client._loops import PerLoop
from rollout_client._records import Record, append_record, message_to_dict, record_lines
from rollout_client._results import (
    AppendResult,
    ForkOrigin,
    RecentMessages,
    Replay,
    ReplaySummary,
    ResumeResult,
    StopFacts,
    StopResult,
    VerifyReport,
    WatchedRecord,
)
from rollout_client._routing import WriterRouting, nothing_done
from shared.errors import RecordValidationError
from shared.rounds import Round
from shared.wire import round_from_proto, stop_kind_to_proto


class SessionClient(Protocol):
    """What sessions use of their client (:class:`rollout_client.AsyncRolloutClient` is the one
    implementation), so this module does not import it."""

    retry: RetryPolicy
    writer_connection: ServiceConnection[writer_pb2_grpc.RolloutWriterStub]
    reader_connection: ServiceConnection[reader_pb2_grpc.RolloutReaderStub]
    routing: WriterRouting

    @property
    def writer_stub(self) -> writer_pb2_grpc.RolloutWriterStub: ...

    @property
    def reader_stub(self) -> reader_pb2_grpc.RolloutReaderStub: ...

    async def call(
        self,
        method: Callable[..., Awaitable[Any]],
        request: Any,
        retry_on: frozenset[grpc.StatusCode] = ...,
    ) -> Any: ...

    async def writer_call(
        self,
        session_id: str,
        rpc: str,
        request: Any,
        retry_on: frozenset[grpc.StatusCode] = ...,
    ) -> Any: ...

    async def append(self, pending: PendingAppend) -> writer_pb2.AppendResponse: ...

    async def next_seq(self, session_id: str) -> int: ...


class AsyncReplayStream:
    """``async for message in session.stream_replay():`` message dicts in order, from chunks of
    ~1 MiB; :attr:`summary` is set once the last chunk has arrived."""

    def __init__(self, client: SessionClient, request: reader_pb2.ReplayRequest) -> None:
        self._client = client
        self._request = request
        self.summary: ReplaySummary | None = None

    async def chunks(self) -> AsyncGenerator[list[dict[str, Any]], None]:
        """The messages chunk by chunk, as the reader sends them."""
        connection = self._client.reader_connection
        try:
            await connection.reached(self._client.retry.deadline)
            async for chunk in self._client.reader_stub.StreamReplay(self._request):
                if chunk.HasField("summary"):
                    self.summary = ReplaySummary.from_proto(chunk.summary, chunk.summary.message_count)
                yield [message_to_dict(message) for message in chunk.messages]
        except UnreachedError as unreached:
            raise unreached.error from None
        except grpc.aio.AioRpcError as exc:
            try:
                connection.failed(exc)
            except UnreachedError as unreached:
                raise unreached.error from exc
            raise error_from_rpc(exc) from exc

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        async for messages in self.chunks():
            for message in messages:
                yield message


class AsyncSession:
    """One session of the ledger: append, replay, stop, resume, fork, stop facts, verify.

    Appends of one Session object from one event loop run one at a time, in call order (an
    agent's turns); use several sessions, not several tasks on one, for parallel writers. From
    several event loops (threads with loops of their own) each loop's appends keep their order
    and run beside the other loops' (each still exactly once).
    """

    def __init__(
        self,
        client: SessionClient,
        session_id: str,
        *,
        next_seq: int | None = None,
        forked_from: ForkOrigin | None = None,
    ) -> None:
        self.client = client
        self.id = session_id
        self._next_seq = next_seq
        #: Set on the session :meth:`fork` returns: its source, fork seq and digest.
        self.forked_from = forked_from
        self._append_locks: PerLoop[asyncio.Lock] = PerLoop(asyncio.Lock)
        self._streams: PerLoop[KeptAppendStream] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"

    @property
    def next_seq(self) -> int | None:
        """The seq this Session expects its next record to get (None until it has learnt it)."""
        return self._next_seq

    def learn_next_seq(self, next_seq: int) -> None:
        """Take ``next_seq`` (read from the session, e.g. a GetRecentMessages reply) as the lower
        bound of the next append's seq, unless one is known or an append is under way."""
        if self._next_seq is None and not any(lock.locked() for lock in self._append_locks.values()):
            self._next_seq = next_seq

    def keep_stream(self) -> None:
        """Send this session's appends over an AppendStream kept open per event loop instead of a
        unary Append each (:mod:`rollout_client._kept_stream`: faster per append, exactly once the
        same, refusals raised the same). Close it with :meth:`close_stream`; it also goes with
        this object."""
        if self._streams is None:
            self._streams = PerLoop(KeptAppendStream)

    def close_stream(self) -> None:
        """Close the running loop's kept stream, if any (those of other loops go with this object)."""
        kept = self._streams.current() if self._streams is not None else None
        if kept is not None:
            kept.close()

    async def _send(self, pending: PendingAppend) -> writer_pb2.AppendResponse:
        """Settle ``pending``: first on the kept stream when there is one, else (or when the stream
        gave no answer) with the unary path."""
        if self._streams is not None:
            answer = await self._streams.get().send(self.client.routing, self.client.retry, pending)
            if answer is not None:
                return answer
        return await self.client.append(pending)

    async def append(self, *records: Record, expected_next_seq: int | None = None) -> AppendResult:
        """Append message dicts and typed records (:class:`Event`, :class:`Compaction`,
        :class:`TurnContext`, :class:`Retraction`, :class:`EncodedMessage`) as one atomic request, exactly once (see
        :mod:`rollout_client._appends`: a request id the writer answers for, retries with
        backoff, a retry after a writer restart answered from the file).

        ``expected_next_seq``: write only if the session's next seq is exactly this (a
        compare-and-swap, e.g. with :meth:`recent_messages`' ``next_seq``): otherwise
        FailedPreconditionError, whose ``next_seq`` is the actual one, and nothing is written.

        Raises ValueError / TypeError for a record of the wrong shape (nothing sent),
        InvalidArgumentError (field violations name ``records[i].<field>``), NotFoundError,
        SessionStoppedError (call resume()), FailedPreconditionError (``expected_next_seq``),
        AppendOutcomeUnknownError, and the other statuses of writer.proto Append once retries
        are exhausted.
        """
        if not records:
            raise ValueError("append() needs at least one record")
        try:
            protos = [append_record(record, index) for index, record in enumerate(records)]
        except RecordValidationError as exc:
            violation = FieldViolation(f"records[{exc.index}].{exc.field}", exc.description)
            raise InvalidArgumentError(str(exc), field_violations=(violation,)) from exc
        lines = [record_lines(record) for record in records]
        async with self._append_locks.get():
            if expected_next_seq is not None:
                since = expected_next_seq  # landed, it sits exactly there
            else:
                if self._next_seq is None:
                    self._next_seq = await self.client.next_seq(self.id)
                since = self._next_seq
            pending = PendingAppend(self.id, protos, lines, since, expected_next_seq=expected_next_seq)
            try:
                response = await self._send(pending)
            except AppendOutcomeUnknownError:
                self._next_seq = None  # learn it again before the next append
                raise
            except FailedPreconditionError as error:
                if error.next_seq is not None:
                    self._next_seq = error.next_seq
                raise
            self._next_seq = response.next_seq
            return AppendResult.from_proto(response)

    def _replay_request(self, token_budget: int | None, max_messages: int | None) -> reader_pb2.ReplayRequest:
        return reader_pb2.ReplayRequest(
            session_id=self.id, token_budget=token_budget or 0, max_messages=max_messages or 0
        )

    async def replay(self, token_budget: int | None = None, max_messages: int | None = None) -> Replay:
        """The exact rebuilt message sequence (system, reasoning, full tool outputs), degraded
        ledger, digest status (``verified`` / ``mismatch`` / ``no_checkpoint``) and
        ``too_large`` when over ``token_budget`` (estimated tokens; messages still returned).

        One unary GetReplay; a session whose answer is over the reader's unary reply limit
        (64 MiB by default: ErrorInfo ``REPLY_TOO_LARGE``) is read with StreamReplay instead,
        with the same result (held whole in memory here: use :meth:`stream_replay` to go
        through a large session chunk by chunk). Raises NotFoundError, InvalidArgumentError.
        """
        request = self._replay_request(token_budget, max_messages)
        try:
            response = await self.client.call(self.client.reader_stub.GetReplay, request)
        except ResourceExhaustedError as error:
            if not is_reply_too_large(error):
                raise
            stream = AsyncReplayStream(self.client, request)
            messages = [message async for message in stream]
            if stream.summary is None:
                raise error  # the stream ended without its summary: keep the first refusal
            return Replay(self.id, messages, stream.summary)
        return Replay.from_proto(response)

    async def recent_messages(self, limit: int = 0, *, canonical: bool = False) -> RecentMessages:
        """The last ``limit`` messages of the rebuilt view (0: all), oldest first, with each one's
        origin and the next seq as read (reader.proto GetRecentMessages: served from the
        reader's rendered copy, no digest). With ``canonical`` each message is its canonical
        JSON (the digest's fields only: no is_error, synthetic, is_anchored or truncation
        marker), cheaper to read. Also teaches this Session a next seq to append at.
        Raises NotFoundError, InvalidArgumentError (negative limit), ResourceExhaustedError
        (too many to fit one reply)."""
        reply = await self.client.call(
            self.client.reader_stub.GetRecentMessages,
            reader_pb2.RecentMessagesRequest(session_id=self.id, limit=limit, canonical=canonical),
        )
        recent = RecentMessages.from_proto(reply)
        self.learn_next_seq(recent.next_seq)  # a lower bound: all request_since_seq needs
        return recent

    def stream_replay(self, token_budget: int | None = None) -> AsyncReplayStream:
        """The same replay streamed in ~1 MiB chunks (no size limit); see :class:`AsyncReplayStream`."""
        return AsyncReplayStream(self.client, self._replay_request(token_budget, None))

    async def stop(self, kind: str, reason: str = "", *, error: dict[str, str] | None = None) -> StopResult:
        """End the run with stop kind ``kind`` (``completed``, ``paused``, ``cancelled``, ``failed``,
        ``budget_exceeded``, ``interrupted``): the writer checkpoints the whole file and writes
        the stop record. ``error``: ``{"message", "category"}``. A retry after a lost answer that
        finds the session stopped with this kind and reason takes that stop as its own.
        Raises ValueError listing the kinds for an unknown kind, SessionStoppedError (already stopped),
        DataLossError (damaged file), NotFoundError."""
        request = writer_pb2.StopRequest(
            session_id=self.id, stop_kind=stop_kind_to_proto(kind), reason=reason
        )
        if error is not None:
            request.error.CopyFrom(
                records_pb2.StopError(message=error.get("message", ""), category=error.get("category", ""))
            )
        attempts = Attempts(self.client.retry)
        maybe_stopped = False
        way = self.client.routing.call(self.id)
        while True:
            connection = await way.connection(attempts.remaining())
            stub = connection.stub
            try:
                response = await attempts.send(functools.partial(stub.Stop, request), connection)
                return StopResult.from_proto(response)
            except UnreachedError as unreached:
                raise unreached.error from None
            except grpc.aio.AioRpcError as exc:
                failure = error_from_rpc(exc)
            if isinstance(failure, SessionStoppedError) and maybe_stopped:
                facts = await self.stop_facts()
                if facts.checkpoint and facts.stop_kind == kind and facts.reason == reason:
                    checkpoint = facts.checkpoint
                    return StopResult(
                        checkpoint.seq, facts.stop_seq, checkpoint.digest, checkpoint.message_count
                    )
            if is_retryable(failure) and failure.code is not None:
                maybe_stopped = maybe_stopped or (
                    failure.code not in REFUSED_UNWRITTEN and not nothing_done(failure)
                )
                if way.redirected(failure, connection, attempts.remaining()):
                    continue
                if await attempts.wait():
                    continue
            raise failure

    async def resume(self, force: bool = False) -> ResumeResult:
        """Re-open the session for appending: tool calls left without an output get a synthetic
        one, then a ``resumed`` event. Only ``paused`` / ``cancelled`` (and legacy) stops resume
        without ``force`` (default-deny). Resuming twice adds nothing twice, so it is retried.
        Raises FailedPreconditionError (not replayable as-is; the message says why), NotFoundError."""
        response = await self.client.writer_call(
            self.id, "Resume", writer_pb2.ResumeRequest(session_id=self.id, force=force)
        )
        async with self._append_locks.get():
            self._next_seq = response.next_seq
        return ResumeResult.from_proto(response)

    async def fork(
        self, *, at_seq: int | None = None, before_user_message: int | None = None, session_key: str = ""
    ) -> AsyncSession:
        """A new session holding this one's records up to ``at_seq`` (inclusive), or everything
        before the Nth user message (1-based); its ``forked_from`` names this session, the seq
        of the last record kept and the digest up to there. Not retried after a lost answer (it would fork
        twice). ``session_key`` names the fork in this session's tenant (its id is the one
        ``create_session(session_key=...)`` would give; AlreadyExistsError when taken).
        Raises ValueError unless exactly one point is given; FailedPreconditionError for
        a point between a tool call and its output; InvalidArgumentError, NotFoundError, DataLossError."""
        if (at_seq is None) == (before_user_message is None):
            raise ValueError("fork() needs exactly one of at_seq= or before_user_message=")
        request = writer_pb2.ForkRequest(session_id=self.id, session_key=session_key)
        if at_seq is not None:
            request.at_seq = at_seq
        else:
            request.before_user_message = before_user_message or 0
        response = await self.client.writer_call(self.id, "Fork", request, REFUSED_UNWRITTEN)
        origin = ForkOrigin(self.id, response.forked_at_seq, response.digest)
        return AsyncSession(self.client, response.session_id, next_seq=response.next_seq, forked_from=origin)

    async def stop_facts(self) -> StopFacts:
        """Why and where the session stopped, read from its tail (``found=False``: unknown)."""
        facts = await self.client.call(
            self.client.reader_stub.GetStopFacts, reader_pb2.StopFactsRequest(session_id=self.id)
        )
        return StopFacts.from_proto(facts)

    async def rounds(self) -> list[Round]:
        """The session as question-and-answer rounds, oldest first (ListRounds, every page):
        :class:`shared.rounds.Round` each, with its status, times, metrics and seq range."""
        found: list[Round] = []
        token = ""
        while True:
            page = await self.client.call(
                self.client.reader_stub.ListRounds,
                reader_pb2.ListRoundsRequest(session_id=self.id, page_size=1000, page_token=token),
            )
            found.extend(round_from_proto(message) for message in page.rounds)
            token = page.next_page_token
            if not token:
                return found

    async def verify(self) -> VerifyReport:
        """Full integrity check: every line, seq continuity, the last checkpoint's digest."""
        report = await self.client.call(
            self.client.reader_stub.VerifySession, reader_pb2.VerifyRequest(session_id=self.id)
        )
        return VerifyReport.from_proto(report)

    async def watch(self, from_seq: int = 0) -> AsyncIterator[WatchedRecord]:
        """``async for record in session.watch():`` the session's records from ``from_seq``
        (0: from its session_meta), then each new one as it lands, once each and in order; the
        iteration ends after the stop record of a stopped session (a later resume() needs a new
        watch from the stop's seq + 1). Leaving the loop early cancels the stream.

        A stream cut by UNAVAILABLE (a reader restart) is opened again from the last seq
        received + 1, with the client's backoff; the deadline counts from the last record.
        Raises NotFoundError, InvalidArgumentError (negative from_seq), AbortedError (the
        session file was replaced or cut: read the session again), UnavailableError once the
        retries are spent. See reader.proto WatchSession.
        """
        async for records in self.watch_batches(from_seq):
            for record in records:
                yield record

    async def watch_batches(self, from_seq: int = 0) -> AsyncGenerator[list[WatchedRecord], None]:
        """The records of :meth:`watch` as the reader sends them: lists of one or more."""
        attempts = Attempts(self.client.retry)
        connection = self.client.reader_connection
        while True:
            try:
                await connection.reached(attempts.remaining())
            except UnreachedError as unreached:
                raise unreached.error from None
            call = self.client.reader_stub.WatchSession(
                reader_pb2.WatchSessionRequest(session_id=self.id, from_seq=from_seq)
            )
            try:
                async for reply in call:
                    records = [WatchedRecord.from_proto(record) for record in reply.records]
                    seqs = [record.seq for record in records if record.seq >= 0]
                    if seqs:
                        from_seq = seqs[-1] + 1  # where a reopened stream starts
                    attempts = Attempts(self.client.retry)
                    yield records
                return
            except grpc.aio.AioRpcError as exc:
                failure = error_from_rpc(exc)
                try:
                    connection.failed(exc)
                except UnreachedError as unreached:
                    raise unreached.error from exc
                if refused_at_connect(exc):  # nothing was opened: open it once connected again
                    if attempts.remaining() <= 0:
                        raise connection.gone() from exc
                    await asyncio.sleep(min(self.client.retry.initial_backoff, attempts.remaining()))
                    continue
                if failure.code is not grpc.StatusCode.UNAVAILABLE or not await attempts.wait():
                    raise failure from exc
            finally:
                call.cancel()
