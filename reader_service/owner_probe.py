"""What a reader of a cluster answers for a session whose file it does not see (docs/cluster.md §5).

On a shared volume a new session file may stay out of another host's view of its folder for tens
of seconds (an NFS client caches directory listings and lookups that missed), while the writer
that made it has already acknowledged records of it. So a reader given the cluster's writers
(``serve-reader --writers HOST:PORT[,...]``) does not answer NOT_FOUND from its own miss alone:
it asks the owner of the session's shard whether the session exists, on the caller's behalf (its
bearer token passed on, so the owner's tenancy check answers a session of another tenant as
unknown, exactly as this reader would). The question is an Append of one event record with
``expected_next_seq`` 0, which no session has (seq 0 is its session_meta): the owner writes
nothing and answers FAILED_PRECONDITION for a session it holds (a seq mismatch, or a stopped
session; also DATA_LOSS or ABORTED: :data:`HOLDS`), NOT_FOUND for one it does not (docs/spec.md §2.10: refusals a peer keeps causing
are paced).

* the owner holds it: :class:`~shared.errors.SessionNotVisibleError` (UNAVAILABLE,
  ``SESSION_NOT_VISIBLE``): retry, the file shows once this host's view catches up;
* the owner does not: the reader's NOT_FOUND stands;
* no owner could be asked (none answered within :data:`ASK_BOUND_S`, or each refused the
  question: UNAUTHENTICATED, ...): ``SessionNotVisibleError`` with ``OWNER_UNREACHED``, since
  NOT_FOUND would be a guess.

The owners come from GetShardMap, asked of every writer given at once (the first map answered
wins) when a shard's owner is not known, and from the NOT_OWNER a former owner answers (the
owner it names is asked next, at most :data:`MAX_HOPS` times). Per shard, the larger epoch wins.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import grpc
import grpc.aio

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from serving.tenancy import current_caller
from shared.errors import SessionNotVisibleError
from shared.reasons import NOT_OWNER, OWNER_ADDRESS, OWNER_EPOCH, error_info_metadata, status_of_trailer
from shared.shards import HASH_NAME

#: Seconds one question (GetShardMap or the probe) may take before its writer is passed over.
ASK_BOUND_S = 2.0
#: Owners one question follows through NOT_OWNER answers before it gives up (OWNER_UNREACHED).
MAX_HOPS = 3
#: Answers to the probe from a writer that holds the session: a seq mismatch or a stopped session
#: (FAILED_PRECONDITION), a damaged file (DATA_LOSS), a Stop or Resume in progress (ABORTED).
HOLDS = frozenset({grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.DATA_LOSS, grpc.StatusCode.ABORTED})
#: The record of the probe (never written: the expected next seq 0 fails first).
PROBE = writer_pb2.AppendRecord(event=records_pb2.Event(kind="reader.visibility_probe"))

#: The writer stub of a channel (the generated class, untyped).
_writer_stub: Callable[[grpc.aio.Channel], writer_pb2_grpc.RolloutWriterStub] = (
    writer_pb2_grpc.RolloutWriterStub
)


class OwnerProbe:
    """Asks the owner of a session's shard whether it holds the session (module docstring).

    ``writers``: ``host:port`` of the cluster's writers (any of them; the owners are learnt from
    their shard maps); ``shard_count``: the data root's; ``credentials``: channel credentials for
    TLS writers (None: plaintext). Used on one event loop (the reader's server)."""

    def __init__(
        self,
        writers: Sequence[str],
        shard_count: int,
        credentials: grpc.ChannelCredentials | None = None,
        ask_bound_s: float = ASK_BOUND_S,
    ) -> None:
        if not writers:
            raise ValueError("an owner probe needs at least one writer address")
        self.writers = tuple(writers)
        self.shard_count = shard_count
        self.ask_bound_s = ask_bound_s
        self._credentials = credentials
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, writer_pb2_grpc.RolloutWriterStub] = {}
        #: Per shard, the owner's (address, epoch) as last learnt.
        self.owners: dict[int, tuple[str, int]] = {}
        #: Questions asked, by outcome: "held", "unknown", "unreached".
        self.outcomes: dict[str, int] = {"held": 0, "unknown": 0, "unreached": 0}

    def _stub(self, address: str) -> writer_pb2_grpc.RolloutWriterStub:
        stub = self._stubs.get(address)
        if stub is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(address)
            else:
                channel = grpc.aio.secure_channel(address, self._credentials)
            self._channels[address] = channel
            stub = self._stubs[address] = _writer_stub(channel)
        return stub

    async def close(self) -> None:
        """Close every channel opened."""
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            await channel.close()

    def learn(self, shard: int, address: str, epoch: int) -> None:
        """Take (address, epoch) as ``shard``'s owner unless one of a larger epoch is known."""
        known = self.owners.get(shard)
        if address and (known is None or known[1] <= epoch):
            self.owners[shard] = (address, epoch)

    async def holder(self, session_id: str, shard: int) -> str | None:
        """The ``host:port`` of the owner of ``shard`` (the session's) when it holds ``session_id``
        for the current caller (serving.tenancy); None when it does not. Raises
        SessionNotVisibleError (``confirmed`` False: OWNER_UNREACHED) when no owner could be asked.
        The one question every RPC of the reader asks about a session it does not see."""
        if shard not in self.owners:
            await self._ask_maps()
        metadata = self._forwarded()
        owner = self.owners.get(shard, ("", 0))[0]
        candidates = list(dict.fromkeys([owner, *self.writers] if owner else self.writers))
        tried: list[str] = []
        while candidates and len(tried) < MAX_HOPS + len(self.writers):
            address = candidates.pop(0)
            tried.append(address)
            answer = await self._probe(address, session_id, metadata)
            if answer in HOLDS:
                self.outcomes["held"] += 1
                return address
            if answer is grpc.StatusCode.NOT_FOUND:
                self.outcomes["unknown"] += 1
                return None
            if isinstance(answer, dict):  # NOT_OWNER: the owner it names is asked next
                named = answer.get(OWNER_ADDRESS, "")
                with contextlib.suppress(ValueError):
                    self.learn(shard, named, int(answer.get(OWNER_EPOCH, "")))
                if named and named not in tried:
                    candidates = [named, *(c for c in candidates if c != named)]
        self.outcomes["unreached"] += 1
        raise SessionNotVisibleError(
            f"session {session_id} is not visible on this reader's host, and no writer of the cluster"
            f" answered whether it exists (asked: {', '.join(tried) or 'none'}); retry",
            shard=shard,
            owner=tried[-1] if tried else "",
            confirmed=False,
        )

    async def check_missing(self, session_id: str, shard: int) -> None:
        """Return when the owner of ``shard`` (the session's) does not hold ``session_id`` either,
        for the current caller (serving.tenancy): the reader's NOT_FOUND stands. Raises
        SessionNotVisibleError when it holds it (``confirmed``) or no owner could be asked."""
        address = await self.holder(session_id, shard)
        if address is not None:
            raise SessionNotVisibleError(
                f"session {session_id} is not visible on this reader's host yet, but the owner of"
                f" its shard ({address}) holds it: a new file can take a while to show on another"
                " host of a shared volume; retry",
                shard=shard,
                owner=address,
                confirmed=True,
            )

    def _forwarded(self) -> list[tuple[str, str]]:
        """The caller's bearer token as call metadata (none without one)."""
        bearer = current_caller().bearer
        return [("authorization", f"Bearer {bearer}")] if bearer else []

    async def _probe(
        self, address: str, session_id: str, metadata: list[tuple[str, str]]
    ) -> grpc.StatusCode | dict[str, str] | None:
        """The probe's status code at ``address`` (NOT_OWNER: its metadata; None: no answer in
        time, or no connection)."""
        request = writer_pb2.AppendRequest(session_id=session_id, records=[PROBE], expected_next_seq=0)
        try:
            async with asyncio.timeout(self.ask_bound_s):
                await self._stub(address).Append(request, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                return error_info_metadata(status_of_trailer(exc.trailing_metadata()), NOT_OWNER)
            return exc.code()
        except TimeoutError:
            return None
        return None  # an Append accepted at seq 0 is no answer any writer gives

    async def _ask_maps(self) -> None:
        """Ask every writer given for its shard map at once; take the first map answered."""
        asks = [asyncio.create_task(self._shard_map(address)) for address in self.writers]
        try:
            for ask in asyncio.as_completed(asks):
                response = await ask
                if response is not None:
                    for owner in response.owners:
                        self.learn(owner.shard, owner.address, owner.epoch)
                    return
        finally:
            for ask in asks:
                ask.cancel()
            await asyncio.gather(*asks, return_exceptions=True)

    async def _shard_map(self, address: str) -> writer_pb2.GetShardMapResponse | None:
        """The writer's map, if it answers one of this cluster's shape within the bound."""
        try:
            async with asyncio.timeout(self.ask_bound_s):
                response: writer_pb2.GetShardMapResponse = await self._stub(address).GetShardMap(
                    writer_pb2.GetShardMapRequest()
                )
        except (grpc.aio.AioRpcError, TimeoutError):
            return None
        if response.hash != HASH_NAME or response.shard_count != self.shard_count:
            return None
        return response
