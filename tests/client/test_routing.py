"""The client's shard map (rollout_client._routing): the shard rule is shared.shards.shard_of's,
the larger epoch wins per shard, NOT_OWNER names where to go, and ROLLOUT_WRITER may list several
writers (client_settings)."""

from __future__ import annotations

import ast
import asyncio
import uuid
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from rollout.v1 import writer_pb2, writer_pb2_grpc
from rollout_client import _routing, client_settings
from rollout_client._connections import ServiceConnection
from rollout_client._errors import ErrorInfo, UnavailableError
from rollout_client._routing import MAX_IMMEDIATE_REDIRECTS, WriterRouting, nothing_done
from shared.reasons import ERROR_DOMAIN, NOT_OWNER, OWNER_ADDRESS, OWNER_EPOCH
from shared.shards import HASH_NAME, shard_of

CLIENT = Path(__file__).resolve().parents[2] / "rollout_client"


def routing(*addresses: str) -> WriterRouting:
    """A routing over ``addresses`` whose connections are never opened here."""

    def connect(address: str) -> ServiceConnection[writer_pb2_grpc.RolloutWriterStub]:
        def unopened() -> grpc.aio.Channel:
            raise AssertionError("no channel is opened in these tests")

        return ServiceConnection("writer", address, unopened, writer_pb2_grpc.RolloutWriterStub)

    return WriterRouting(addresses, connect)


def shard_map(shards: int, owners: dict[int, tuple[str, int]]) -> writer_pb2.GetShardMapResponse:
    return writer_pb2.GetShardMapResponse(
        shard_count=shards,
        hash=HASH_NAME,
        owners=[writer_pb2.ShardOwner(shard=s, address=a, epoch=e) for s, (a, e) in sorted(owners.items())],
    )


def not_owner(shard: int, address: str, epoch: str, own_epoch: str = "") -> UnavailableError:
    metadata = {"shard": str(shard), "epoch": own_epoch, OWNER_ADDRESS: address, OWNER_EPOCH: epoch}
    return UnavailableError(
        "not ours",
        code=grpc.StatusCode.UNAVAILABLE,
        error_info=(ErrorInfo(NOT_OWNER, ERROR_DOMAIN, metadata),),
    )


def test_the_client_finds_a_session_shard_with_the_shared_rule() -> None:
    """routing.shard is shared.shards.shard_of for every id and shard count tried (none before a map)."""
    routes = routing("a:1")
    assert routes.shard(str(uuid.uuid4())) is None
    for shards in (1, 7, 16, 256, 65536):
        routes.shard_count = shards
        for _ in range(50):
            session_id = str(uuid.uuid4())
            assert routes.shard(session_id) == shard_of(session_id, shards)
    assert routes.shard("") is None  # no id yet: the writer picks one


def test_no_client_module_hashes_a_session_id_itself() -> None:
    """The rule is one function: no module of the SDK imports hashlib or names BLAKE2b."""
    for module in CLIENT.glob("*.py"):
        tree = ast.parse(module.read_text())
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert "hashlib" not in imported, module.name
        assert "blake2b" not in module.read_text(), module.name


def test_per_shard_the_larger_epoch_wins() -> None:
    """A map or a redirect of an older epoch never sends a shard back to a former owner."""
    routes = routing("a:1", "b:2")
    routes.take_map(shard_map(4, {0: ("a:1", 1), 1: ("b:2", 1)}))
    assert routes.redirect(not_owner(0, "b:2", "2"), routes.connection("a:1")) is routes.connection("b:2")
    routes.take_map(shard_map(4, {0: ("a:1", 1), 1: ("b:2", 3)}))  # a writer whose map lags
    assert routes.owners == {0: ("b:2", 2), 1: ("b:2", 3)}
    assert routes.redirect(not_owner(0, "a:1", "1"), routes.connection("b:2")) is None
    assert routes.owners[0] == ("b:2", 2)
    routes.take_map(shard_map(8, {0: ("c:3", 9)}))  # another shard count: not this cluster's map
    routes.take_map(writer_pb2.GetShardMapResponse(shard_count=4, hash="crc32", owners=[]))
    assert (routes.shard_count, routes.owners[0]) == (4, ("b:2", 2))
    assert routes.redirects == 2


def test_a_not_owner_without_an_owner_asks_for_the_map_again() -> None:
    """NOT_OWNER naming no owner: no writer to go to at once; the map is wanted again."""
    routes = routing("a:1")
    assert routes.redirect(not_owner(2, "", ""), routes.default) is None
    assert routes._map_wanted
    assert routes.redirect(UnavailableError("down", code=grpc.StatusCode.UNAVAILABLE), routes.default) is None
    assert routes.redirects == 1


def test_only_a_writer_that_never_owned_the_shard_did_nothing() -> None:
    """NOT_OWNER with this writer's epoch empty: refused before anything (Fork may follow it);
    with an epoch: its ownership ended around a write (only retried calls follow it)."""
    assert nothing_done(not_owner(1, "b:2", "2"))
    assert not nothing_done(not_owner(1, "b:2", "2", own_epoch="1"))
    assert not nothing_done(UnavailableError("down", code=grpc.StatusCode.UNAVAILABLE))


def test_rollout_writer_may_list_several_writers() -> None:
    """ROLLOUT_WRITER (or the argument) is a comma list; blanks are dropped; the first is the default."""
    settings = client_settings(environ={"ROLLOUT_WRITER": " 10.0.0.1:7001, 10.0.0.2:7001,,"})
    assert settings.writers == ("10.0.0.1:7001", "10.0.0.2:7001")
    assert client_settings("h:1", environ={}).writers == ("h:1",)
    assert client_settings(environ={}).writers == ("127.0.0.1:50051",)


def test_a_call_follows_a_bounded_number_of_redirects_at_once() -> None:
    """Two writers naming each other (never so under a consistent ownership): the call follows
    MAX_IMMEDIATE_REDIRECTS of them at once, then backs off; a redirect to the writer that
    refused, or with no time left, is not followed at once."""
    routes = routing("a:1", "b:2")
    way = routes.call(str(uuid.uuid4()))
    a, b = routes.connection("a:1"), routes.connection("b:2")
    assert not way.redirected(not_owner(0, "a:1", "1"), a, 5.0)  # the writer that refused
    assert not way.redirected(not_owner(0, "b:2", "1"), a, 0.0)  # no time left
    hops = [
        way.redirected(not_owner(0, *(("b:2", "1") if i % 2 else ("a:1", "1"))), (a, b)[i % 2 == 0], 5.0)
        for i in range(MAX_IMMEDIATE_REDIRECTS + 2)
    ]
    assert hops == [True] * MAX_IMMEDIATE_REDIRECTS + [False, False]


class MapStub:
    """A writer stub whose GetShardMap answers ``answer``, or never (None: a paused writer, whose
    asks are counted and left waiting until cancelled)."""

    def __init__(self, answer: writer_pb2.GetShardMapResponse | None) -> None:
        self.asked = 0
        self.cancelled = 0
        self._answer = answer
        self.GetShardMap = self._get_shard_map

    async def _get_shard_map(self, request: writer_pb2.GetShardMapRequest) -> writer_pb2.GetShardMapResponse:
        self.asked += 1
        if self._answer is not None:
            return self._answer
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


def stubbed_routing(stubs: dict[str, MapStub]) -> WriterRouting:
    """A routing over ``stubs``' addresses (in order) whose connections use those stubs."""

    def connect(address: str) -> ServiceConnection[writer_pb2_grpc.RolloutWriterStub]:
        stub: Any = stubs[address]
        return ServiceConnection("writer", address, lambda: cast(grpc.aio.Channel, None), lambda _: stub)

    return WriterRouting(tuple(stubs), connect)


#: Seconds these tests allow a call that should not wait at all (generous: a loaded machine).
PROMPT = 60.0


def test_a_paused_writer_first_in_the_list_does_not_hold_the_map_back() -> None:
    """The first writer given never answers GetShardMap (paused), the second answers at once: the
    map is taken from the second without waiting out the caller's whole deadline (1 h here, which
    the asks of a paused writer took before, one after the other), and the paused ask is cancelled."""
    paused, live = MapStub(None), MapStub(shard_map(4, {0: ("b:2", 1), 1: ("b:2", 1)}))
    routes = stubbed_routing({"a:1": paused, "b:2": live})

    async def learn() -> None:
        async with asyncio.timeout(PROMPT):
            await routes.refresh(3600.0)

    asyncio.run(learn())
    assert (routes.shard_count, routes.owners[1]) == (4, ("b:2", 1))
    assert (paused.asked, paused.cancelled, live.asked) == (1, 1, 1)
    assert not routes._map_wanted


def test_a_call_waiting_for_a_map_ask_gives_up_at_its_own_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call asks the map of the only writer, which never answers (each ask bounded by an hour
    here); meanwhile a NOT_OWNER naming no owner makes the map wanted again. The next call of the
    same event loop waits for the ask under way only within its own short deadline, then goes on
    (to the default writer); the ask outlives the call that started it (others may wait for it).
    When no writer answered, the map is wanted again."""
    monkeypatch.setattr(_routing, "MAP_ASK_S", 3600.0)
    paused = MapStub(None)
    routes = stubbed_routing({"a:1": paused})
    routes._map_wanted = True

    async def two_calls() -> None:
        first = asyncio.create_task(routes.refresh(3600.0))
        while not paused.asked:
            await asyncio.sleep(0.01)
        assert routes.redirect(not_owner(2, "", ""), routes.default) is None
        async with asyncio.timeout(PROMPT):
            assert await routes.route(str(uuid.uuid4()), 0.2) is routes.default
        assert paused.asked == 1
        assert not first.done()
        first.cancel()
        await asyncio.wait([first])
        assert paused.cancelled == 0
        (asking,) = routes._asking.get()
        asking.cancel()
        await asyncio.wait([asking])

    asyncio.run(two_calls())
    assert paused.cancelled == 1
    assert routes._map_wanted
    assert routes.shard_count == 0
