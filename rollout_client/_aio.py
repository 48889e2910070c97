"""The asyncio client: :class:`AsyncRolloutClient` (its sessions are in :mod:`rollout_client._session`).

This is the one implementation of every call; the blocking :class:`rollout_client.RolloutClient`
runs it on an event loop of its own. An ``AsyncRolloutClient`` may be used from several event
loops (``asyncio.run`` per call, ``Runner.run_sync``, threads each with a loop): it opens a
channel per service on each loop's first call there (:mod:`rollout_client._connections`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc

from rollout.v1 import reader_pb2, reader_pb2_grpc, writer_pb2, writer_pb2_grpc
from rollout_client._appends import (
    REFUSED_UNWRITTEN,
    RETRYABLE,
    Attempts,
    PendingAppend,
    RetryPolicy,
    is_retryable,
)
from rollout_client._channels import channel_credentials, open_channel
from rollout_client._connections import ChannelOpener, ServiceConnection, UnreachedError
from rollout_client._delegation import current_delegation
from rollout_client._errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    RolloutError,
    RootNotDeclaredError,
    UnavailableError,
    error_from_rpc,
)
from rollout_client._records import Event, append_record
from rollout_client._results import (
    Delegation,
    DeleteResult,
    Memories,
    PendingRound,
    RoundRecords,
    SearchPage,
    SessionPage,
)
from rollout_client._routing import WriterRouting, not_owner_info, nothing_done
from rollout_client._session import AsyncSession
from rollout_client._settings import client_settings
from shared.memory import MAX_MEMORIES_LIMIT, ArtifactKind, ResolvedProvenance, Scope
from shared.memory_wire import resolved_from_proto, scope_to_proto
from shared.naming import new_session_id

#: Reads: idempotent, retried on every retryable status.
_READ_RETRY = RETRYABLE
_PROBE = append_record(Event("rollout_client.next_seq_probe"), 0)


def _opener(
    credentials: dict[str, grpc.ChannelCredentials | None], token: str | None, tls_ca: Path | None
) -> ChannelOpener:
    """The client's own channel opener: :func:`open_channel` with each address's credentials (those
    of a writer first learnt from the shard map made on first use: ValueError for a token to a
    non-loopback address without ``tls_ca``)."""

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        if address not in credentials:
            credentials[address] = channel_credentials(address, token, tls_ca)
        return open_channel(address, credentials[address])

    return opener


def _unsent_append(pending: PendingAppend, error: RolloutError) -> RolloutError:
    """The error of an append whose last attempt could not be sent (``error``): its outcome is
    unknown if an earlier attempt may have landed, else it was not written."""
    if pending.maybe_landed:
        return pending.outcome_unknown(error)
    if isinstance(error, UnavailableError):
        return pending.not_written(error)
    return error


def _root_role(agent_name: str, root: bool | None) -> writer_pb2.SessionRole:
    """The SessionRole of a session created outside any delegation (docs/spec.md §5, seed rule 13)."""
    if root is True:
        return writer_pb2.SESSION_ROLE_ROOT
    if root is False:
        return writer_pb2.SESSION_ROLE_CHILD_WITHOUT_COORDINATES
    if agent_name:
        raise RootNotDeclaredError(
            f"create_session({agent_name!r}) outside any delegation: pass root=True for a top-level"
            " agent session, or create it inside rollout_client.delegation(parent=..., tool_call_id=...)"
            " so that it records its parent (empty coordinates are never taken for a root)"
        )
    return writer_pb2.SESSION_ROLE_UNSPECIFIED


class AsyncRolloutClient:
    """A client of a writer and a reader (``host:port`` each; ``writer`` may be a comma list of the
    writers of one cluster: each session's calls then go to its shard's owner, NOT_OWNER answers
    followed within the call's deadline, see :mod:`rollout_client._routing`).

    ``token``: a bearer token sent on every call; ``tls_ca``: the CA file (PEM) of the
    services' TLS certificates (see :mod:`rollout_client._channels`). Each of these four not
    given comes from the environment as for the ``rollout`` command (``ROLLOUT_WRITER``,
    ``ROLLOUT_READER``, ``ROLLOUT_TOKEN``, ``ROLLOUT_TLS_CA``; :func:`rollout_client.client_settings`),
    else 127.0.0.1:50051, 127.0.0.1:50052, no token, plaintext. ``retry``: the backoff
    and deadline of retried calls. ``channels``: the transport seam, ``channels(service,
    address)`` ("writer" / "reader") returning a grpc.aio channel the client uses instead of
    opening its own (its credentials are the opener's: ValueError with ``token`` or ``tls_ca``;
    give it :data:`rollout_client.CHANNEL_OPTIONS` for the client's limits and prompt
    reconnects); called once per event loop, and the client closes what it returns.

    A service that refuses connections and has not answered since the client was created
    fails the call at once (UnavailableError, "is it running at …?"); one that answered before
    and is restarting is waited for within the call's deadline, and an append none of whose
    attempts could be sent raises UnavailableError saying it was not written
    (:mod:`rollout_client._connections`). Use as ``async with AsyncRolloutClient(...) as
    client:`` or call :meth:`close`. Raises ValueError for a token to a non-loopback address
    without ``tls_ca``.
    """

    def __init__(
        self,
        writer: str | None = None,
        reader: str | None = None,
        *,
        token: str | None = None,
        tls_ca: str | Path | None = None,
        retry: RetryPolicy | None = None,
        channels: ChannelOpener | None = None,
    ) -> None:
        settings = client_settings(writer, reader, token=token, tls_ca=tls_ca)
        self.writer_address = settings.writer
        self.reader_address = settings.reader
        self.retry = retry or RetryPolicy()
        if channels is not None and (token is not None or tls_ca is not None):
            raise ValueError("give channels= the token and TLS roots of its channels, not token= / tls_ca=")
        reader = settings.reader
        opener = channels or _opener(
            {
                address: channel_credentials(address, settings.token, settings.tls_ca)
                for address in (*settings.writers, reader)
            },
            settings.token,
            settings.tls_ca,
        )

        def writer_connection(address: str) -> ServiceConnection[writer_pb2_grpc.RolloutWriterStub]:
            return ServiceConnection(
                "writer", address, lambda: opener("writer", address), writer_pb2_grpc.RolloutWriterStub
            )

        #: The writers and the shard map (rollout_client._routing): each session's calls go to the
        #: owner of its shard.
        self.routing = WriterRouting(settings.writers, writer_connection)
        #: The first writer given (the one calls go to while no shard map is known).
        self.writer_connection = self.routing.default
        self.reader_connection: ServiceConnection[reader_pb2_grpc.RolloutReaderStub] = ServiceConnection(
            "reader", reader, lambda: opener("reader", reader), reader_pb2_grpc.RolloutReaderStub
        )

    # -- channels and calls ---------------------------------------------------------

    @property
    def writer_stub(self) -> writer_pb2_grpc.RolloutWriterStub:
        """The first writer's stub on the running event loop's channel (opened on first use there)."""
        return self.writer_connection.stub

    @property
    def reader_stub(self) -> reader_pb2_grpc.RolloutReaderStub:
        """The reader's stub on the running event loop's channel (opened on first use there)."""
        return self.reader_connection.stub

    def _connection_of(self, method: object) -> ServiceConnection[Any] | None:
        """The service whose stub ``method`` belongs to (None for a method not of a stub of ours)."""
        connections: list[ServiceConnection[Any]] = [*self.routing.connections(), self.reader_connection]
        for connection in connections:
            if connection.serves(method):
                return connection
        return None

    async def call(
        self,
        method: Callable[..., Awaitable[Any]],
        request: Any,
        retry_on: frozenset[grpc.StatusCode] = _READ_RETRY,
    ) -> Any:
        """One unary call, retried with backoff on ``retry_on`` statuses within the policy's
        deadline (and, whatever ``retry_on``, once connected again after an attempt refused at
        connect: nothing was sent); a failure raises its typed :class:`RolloutError`."""
        attempts = Attempts(self.retry)
        connection = self._connection_of(method)
        while True:
            try:
                return await attempts.send(lambda: method(request), connection)
            except UnreachedError as unreached:
                raise unreached.error from None
            except grpc.aio.AioRpcError as exc:
                error = error_from_rpc(exc)
                if not is_retryable(error, retry_on) or not await attempts.wait():
                    raise error from exc

    async def writer_call(
        self,
        session_id: str,
        rpc: str,
        request: Any,
        retry_on: frozenset[grpc.StatusCode] = _READ_RETRY,
    ) -> Any:
        """One unary writer call ``rpc`` about ``session_id``, sent to the owner of its shard
        (rollout_client._routing) and retried as :meth:`call` does; a NOT_OWNER naming another
        owner is sent there at once (when ``retry_on`` has UNAVAILABLE, or the writer did nothing:
        :func:`rollout_client._routing.nothing_done`), all within the policy's deadline."""
        attempts = Attempts(self.retry)
        way = self.routing.call(session_id)
        while True:
            connection = await way.connection(attempts.remaining())
            stub = connection.stub
            try:
                return await attempts.send(
                    functools.partial(getattr(stub, rpc), request), connection, self.routing.reach_limit()
                )
            except UnreachedError as unreached:
                if self.routing.owner_unreached(unreached.error) and await attempts.wait():
                    continue
                raise unreached.error from None
            except grpc.aio.AioRpcError as exc:
                error = error_from_rpc(exc)
            followed = error.code in retry_on or nothing_done(error)
            if followed and way.redirected(error, connection, attempts.remaining()):
                continue
            if (is_retryable(error, retry_on) or (followed and not_owner_info(error) is not None)) and (
                await attempts.wait()
            ):
                continue
            raise error

    async def append(self, pending: PendingAppend) -> writer_pb2.AppendResponse:
        """Send one Append until it is settled exactly once (rules in :mod:`rollout_client._appends`):
        the writer alone answers for the request id, the owner of the session's shard
        (rollout_client._routing: a NOT_OWNER is followed to the owner it names, with the same
        request id, which the new owner answers from the file if an attempt landed). Raises
        AppendOutcomeUnknownError when the outcome cannot be known, UnavailableError ("was not
        written") when no attempt could be sent, else the typed error of the last answer."""
        attempts = Attempts(self.retry)
        way = self.routing.call(pending.session_id)
        while True:
            connection = await way.connection(attempts.remaining())
            stub = connection.stub
            try:
                response: writer_pb2.AppendResponse = await attempts.send(
                    functools.partial(stub.Append, pending.request()), connection, self.routing.reach_limit()
                )
                return response
            except UnreachedError as unreached:
                if self.routing.owner_unreached(unreached.error) and await attempts.wait():
                    continue  # nothing of this attempt was sent: route it again
                raise _unsent_append(pending, unreached.error) from None
            except grpc.aio.AioRpcError as exc:
                error = error_from_rpc(exc)
            if is_retryable(error) and error.code is not None:
                pending.after_transport_failure(error.code)
                if way.redirected(error, connection, attempts.remaining()):
                    continue
                if await attempts.wait():
                    continue
            if pending.unsettled(error):
                raise pending.outcome_unknown(error) from error
            raise error

    async def next_seq(self, session_id: str) -> int:
        """The session's next seq as the writer has it now, asked with ``expected_next_seq=0``
        (never a valid next seq: seq 0 is the session_meta), which writes nothing. A lower
        bound for the next append (:mod:`rollout_client._appends`).
        Raises NotFoundError for an unknown session, SessionStoppedError."""
        probe = writer_pb2.AppendRequest(session_id=session_id, records=[_PROBE], expected_next_seq=0)
        try:
            await self.writer_call(session_id, "Append", probe)
        except FailedPreconditionError as error:
            if error.next_seq is not None:
                return error.next_seq
            raise
        raise InternalError(f"the writer accepted a probe for session {session_id} at seq 0")

    async def close(self) -> None:
        """Close the channels of every event loop (calls in flight on this loop are cancelled; a
        loop running in another thread closes its own soon)."""
        await self.writer_connection.close()
        await self.reader_connection.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    # -- sessions ----------------------------------------------------------------------

    async def create_session(
        self,
        agent_name: str | None = None,
        *,
        root: bool | None = None,
        tenant: str = "",
        model: str = "",
        cwd: str = "",
        originator: str = "",
        client_version: str = "",
        session_id: str | None = None,
        session_key: str = "",
    ) -> AsyncSession:
        """Create a session (its session_meta is durable when this returns).

        Inside ``rollout_client.delegation(parent=..., tool_call_id=...)`` the session is a
        CHILD carrying both coordinates (unless ``root=True``). Outside: ``root=True`` makes a
        ROOT; ``root=False`` a child without coordinates; naming an agent without either raises
        :class:`RootNotDeclaredError` (never silently a root). The session id is made here
        (UUIDv7) unless given, so a retry after a lost answer cannot create a second session.
        ``session_key``: the caller's own name for the session, unique in its tenant; the
        writer derives the id from it (see :meth:`resolve_session`).
        Raises InvalidArgumentError (bad agent name or field), AlreadyExistsError (a given id
        or key already in the ledger: its ``session_id`` names the session), UnavailableError.
        """
        scope = current_delegation()
        request = writer_pb2.CreateSessionRequest(
            session_id=session_id or ("" if session_key else new_session_id()),
            session_key=session_key,
            agent_name=agent_name or "",
            tenant=tenant,
            model=model,
            cwd=cwd,
            originator=originator,
            client_version=client_version,
        )
        if scope is not None and root is not True:
            request.parent_session_id = scope.parent_session_id
            request.delegation_id = scope.tool_call_id
            request.role = writer_pb2.SESSION_ROLE_CHILD
        else:
            request.role = _root_role(request.agent_name, root)
        attempts = Attempts(self.retry)
        maybe_created = False
        way = self.routing.call(request.session_id)
        while True:
            connection = await way.connection(attempts.remaining())
            stub = connection.stub
            try:
                response = await attempts.send(functools.partial(stub.CreateSession, request), connection)
                return AsyncSession(self, response.session_id, next_seq=response.next_seq)
            except UnreachedError as unreached:
                raise unreached.error from None
            except grpc.aio.AioRpcError as exc:
                error = error_from_rpc(exc)
            if isinstance(error, AlreadyExistsError) and maybe_created:
                # the lost answer's session
                return AsyncSession(self, request.session_id or error.session_id or "")
            if is_retryable(error) and error.code is not None:
                maybe_created = maybe_created or (
                    error.code not in REFUSED_UNWRITTEN and not nothing_done(error)
                )
                if way.redirected(error, connection, attempts.remaining()):
                    continue
                if await attempts.wait():
                    continue
            raise error

    async def resolve_session(self, session_key: str, *, tenant: str = "") -> tuple[str, bool]:
        """(session id, found) of the session ``session_key`` names in the caller's tenant (reader.proto
        ResolveSession; a key that is the id of a session the caller sees names that session).
        ``found`` False: not created yet (the id is the one ``create_session(session_key=...)``
        gives it). Raises InvalidArgumentError (an empty or overlong key), PermissionDeniedError."""
        reply = await self.call(
            self.reader_stub.ResolveSession,
            reader_pb2.ResolveSessionRequest(session_key=session_key, tenant=tenant),
        )
        return reply.session_id, reply.found

    async def pending_rounds(
        self, *, tenant: str = "", since: str = "", limit: int = 0, idle_seconds: int = 0
    ) -> list[PendingRound]:
        """Rounds a crash left pending, newest first (reader.proto ListPendingRounds): sessions with
        no stop record, nothing appended for ``idle_seconds`` (0: 300) and a last round without
        a final answer; ``since`` (RFC 3339) bounds the last append, ``limit`` the rounds (0:
        100). Close one with ``session(pending.session_id).resume()``, which records it
        interrupted. Raises InvalidArgumentError, PermissionDeniedError (another tenant)."""
        reply = await self.call(
            self.reader_stub.ListPendingRounds,
            reader_pb2.ListPendingRoundsRequest(
                tenant=tenant, since=since, limit=limit, idle_seconds=idle_seconds
            ),
        )
        return [PendingRound.from_proto(message) for message in reply.rounds]

    async def round(self, round_id: str, *, session_id: str = "") -> RoundRecords:
        """One round by its id (reader.proto GetRound): its summary, records and how many sessions
        hold it; ``session_id`` reads it from that session (empty: the one that wrote its
        trigger, or a fork holding it). Raises NotFoundError, InvalidArgumentError,
        ResourceExhaustedError (its records do not fit one reply)."""
        reply = await self.call(
            self.reader_stub.GetRound, reader_pb2.GetRoundRequest(round_id=round_id, session_id=session_id)
        )
        return RoundRecords.from_proto(reply)

    def session(self, session_id: str) -> AsyncSession:
        """The existing session ``session_id`` (no call is made; a wrong id fails on first use)."""
        return AsyncSession(self, session_id)

    async def delete_session(self, session_id: str) -> DeleteResult:
        """Delete a session for good (writer.proto DeleteSession): its file and everything
        derived from it go, its id is never used again, an audit record says who deleted it and
        when. Forks and children of it stay. Retried like a read: a delete of a deleted session
        answers ``already_deleted`` (so a retry after a lost answer succeeds). Raises
        NotFoundError (unknown, or another tenant's), InvalidArgumentError (a malformed id),
        AbortedError (a Stop, Resume or Delete of it kept running past the retry deadline),
        UnavailableError."""
        response = await self.call(
            self.writer_stub.DeleteSession, writer_pb2.DeleteSessionRequest(session_id=session_id)
        )
        return DeleteResult.from_proto(response)

    async def list_sessions(
        self,
        *,
        page_size: int = 0,
        tenant: str = "",
        agent_name: str = "",
        parent_session_id: str = "",
        created_after: str = "",
        created_before: str = "",
        stop_state: str = "",
        max_scan: int = 0,
        page_token: str = "",
        cwd: str = "",
    ) -> AsyncGenerator[SessionPage, None]:
        """Pages of sessions, newest first, one ListSessions call per page, until the last page.
        Filters as in reader.proto (``stop_state``: ``unknown``, ``stopped``, ``replayable``,
        ``not_replayable`` or a stop kind). Raises InvalidArgumentError for a bad filter or token."""
        while True:
            request = reader_pb2.ListSessionsRequest(
                page_size=page_size,
                page_token=page_token,
                tenant=tenant,
                agent_name=agent_name,
                parent_session_id=parent_session_id,
                created_after=created_after,
                created_before=created_before,
                stop_state=stop_state,
                max_scan=max_scan,
                cwd=cwd,
            )
            page = SessionPage.from_proto(await self.call(self.reader_stub.ListSessions, request))
            yield page
            if not page.next_page_token:
                return
            page_token = page.next_page_token

    async def search(
        self,
        query: str,
        *,
        cwd: str = "",
        branch: str = "",
        agent_name: str = "",
        since: str = "",
        tenant: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> AsyncGenerator[SearchPage, None]:
        """Pages of the sessions holding the words of ``query`` (literal text: SearchSessions in
        reader.proto), best first, one SearchSessions call per page, until the last page.
        ``cwd``: that folder or below; ``since``: RFC 3339, changed at or after. Raises
        InvalidArgumentError for a query without a word or a bad filter, UnavailableError when
        the reader keeps no content index."""
        while True:
            request = reader_pb2.SearchSessionsRequest(
                query=query,
                tenant=tenant,
                cwd=cwd,
                branch=branch,
                agent_name=agent_name,
                since=since,
                page_size=page_size,
                page_token=page_token,
            )
            page = SearchPage.from_proto(await self.call(self.reader_stub.SearchSessions, request))
            yield page
            if not page.next_page_token:
                return
            page_token = page.next_page_token

    async def find_children(
        self, parent_session_id: str, delegation_id: str | None = None
    ) -> list[Delegation]:
        """The child sessions of ``parent_session_id`` (oldest first), only those started by
        ``delegation_id`` (a tool call id) when given. Raises NotFoundError, InvalidArgumentError."""
        request = reader_pb2.FindDelegationsRequest(
            parent_session_id=parent_session_id, delegation_id=delegation_id or ""
        )
        response = await self.call(self.reader_stub.FindDelegations, request)
        return [Delegation.from_proto(link) for link in response.delegations]

    async def find_parent(self, child_session_id: str) -> Delegation:
        """The delegation that started ``child_session_id``: its ``parent_session_id`` and
        ``delegation_id`` (both empty for a session without coordinates: never a root by
        default). Raises NotFoundError, InvalidArgumentError."""
        request = reader_pb2.FindDelegationsRequest(child_session_id=child_session_id)
        response = await self.call(self.reader_stub.FindDelegations, request)
        (link,) = response.delegations
        return Delegation.from_proto(link)

    # -- memory ------------------------------------------------------------------------

    async def memories(
        self,
        *,
        scope: Scope | None = None,
        query: str = "",
        limit: int = 0,
        as_of: str = "",
        include_superseded: bool = False,
        kinds: Sequence[ArtifactKind | str] = (),
        artifact_ids: Sequence[str] = (),
        tenant: str = "",
    ) -> Memories:
        """The caller's memory artifacts (reader.proto GetMemories, docs/memory.md §6): those of
        ``scope`` (None: every scope), newest first, each a :class:`shared.memory.MemoryView`
        with its provenance, age (seconds, from ``as_of`` or now) and staleness marks.
        ``query``: words the text must all hold; ``limit``: 1..1000 (0: 20); ``as_of`` (RFC
        3339): the store as it stood then; superseded artifacts with ``include_superseded``
        (naming what superseded them and the evidence); ``kinds``: ``memory`` (the default)
        and/or ``rollout_summary``; ``artifact_ids``: only these. The tenant is the token's
        (``tenant`` only without authentication; empty: ``default``). Pass the result to
        :func:`rollout_client.memories.render_memory_block` for a new session's prompt.
        Raises InvalidArgumentError (a limit, as_of or kind), PermissionDeniedError (another
        tenant), UnavailableError."""
        if not -(2**31) <= limit < 2**31:  # past the field's int32: the reader could not be asked
            raise InvalidArgumentError(
                f"limit: must be 0..{MAX_MEMORIES_LIMIT} (0: 20), not {limit}",
                code=grpc.StatusCode.INVALID_ARGUMENT,
            )
        request = reader_pb2.GetMemoriesRequest(
            tenant=tenant,
            query=query,
            limit=limit,
            as_of=as_of,
            include_superseded=include_superseded,
            kinds=[str(kind) for kind in kinds],
            artifact_ids=list(artifact_ids),
        )
        if scope is not None:
            request.scope.CopyFrom(scope_to_proto(scope))
        return Memories.from_proto(await self.call(self.reader_stub.GetMemories, request))

    async def resolve_provenance(self, artifact_id: str, *, tenant: str = "") -> ResolvedProvenance:
        """The exact messages artifact ``artifact_id`` cites, as its source sessions hold them now
        (reader.proto ResolveProvenance): each with its session, seq, stamped kind, payload and
        stored line, and ``problems``, the reasons a source no longer verifies (empty when all
        do). Raises NotFoundError (no such artifact in the caller's tenant, or a source session
        deleted since), InvalidArgumentError (an empty id), PermissionDeniedError, UnavailableError."""
        reply = await self.call(
            self.reader_stub.ResolveProvenance,
            reader_pb2.ResolveProvenanceRequest(artifact_id=artifact_id, tenant=tenant),
        )
        return resolved_from_proto(reply)

    async def forget_memories(
        self, *, session_id: str | None = None, scope_key: str | None = None, tenant: str = "", by: str = ""
    ) -> list[str]:
        """Forget the caller's memory artifacts citing ``session_id``, or those of the scope
        ``scope_key`` (writer.proto ForgetMemories, docs/memory.md §7): removed from the
        artifact store, and a record kept of what went (ids, who asked, when; no text). Returns
        the ids removed (sorted; forgetting again removes nothing more). ``by`` is recorded
        without authentication (with it, the token). Raises InvalidArgumentError (neither or
        both given, a malformed id or key), PermissionDeniedError (another tenant),
        UnavailableError."""
        if (session_id is None) == (scope_key is None):
            raise ValueError("forget_memories takes session_id or scope_key, not both and not neither")
        request = writer_pb2.ForgetMemoriesRequest(tenant=tenant, by=by)
        if session_id is not None:
            request.session_id = session_id
        else:
            request.scope_key = scope_key or ""
        reply = await self.call(self.writer_stub.ForgetMemories, request)
        return list(reply.artifact_ids)
