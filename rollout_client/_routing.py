"""Which writer a session's calls go to: the shard map, cached, and NOT_OWNER redirects
(docs/cluster.md §4).

A cluster's writers each own some shards; a session belongs to the shard
:func:`shared.shards.shard_of` names (the one function computing it: the client never hashes
an id itself). The client keeps, per shard, the owner's address and epoch it last learnt:

* from **GetShardMap** (writer.proto), asked of every writer known at once, the first map
  answered taken (a dead or paused writer costs nothing while another answers): at the first
  call when several writer addresses were given, and again after a NOT_OWNER that named no
  owner it did not know; a client given one address asks only after its first NOT_OWNER (until
  then every call goes to that writer, as with one writer). Calls that find an ask under way
  wait for it within their own deadlines;
* from **NOT_OWNER** itself (UNAVAILABLE, ErrorInfo metadata ``owner_address`` and
  ``owner_epoch``): the call is sent again at once to the owner named, within its deadline;
* once a map is known, a call that cannot connect to its shard's owner (nothing sent: the
  owner may be dead until its lease expires and another writer takes the shard) asks for the
  map again and backs off, within its deadline, instead of waiting for that writer alone.

Per shard, the entry of the larger epoch wins (a later ownership of a shard has a larger
epoch), so a writer whose map lags behind cannot send the client back to a former owner. A
session whose shard has no known owner goes to the first writer given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from rollout.v1 import writer_pb2, writer_pb2_grpc
from rollout_client._connections import ServiceConnection
from rollout_client._errors import ClientClosedError, RolloutError, UnavailableError
from rollout_client._loops import PerLoop
from shared.reasons import NOT_OWNER, OWNER_ADDRESS, OWNER_EPOCH
from shared.shards import HASH_NAME, shard_of

WriterConnection = ServiceConnection[writer_pb2_grpc.RolloutWriterStub]


def not_owner_info(error: RolloutError) -> dict[str, str] | None:
    """The metadata of ``error``'s ErrorInfo NOT_OWNER (shard, epoch, owner_address, owner_epoch),
    or None when it is no NOT_OWNER."""
    for info in error.error_info:
        if info.reason == NOT_OWNER:
            return info.metadata
    return None


def nothing_done(error: RolloutError) -> bool:
    """Whether ``error`` is a NOT_OWNER from a writer that never owned the shard (metadata ``epoch``
    empty): it refused the call before doing anything, so a call that is not retried otherwise
    (Fork) may be sent to the owner."""
    info = not_owner_info(error)
    return info is not None and not info.get("epoch")


class WriterRouting:
    """The writers of one client (``addresses``, the first the default), a connection to each writer
    it has reached (made by ``connect(address)``), and the shard map it has learnt."""

    def __init__(self, addresses: Sequence[str], connect: Callable[[str], WriterConnection]) -> None:
        if not addresses:
            raise ValueError("a client needs at least one writer address")
        self.addresses = tuple(addresses)
        self._connect = connect
        self._connections: dict[str, WriterConnection] = {}
        #: The default writer: the first address given.
        self.default = self.connection(self.addresses[0])
        #: The cluster's shard count (0 until a map was received).
        self.shard_count = 0
        #: Per shard, the owner's (address, epoch) as last learnt.
        self.owners: dict[int, tuple[str, int]] = {}
        #: NOT_OWNER answers received (each followed to the owner it named, or the map refreshed).
        self.redirects = 0
        self._map_wanted = len(self.addresses) > 1
        #: Per event loop, the GetShardMap ask under way (a list of at most one task).
        self._asking: PerLoop[list[asyncio.Task[bool]]] = PerLoop(list)
        #: GetShardMap asks under way, on every loop.
        self._asks = 0

    def connection(self, address: str) -> WriterConnection:
        """The connection to the writer at ``address`` (made on first use)."""
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = self._connect(address)
        return connection

    def connections(self) -> list[WriterConnection]:
        """Every writer connection made so far."""
        return list(self._connections.values())

    def shard(self, session_id: str) -> int | None:
        """The shard of ``session_id`` (:func:`shared.shards.shard_of`), None while no map is known,
        for no id (the writer picks one) or for an id that is no ASCII text (the writer refuses it)."""
        if not self.shard_count or not session_id or not session_id.isascii():
            return None
        return shard_of(session_id, self.shard_count)

    async def route(self, session_id: str, deadline: float) -> WriterConnection:
        """The connection to the owner of ``session_id``'s shard as known now (the default writer
        when unknown), after the map when it is wanted or being asked for (:meth:`refresh`, within
        ``deadline`` seconds)."""
        await self.refresh(deadline)
        shard = self.shard(session_id)
        owner = self.owners.get(shard) if shard is not None else None
        return self.connection(owner[0]) if owner is not None else self.default

    def learn(self, shard: int, address: str, epoch: int) -> bool:
        """Take (address, epoch) as ``shard``'s owner unless an entry of a larger epoch is known;
        returns whether the owner's address changed."""
        known = self.owners.get(shard)
        if known is not None and known[1] > epoch:
            return False
        self.owners[shard] = (address, epoch)
        return known is None or known[0] != address

    def take_map(self, response: writer_pb2.GetShardMapResponse) -> None:
        """Merge a GetShardMap answer (per shard, the larger epoch wins). A map of another hash, or
        of another shard count than one known, is ignored (the client cannot route by it)."""
        if response.hash != HASH_NAME or not response.shard_count:
            return
        if self.shard_count and response.shard_count != self.shard_count:
            return
        self.shard_count = response.shard_count
        for owner in response.owners:
            if owner.address and owner.shard < self.shard_count:
                self.learn(owner.shard, owner.address, owner.epoch)

    async def refresh(self, deadline: float) -> None:
        """Wait at most ``deadline`` seconds for the shard map when it is wanted or being asked for.
        One ask per event loop is in flight at a time (:meth:`_ask_map`); a call that finds one
        under way waits for it within its own deadline, then goes on with the map as known (an ask
        that outlives a caller is not cancelled: others may be waiting for it)."""
        if not self._map_wanted and not self._asks:
            return  # the common case: nothing asked, nothing to ask
        asking = self._asking.get()
        if not asking or asking[0].done():
            if not self._map_wanted:
                return
            self._map_wanted = False
            bound = min(max(deadline, 0.01), MAP_ASK_S)
            self._asks += 1
            task = asyncio.get_running_loop().create_task(self._ask_map(bound))
            task.add_done_callback(self._ask_ended)
            asking[:] = [task]
        try:
            async with asyncio.timeout(max(deadline, 0.0)):
                await asyncio.shield(asking[0])
        except TimeoutError:
            return

    async def _ask_map(self, bound: float) -> bool:
        """Ask GetShardMap of the writers known (owners, then the addresses given) all at once,
        each within ``bound`` seconds, and take the first map answered; the other asks are then
        cancelled, so a dead or paused writer costs nothing while another answers. A writer that
        does not serve GetShardMap (an older writer) counts as answering with no map. Returns
        whether a writer answered."""
        candidates = dict.fromkeys([address for address, _ in self.owners.values()] + list(self.addresses))
        asks = {asyncio.create_task(self._ask_one(address, bound)): address for address in candidates}
        answered = False
        try:
            pending = set(asks)
            while pending and not answered:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for ask in done:
                    response = ask.result()
                    if response is None:
                        continue
                    answered = True
                    self.connection(asks[ask]).answered = True
                    if isinstance(response, writer_pb2.GetShardMapResponse):
                        self.take_map(response)
                        break
        finally:
            for ask in asks:
                ask.cancel()
            await asyncio.wait(asks)
        return answered

    def _ask_ended(self, task: asyncio.Task[bool]) -> None:
        """An ask of the map ended: when no writer answered it (or it was cancelled, even before it
        began, or failed), the map is wanted again at the next call."""
        self._asks -= 1
        if task.cancelled() or task.exception() is not None or not task.result():
            self._map_wanted = True

    async def _ask_one(self, address: str, bound: float) -> writer_pb2.GetShardMapResponse | bool | None:
        """The map the writer at ``address`` answers within ``bound`` seconds; True when it does not
        serve GetShardMap; None when it did not answer (unreachable, failed or too slow)."""
        try:
            async with asyncio.timeout(bound):
                response: writer_pb2.GetShardMapResponse = await self.connection(address).stub.GetShardMap(
                    writer_pb2.GetShardMapRequest()
                )
                return response
        except grpc.aio.AioRpcError as exc:
            return True if exc.code() is grpc.StatusCode.UNIMPLEMENTED else None
        except (TimeoutError, ClientClosedError):
            return None

    def redirect(self, error: RolloutError, tried: WriterConnection) -> WriterConnection | None:
        """Take note of ``error`` from the writer of ``tried``: for a NOT_OWNER, the owner it names
        (and the map is wanted again when it names none, or the shard count is not known yet).
        Returns the writer the call should go to at once: the owner a NOT_OWNER names, unless it
        is ``tried`` or an owner of an older epoch than one known (None: back off, then route again)."""
        info = not_owner_info(error)
        if info is None:
            return None
        self.redirects += 1
        address, epoch = info.get(OWNER_ADDRESS, ""), info.get(OWNER_EPOCH, "")
        try:
            shard, owner_epoch = int(info.get("shard", "")), int(epoch)
        except ValueError:
            self._map_wanted = True
            return None
        if not address:
            self._map_wanted = True
            return None
        self.learn(shard, address, owner_epoch)
        if not self.shard_count:
            self._map_wanted = True  # the owner is known, the shard of other ids is not yet
        if self.owners.get(shard, ("", 0))[0] != address or address == tried.address:
            return None  # an owner older than one known, or the writer that refused: back off
        return self.connection(address)

    def reach_limit(self) -> float | None:
        """Seconds a call waits for its shard owner's connection before asking the map again: None
        (its whole deadline, or at once for a writer that never answered) until a map is known."""
        return OWNER_RECHECK_S if self.shard_count else None

    def owner_unreached(self, error: UnavailableError | ClientClosedError) -> bool:
        """Take note that a call could not reach the writer it was routed to (nothing was sent);
        True when it should back off and be routed again: a map is known (a cluster, where
        another writer takes a dead owner's shards once its lease expires), so the map is
        wanted again. False for a client of one writer, or a closed client: the error stands."""
        if not self.shard_count or isinstance(error, ClientClosedError):
            return False
        self._map_wanted = True
        return True

    def call(self, session_id: str) -> CallRoute:
        """The way of one call about ``session_id`` (``""``: a new session whose id the writer derives)."""
        return CallRoute(self, session_id)

    def __repr__(self) -> str:
        known: Any = len(self.owners)
        return f"<WriterRouting {','.join(self.addresses)}: {known} of {self.shard_count} shards known>"


#: Seconds one ask of GetShardMap (an answer from memory) may take before the writer is passed
#: over: all writers known are asked at once and the first map wins, so this bounds the wait only
#: when none answers (a dead or paused writer among them costs nothing while another answers).
MAP_ASK_S = 2.0

#: Seconds a call of a cluster's client waits for a connection to its shard's owner before it asks
#: the map again (the owner may be dead, its shards taken by another writer).
OWNER_RECHECK_S = 0.5

#: NOT_OWNER answers one call follows at once; after them it backs off between attempts (two
#: writers that each name the other, which a consistent ownership never does, cannot spin).
MAX_IMMEDIATE_REDIRECTS = 8


class CallRoute:
    """One call's way to its session's owner: the writer its next attempt goes to, and the
    redirects it followed at once (at most :data:`MAX_IMMEDIATE_REDIRECTS`)."""

    def __init__(self, routing: WriterRouting, session_id: str) -> None:
        self.routing = routing
        self.session_id = session_id
        self.followed = 0
        self._next: WriterConnection | None = None

    async def connection(self, deadline: float) -> WriterConnection:
        """The writer of the next attempt: the owner a redirect named, else the routing's choice."""
        target, self._next = self._next, None
        return target or await self.routing.route(self.session_id, deadline)

    def redirected(self, error: RolloutError, tried: WriterConnection, remaining: float) -> bool:
        """Take note of ``error`` (:meth:`WriterRouting.redirect`); True when the next attempt goes at
        once to the owner it names (time is left and the call has not followed too many)."""
        target = self.routing.redirect(error, tried)
        if target is None or remaining <= 0 or self.followed >= MAX_IMMEDIATE_REDIRECTS:
            return False
        self.followed += 1
        self._next = target
        return True
