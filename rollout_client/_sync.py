"""The blocking client: :class:`RolloutClient` and :class:`Session`, the same calls as
:class:`rollout_client.AsyncRolloutClient` without ``await``.

A RolloutClient runs the asyncio implementation on an event loop of its own (one
daemon thread per client). Each call is handed to that loop in a copy of the
caller's context, so ``rollout_client.delegation(...)`` blocks work in blocking code
as they do in asyncio code. A RolloutClient may be shared by many threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncGenerator, Coroutine, Generator, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from rollout_client._aio import AsyncRolloutClient
from rollout_client._appends import RetryPolicy
from rollout_client._connections import ChannelOpener
from rollout_client._errors import ClientClosedError
from rollout_client._records import Record
from rollout_client._results import (
    AppendResult,
    Delegation,
    DeleteResult,
    ForkOrigin,
    Memories,
    PendingRound,
    RecentMessages,
    Replay,
    ReplaySummary,
    ResumeResult,
    RoundRecords,
    SearchPage,
    SessionPage,
    StopFacts,
    StopResult,
    VerifyReport,
    WatchedRecord,
)
from rollout_client._session import AsyncReplayStream, AsyncSession
from shared.memory import ArtifactKind, ResolvedProvenance, Scope
from shared.rounds import Round

T = TypeVar("T")


async def _next(items: AsyncGenerator[T, None]) -> T:
    return await anext(items)


async def _end_open_streams(loop: asyncio.AbstractEventLoop) -> None:
    """End the loop's other tasks (calls in flight from other threads, gRPC's own), then close
    its open async generators (streams held by unfinished iterators), so that stopping the
    loop leaves nothing pending; tasks first, as a generator being iterated cannot be closed."""
    others = [task for task in asyncio.all_tasks(loop) if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    await loop.shutdown_asyncgens()


#: How often a blocking call checks that the client's loop still runs (seconds).
_CLOSED_POLL_S = 0.5


class _EventLoopThread:
    """An event loop running in a daemon thread; :meth:`run` blocks the caller until done."""

    def __init__(self) -> None:
        self.closing = False  # set once by RolloutClient.close, before the loop stops
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rollout-client", daemon=True)
        self.thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coroutine`` on the loop in a copy of the caller's context (the loop's
        ``call_soon_threadsafe`` copies the calling thread's context for the new task)."""
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise RuntimeError("a blocking RolloutClient call cannot run on the client's own event loop")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for it; ClientClosedError when the client is
        closed first (the loop stopped, or the call was cancelled by :meth:`RolloutClient.close`)."""
        if self.closing:
            coroutine.close()
            raise ClientClosedError("the client is closed")
        future = self.submit(coroutine)
        try:
            while True:
                try:
                    return future.result(timeout=_CLOSED_POLL_S)
                except concurrent.futures.TimeoutError:
                    if not self.thread.is_alive():  # stopped before it ran the call
                        raise ClientClosedError("the client was closed before this call completed") from None
                except concurrent.futures.CancelledError:
                    if self.closing:
                        raise ClientClosedError("the client was closed before this call completed") from None
                    raise
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class RolloutClient:
    """A blocking client of a writer (or the writers of a cluster) and a reader; see :class:`AsyncRolloutClient` for the
    arguments, the errors and the meaning of each call (``channels`` is called on the client's
    own event loop). Use as a context manager or call :meth:`close`."""

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
        self.core = AsyncRolloutClient(
            writer, reader, token=token, tls_ca=tls_ca, retry=retry, channels=channels
        )
        self._loop = _EventLoopThread()
        self._close_lock = threading.Lock()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of :attr:`core` on the client's loop and wait for its result."""
        return self._loop.run(coroutine)

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start a coroutine of :attr:`core` on the client's loop; await it from another event
        loop with ``asyncio.wrap_future`` (what keeps that loop free while the call runs)."""
        return self._loop.submit(coroutine)

    def close(self) -> None:
        """End every stream still open (a generator kept past the ``with`` block, say), close the
        channels and stop the client's thread. Safe to call twice and from several threads; a
        call other threads have in flight raises ClientClosedError there."""
        with self._close_lock:
            if self._loop.closing:
                return
            self._loop.closing = True
        loop = self._loop
        asyncio.run_coroutine_threadsafe(_end_open_streams(loop.loop), loop.loop).result()
        asyncio.run_coroutine_threadsafe(self.core.close(), loop.loop).result()
        loop.stop()

    def iterate(self, items: AsyncGenerator[T, None]) -> Generator[T, None, None]:
        """The items of one of :attr:`core`'s async generators, each fetched on the client's loop;
        leaving the loop closes the generator (nothing to do once the client is closed:
        :meth:`close` ended it)."""
        try:
            while True:
                try:
                    yield self.run(_next(items))
                except StopAsyncIteration:
                    return
        finally:
            if not self._loop.closing:
                self.run(items.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def create_session(
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
    ) -> Session:
        """See :meth:`AsyncRolloutClient.create_session` (delegation taken from the caller's context)."""
        core = self.run(
            self.core.create_session(
                agent_name,
                root=root,
                tenant=tenant,
                model=model,
                cwd=cwd,
                originator=originator,
                client_version=client_version,
                session_id=session_id,
                session_key=session_key,
            )
        )
        return Session(self, core)

    def resolve_session(self, session_key: str, *, tenant: str = "") -> tuple[str, bool]:
        """See :meth:`AsyncRolloutClient.resolve_session`."""
        return self.run(self.core.resolve_session(session_key, tenant=tenant))

    def pending_rounds(
        self, *, tenant: str = "", since: str = "", limit: int = 0, idle_seconds: int = 0
    ) -> list[PendingRound]:
        """See :meth:`AsyncRolloutClient.pending_rounds`."""
        return self.run(
            self.core.pending_rounds(tenant=tenant, since=since, limit=limit, idle_seconds=idle_seconds)
        )

    def round(self, round_id: str, *, session_id: str = "") -> RoundRecords:
        """See :meth:`AsyncRolloutClient.round`."""
        return self.run(self.core.round(round_id, session_id=session_id))

    def session(self, session_id: str) -> Session:
        """The existing session ``session_id`` (no call is made)."""
        return Session(self, self.core.session(session_id))

    def delete_session(self, session_id: str) -> DeleteResult:
        """See :meth:`AsyncRolloutClient.delete_session`."""
        return self.run(self.core.delete_session(session_id))

    def list_sessions(
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
    ) -> Generator[SessionPage, None, None]:
        """See :meth:`AsyncRolloutClient.list_sessions`: pages, one call each, fetched as iterated."""
        pages = self.core.list_sessions(
            page_size=page_size,
            tenant=tenant,
            agent_name=agent_name,
            parent_session_id=parent_session_id,
            created_after=created_after,
            created_before=created_before,
            stop_state=stop_state,
            max_scan=max_scan,
            page_token=page_token,
            cwd=cwd,
        )
        yield from self.iterate(pages)

    def search(
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
    ) -> Generator[SearchPage, None, None]:
        """See :meth:`AsyncRolloutClient.search`: pages, one call each, fetched as iterated."""
        pages = self.core.search(
            query,
            cwd=cwd,
            branch=branch,
            agent_name=agent_name,
            since=since,
            tenant=tenant,
            page_size=page_size,
            page_token=page_token,
        )
        yield from self.iterate(pages)

    def find_children(self, parent_session_id: str, delegation_id: str | None = None) -> list[Delegation]:
        """See :meth:`AsyncRolloutClient.find_children`."""
        return self.run(self.core.find_children(parent_session_id, delegation_id))

    def find_parent(self, child_session_id: str) -> Delegation:
        """See :meth:`AsyncRolloutClient.find_parent`."""
        return self.run(self.core.find_parent(child_session_id))

    def memories(
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
        """See :meth:`AsyncRolloutClient.memories`."""
        return self.run(
            self.core.memories(
                scope=scope,
                query=query,
                limit=limit,
                as_of=as_of,
                include_superseded=include_superseded,
                kinds=kinds,
                artifact_ids=artifact_ids,
                tenant=tenant,
            )
        )

    def resolve_provenance(self, artifact_id: str, *, tenant: str = "") -> ResolvedProvenance:
        """See :meth:`AsyncRolloutClient.resolve_provenance`."""
        return self.run(self.core.resolve_provenance(artifact_id, tenant=tenant))

    def forget_memories(
        self, *, session_id: str | None = None, scope_key: str | None = None, tenant: str = "", by: str = ""
    ) -> list[str]:
        """See :meth:`AsyncRolloutClient.forget_memories`."""
        return self.run(
            self.core.forget_memories(session_id=session_id, scope_key=scope_key, tenant=tenant, by=by)
        )


class ReplayStream:
    """``for message in session.stream_replay():`` message dicts in order (fetched a ~1 MiB
    chunk at a time); :attr:`summary` is set once the last chunk has arrived."""

    def __init__(self, client: RolloutClient, stream: AsyncReplayStream) -> None:
        self._client = client
        self._stream = stream

    @property
    def summary(self) -> ReplaySummary | None:
        return self._stream.summary

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for chunk in self._client.iterate(self._stream.chunks()):
            yield from chunk


class Session:
    """One session of the ledger (blocking); see :class:`AsyncSession` for each call."""

    def __init__(self, client: RolloutClient, core: AsyncSession) -> None:
        self.client = client
        self.core = core

    def __repr__(self) -> str:
        return f"<Session {self.id}>"

    @property
    def id(self) -> str:
        return self.core.id

    @property
    def next_seq(self) -> int | None:
        return self.core.next_seq

    @property
    def forked_from(self) -> ForkOrigin | None:
        """See :attr:`AsyncSession.forked_from` (set on a session :meth:`fork` returned)."""
        return self.core.forked_from

    def append(self, *records: Record, expected_next_seq: int | None = None) -> AppendResult:
        """See :meth:`AsyncSession.append` (exactly once)."""
        return self.client.run(self.core.append(*records, expected_next_seq=expected_next_seq))

    def recent_messages(self, limit: int = 0, *, canonical: bool = False) -> RecentMessages:
        """See :meth:`AsyncSession.recent_messages`."""
        return self.client.run(self.core.recent_messages(limit, canonical=canonical))

    def replay(self, token_budget: int | None = None, max_messages: int | None = None) -> Replay:
        """See :meth:`AsyncSession.replay`."""
        return self.client.run(self.core.replay(token_budget, max_messages))

    def stream_replay(self, token_budget: int | None = None) -> ReplayStream:
        """See :meth:`AsyncSession.stream_replay`."""
        return ReplayStream(self.client, self.core.stream_replay(token_budget))

    def stop(self, kind: str, reason: str = "", *, error: dict[str, str] | None = None) -> StopResult:
        """See :meth:`AsyncSession.stop`."""
        return self.client.run(self.core.stop(kind, reason, error=error))

    def resume(self, force: bool = False) -> ResumeResult:
        """See :meth:`AsyncSession.resume`."""
        return self.client.run(self.core.resume(force))

    def fork(
        self, *, at_seq: int | None = None, before_user_message: int | None = None, session_key: str = ""
    ) -> Session:
        """See :meth:`AsyncSession.fork`."""
        return Session(
            self.client,
            self.client.run(
                self.core.fork(
                    at_seq=at_seq, before_user_message=before_user_message, session_key=session_key
                )
            ),
        )

    def stop_facts(self) -> StopFacts:
        """See :meth:`AsyncSession.stop_facts`."""
        return self.client.run(self.core.stop_facts())

    def rounds(self) -> list[Round]:
        """See :meth:`AsyncSession.rounds`."""
        return self.client.run(self.core.rounds())

    def verify(self) -> VerifyReport:
        """See :meth:`AsyncSession.verify`."""
        return self.client.run(self.core.verify())

    def watch(self, from_seq: int = 0) -> Generator[WatchedRecord, None, None]:
        """See :meth:`AsyncSession.watch`: ``for record in session.watch():`` blocks between
        records; leaving the loop (or closing the iterator) cancels the stream."""
        for batch in self.client.iterate(self.core.watch_batches(from_seq)):
            yield from batch
