"""Writers of one cluster on one shared data root, owning shards through a real etcd
(writer_service.cluster_ownership, docs/cluster.md §2).

Until each epoch writes its own segment (docs/cluster.md §3), two owners of a shard in
sequence append to the same session files; what these tests pin is that only the lease
holder writes and acknowledges.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import grpc
import orjson
import pytest
from click.testing import CliRunner

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from rollout_cli.main import cli
from shared.shards import shard_of
from tests.cluster.cluster_writers import not_owner_metadata, shard_owners, start_cluster_writer
from tests.cluster.etcd import EtcdCluster
from tests.cluster.proxy import TcpRelay
from tests.cluster.waits import wait_until
from tests.ports import free_ports
from tests.processes import ServiceProcess, start_service
from writer_service.coordination import ClusterKeys, EtcdClient

SHARDS = 8
KEYS = ClusterKeys("test")


def start_writer(data_dir: Path, log: Path, etcd: str, *extra: str) -> ServiceProcess:
    return start_cluster_writer(
        data_dir, log, etcd, KEYS.name, SHARDS, "--durability", "unsafe_no_fsync", *extra
    )


async def owners(etcd: EtcdClient) -> dict[int, tuple[str, int]]:
    """Shard -> (owner address, epoch), as etcd holds them now."""
    return await shard_owners(etcd, KEYS)


def balanced(held: dict[int, tuple[str, int]], addresses: list[str]) -> bool:
    """Every shard owned, by the given writers alone, ceil(N / writers) at most each."""
    counts = Counter(address for address, _ in held.values())
    most = -(-SHARDS // len(addresses))
    return len(held) == SHARDS and set(counts) == set(addresses) and max(counts.values()) <= most


def id_in_shard(shard: int) -> str:
    while True:
        session_id = str(uuid.uuid4())
        if shard_of(session_id, SHARDS) == shard:
            return session_id


def not_owner(error: grpc.RpcError) -> bool:
    """Whether ``error`` is UNAVAILABLE with ErrorInfo NOT_OWNER."""
    return not_owner_metadata(error) is not None


def user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


class Writer:
    """A writer process and a stub on it (its channel made in the event loop that first uses it)."""

    def __init__(self, process: ServiceProcess) -> None:
        self.process = process
        self.address = process.address
        self._channel: grpc.aio.Channel | None = None

    @property
    def stub(self) -> writer_pb2_grpc.RolloutWriterStub:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.address)
        return writer_pb2_grpc.RolloutWriterStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def create(self, session_id: str) -> None:
        await self.stub.CreateSession(writer_pb2.CreateSessionRequest(session_id=session_id), timeout=30)

    async def create_when_owned(self, session_id: str) -> None:
        """Create the session once this writer writes its shard (etcd may show the key a moment
        before the writer has indexed the shard)."""

        async def created() -> bool:
            try:
                await self.create(session_id)
            except grpc.RpcError as error:
                if not not_owner(error):
                    raise
                return False
            return True

        await wait_until(created, f"session {session_id} created at {self.address}")

    async def append_when_owned(
        self, session_id: str, text: str, request_id: str, since: int | None = None
    ) -> int:
        """Append once this writer writes the session's shard (as :meth:`create_when_owned`);
        ``request_id`` keeps a retry from writing twice."""
        seq = -1

        async def appended() -> bool:
            nonlocal seq
            try:
                seq = await self.append(session_id, text, request_id, since)
            except grpc.RpcError as error:
                if not not_owner(error):
                    raise
                return False
            return True

        await wait_until(appended, f"an append to {session_id} at {self.address}")
        return seq

    async def append(self, session_id: str, text: str, request_id: str = "", since: int | None = None) -> int:
        """Append one record; ``request_id`` and ``since`` (request_since_seq) as a client sends them."""
        answer = await self.stub.Append(
            writer_pb2.AppendRequest(
                session_id=session_id, records=[user(text)], request_id=request_id, request_since_seq=since
            ),
            timeout=30,
        )
        return int(answer.seqs[0])


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


def test_two_writers_split_the_shards_and_only_the_owner_writes(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """Two writers on one data root each own about half the shards; a session is written by its shard's
    owner, and the other writer answers UNAVAILABLE NOT_OWNER, writing nothing."""
    one = Writer(start_writer(data_dir, tmp_path / "one.log", etcd1.endpoints))
    two = Writer(start_writer(data_dir, tmp_path / "two.log", etcd1.endpoints))

    async def scenario() -> None:
        async with EtcdClient(etcd1.endpoints) as etcd:
            held: dict[int, tuple[str, int]] = {}

            async def split() -> bool:
                nonlocal held
                held = await owners(etcd)
                return balanced(held, [one.address, two.address])

            await wait_until(split, "the shards split between the two writers")
            shard = next(s for s, (address, _) in held.items() if address == one.address)
            session_id = id_in_shard(shard)
            with pytest.raises(grpc.RpcError) as refused:
                await two.create(session_id)
            assert not_owner(refused.value), refused.value
            await one.create_when_owned(session_id)
            assert await one.append(session_id, "hello") == 1
            with pytest.raises(grpc.RpcError) as refused:
                await two.append(session_id, "not here")
            assert not_owner(refused.value), refused.value
            assert await one.append(session_id, "again") == 2

    asyncio.run(scenario())
    assert one.process.stop() == 0
    assert two.process.stop() == 0


def test_a_joining_writer_gets_its_share_and_a_drained_one_hands_over(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """A third writer joining takes shards from the other two (handover: released, then taken at
    a new epoch); SIGTERM drains one (its shards released, then taken by the others), and its
    sessions carry on from the file at the next owner."""
    first = Writer(start_writer(data_dir, tmp_path / "w1.log", etcd1.endpoints))
    second = Writer(start_writer(data_dir, tmp_path / "w2.log", etcd1.endpoints))

    async def scenario() -> None:
        async with EtcdClient(etcd1.endpoints) as etcd:
            held: dict[int, tuple[str, int]] = {}

            async def settled(*writers: Writer) -> bool:
                nonlocal held
                held = await owners(etcd)
                return balanced(held, [writer.address for writer in writers])

            await wait_until(lambda: settled(first, second), "two writers share the shards")
            before = dict(held)
            shard = next(s for s, (address, _) in held.items() if address == first.address)
            session_id = id_in_shard(shard)
            await first.create_when_owned(session_id)
            assert await first.append(session_id, "one") == 1

            third = Writer(start_writer(data_dir, tmp_path / "w3.log", etcd1.endpoints))
            await wait_until(lambda: settled(first, second, third), "three writers share the shards")
            moved = [s for s in held if held[s][0] == third.address]
            assert moved
            assert all(held[s][1] > before[s][1] for s in moved), (before, held)

            owner = next(w for w in (first, second, third) if w.address == held[shard][0])
            assert owner.process.stop(signal.SIGTERM) == 0  # drained, then exited
            rest = [w for w in (first, second, third) if w is not owner]
            await wait_until(lambda: settled(*rest), "the drained writer's shards taken by the others")
            new_owner = next(w for w in rest if w.address == held[shard][0])
            # seq 0 the meta, 1 "one": the next owner read the file the first one wrote
            assert await new_owner.append_when_owned(session_id, "after the handover", "handover-1") == 2
            for writer in rest:
                assert writer.process.stop() == 0

    asyncio.run(scenario())


def test_a_writer_cut_off_from_etcd_stops_then_resumes_with_new_epochs(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """etcd unreachable (a relay holding every byte): the writer refuses writes with UNAVAILABLE
    NOT_OWNER on its own (its lease deadline passed; etcd never told it); once etcd is reachable
    again it takes its shards back under a new lease, at larger epochs, and writes resume."""

    async def scenario() -> None:
        relay = TcpRelay(etcd1.members[0].client_port)
        await relay.start()
        # in a thread: the relay serves from this event loop while the writer starts
        process = await asyncio.to_thread(
            start_writer, data_dir, tmp_path / "cut.log", relay.endpoint, "--lease-ttl", "3"
        )
        writer = Writer(process)
        try:
            async with EtcdClient(etcd1.endpoints) as etcd:
                held: dict[int, tuple[str, int]] = {}

                async def all_mine() -> bool:
                    nonlocal held
                    held = await owners(etcd)
                    return balanced(held, [writer.address])

                await wait_until(all_mine, "the writer owns every shard")
                before = dict(held)
                session_id = id_in_shard(0)
                await writer.create_when_owned(session_id)
                assert await writer.append(session_id, "before") == 1

                relay.hold()
                refused: grpc.RpcError | None = None

                async def refusing() -> bool:
                    nonlocal refused
                    try:
                        await writer.append(session_id, "while cut off", request_id=str(uuid.uuid4()))
                    except grpc.RpcError as error:
                        refused = error
                        return True
                    return False

                await wait_until(refusing, "writes refused once the lease deadline passed")
                assert refused is not None
                assert not_owner(refused), refused

                relay.release()

                async def taken_again() -> bool:
                    held = await owners(etcd)
                    return await all_mine() and all(held[s][1] > before[s][1] for s in held)

                await wait_until(taken_again, "every shard taken again, at a larger epoch")

                async def writing() -> bool:
                    try:
                        await writer.append(session_id, "after", request_id="after-1")
                    except grpc.RpcError as error:
                        if not not_owner(error):
                            raise
                        return False
                    return True

                await wait_until(writing, "writes resumed")
        finally:
            await asyncio.to_thread(writer.process.stop)
            await writer.close()
            await relay.close()

    asyncio.run(scenario())


def test_a_data_root_whose_shard_count_differs_from_the_cluster_is_refused(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """The cluster record says 8 shards; a writer whose data root has 4 refuses to start, saying both."""
    first = start_writer(data_dir, tmp_path / "ok.log", etcd1.endpoints)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(RuntimeError, match="has 8 shards but this data root has 4"):
        start_service(
            "writer",
            other,
            tmp_path / "refused.log",
            "--etcd",
            etcd1.endpoints,
            "--cluster",
            KEYS.name,
            "--shards",
            "4",
        )
    assert first.stop() == 0


def test_cluster_status_shows_every_shard_s_owner_and_drain_hands_a_writer_s_shards_over(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """`rollout cluster status` lists each shard with its owner and epoch and each writer with its
    share and lease time left; `rollout cluster drain ADDR` makes that writer release its shards
    to the other and exit (status 0)."""
    one = Writer(start_writer(data_dir, tmp_path / "one.log", etcd1.endpoints))
    two = Writer(start_writer(data_dir, tmp_path / "two.log", etcd1.endpoints))

    async def held_by(*writers: Writer) -> dict[int, tuple[str, int]]:
        async with EtcdClient(etcd1.endpoints) as etcd:
            held: dict[int, tuple[str, int]] = {}

            async def settled() -> bool:
                nonlocal held
                held = await owners(etcd)
                return balanced(held, [writer.address for writer in writers])

            await wait_until(settled, f"{len(writers)} writers share the shards")
            return held

    held = asyncio.run(held_by(one, two))
    result = CliRunner().invoke(cli, ["cluster", "status", "--etcd", etcd1.endpoints, "--cluster", KEYS.name])
    assert result.exit_code == 0, result.output
    assert f"{SHARDS} of {SHARDS} shards owned" in result.output
    cells = [[cell.strip() for cell in row.split("│")[1:-1]] for row in result.output.splitlines()]
    shown = {int(row[0]): (row[1], int(row[3])) for row in cells if len(row) == 5 and row[0].isdigit()}
    assert shown == held
    writers = {row[0]: int(row[2]) for row in cells if len(row) == 4 and row[2].isdigit()}
    assert writers == {one.address: SHARDS // 2, two.address: SHARDS // 2}

    result = CliRunner().invoke(
        cli, ["cluster", "drain", one.address, "--etcd", etcd1.endpoints, "--cluster", KEYS.name]
    )
    assert result.exit_code == 0, result.output
    assert "drained and left" in result.output
    assert one.process.process.wait(60) == 0
    after = asyncio.run(held_by(two))
    assert all(after[s][1] > held[s][1] for s in held if held[s][0] == one.address)
    assert two.process.stop() == 0


def test_drain_names_the_writers_when_none_advertises_the_address(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """Draining an address no writer advertises is refused, listing the writers' addresses."""
    one = start_writer(data_dir, tmp_path / "one.log", etcd1.endpoints)

    async def present() -> bool:
        async with EtcdClient(etcd1.endpoints) as etcd:
            return bool((await etcd.owners(KEYS.writers)).owners)

    asyncio.run(wait_until(present, "the writer present in the cluster"))
    result = CliRunner().invoke(
        cli, ["cluster", "drain", "127.0.0.1:1", "--etcd", etcd1.endpoints, "--cluster", KEYS.name]
    )
    assert result.exit_code == 1
    assert f"no writer of cluster 'test' advertises 127.0.0.1:1 (writers: {one.address})" in result.output
    assert one.stop() == 0


def test_a_writer_exports_its_shards_lease_and_acquisitions(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """/metrics: rollout_owned_shards, rollout_lease_remaining_seconds (within the TTL) and the
    acquisitions counter of a writer that took every shard."""
    (port,) = free_ports(1)
    writer = start_writer(data_dir, tmp_path / "metrics.log", etcd1.endpoints, "--metrics-port", str(port))
    figures: dict[str, float] = {}

    def scraped() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        figures.clear()
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name.startswith("rollout_") and value:
                figures[name] = float(value)
        return figures.get("rollout_owned_shards") == SHARDS

    asyncio.run(wait_until(scraped, "every shard owned, as the metrics say"))
    assert 0 < figures["rollout_lease_remaining_seconds"] < 10
    assert figures["rollout_shard_acquisitions_total"] == SHARDS
    assert figures["rollout_lease_losses_total"] == 0
    assert writer.stop() == 0


def test_writers_stop_without_quorum_and_resume_with_new_epochs_when_it_returns(
    etcd3: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """Three etcd members: one killed, the writers keep writing; two killed (no quorum, no lease
    renewed), their writes are refused UNAVAILABLE NOT_OWNER; both back, the shards are taken
    again at larger epochs and the session's writes resume where they stopped."""
    writers = [
        Writer(start_writer(data_dir, tmp_path / f"q{index}.log", etcd3.endpoints, "--lease-ttl", "3"))
        for index in range(2)
    ]

    async def scenario() -> None:
        async with EtcdClient(etcd3.endpoints) as etcd:
            held: dict[int, tuple[str, int]] = {}

            async def settled() -> bool:
                nonlocal held
                held = await owners(etcd)
                return balanced(held, [writer.address for writer in writers])

            await wait_until(settled, "two writers share the shards")
            before = dict(held)
            session_id = id_in_shard(0)
            owner = next(writer for writer in writers if writer.address == held[0][0])
            await owner.create_when_owned(session_id)
            assert await owner.append(session_id, "one", request_id="r-1") == 1
            # a session on each writer: below, every writer's lease must lapse, not only the first
            probes = {}
            for writer in writers:
                shard = next(s for s, (address, _) in held.items() if address == writer.address)
                probes[writer.address] = id_in_shard(shard) if writer is not owner else session_id
                if writer is not owner:
                    await writer.create_when_owned(probes[writer.address])

            await asyncio.to_thread(etcd3.kill, 2)
            assert await owner.append(session_id, "two", request_id="r-2", since=2) == 2

            await asyncio.to_thread(etcd3.kill, 1)

            async def refused(writer: Writer) -> bool:
                try:
                    await writer.append(probes[writer.address], "probe", request_id=str(uuid.uuid4()))
                except grpc.RpcError as error:
                    if not not_owner(error):
                        raise
                    return True
                return False

            for writer in writers:
                await wait_until(lambda writer=writer: refused(writer), "writes refused without a quorum")

            for index in (1, 2):
                await asyncio.to_thread(etcd3.restart, index, wait=False)
            await asyncio.to_thread(etcd3.wait_healthy)

            async def taken_again() -> bool:
                return await settled() and all(held[s][1] > before[s][1] for s in held)

            await wait_until(taken_again, "every shard taken again, at a larger epoch")
            current = next(writer for writer in writers if writer.address == held[0][0])

            async def writing() -> bool:
                try:
                    await current.append(session_id, "after", request_id="r-after")
                except grpc.RpcError as error:
                    if not not_owner(error):
                        raise
                    return False
                return True

            await wait_until(writing, "writes resumed")
            # the retried id is answered from the file, not written again: "two" stays seq 2
            assert await current.append(session_id, "two", request_id="r-2", since=2) == 2
        for writer in writers:
            await writer.close()

    asyncio.run(scenario())
    for writer in writers:
        assert writer.process.stop() == 0


def test_a_cluster_writer_and_a_single_writer_exclude_each_other_on_one_data_root(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """Writers of a cluster hold the data root's lock shared: a second one starts, a single
    writer (no --etcd) is refused; and a cluster writer is refused on a root a single writer holds."""
    first = start_writer(data_dir, tmp_path / "first.log", etcd1.endpoints)
    second = start_writer(data_dir, tmp_path / "second.log", etcd1.endpoints)
    with pytest.raises(RuntimeError, match="already in use by another writer process"):
        start_service("writer", data_dir, tmp_path / "single.log")
    assert first.stop() == 0
    assert second.stop() == 0

    single = start_service("writer", data_dir, tmp_path / "single-again.log")
    with pytest.raises(RuntimeError, match="in use by a writer that is not in a cluster"):
        start_writer(data_dir, tmp_path / "refused.log", etcd1.endpoints)
    assert single.stop() == 0


def test_a_killed_writer_s_shards_fail_over_to_another_with_nothing_lost_or_repeated(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """kill -9 of a shard's owner: once its lease ends, the other writer takes its shards at larger
    epochs and carries the session on from its file: every acknowledged record there once, and a
    retried request id answered, not written again."""
    writers = [
        Writer(start_writer(data_dir, tmp_path / f"f{index}.log", etcd1.endpoints, "--lease-ttl", "2"))
        for index in range(2)
    ]
    session_id = id_in_shard(0)

    async def scenario() -> None:
        async with EtcdClient(etcd1.endpoints) as etcd:
            held: dict[int, tuple[str, int]] = {}

            async def settled(*alive: Writer) -> bool:
                nonlocal held
                held = await owners(etcd)
                return balanced(held, [writer.address for writer in alive])

            await wait_until(lambda: settled(*writers), "two writers share the shards")
            before = dict(held)
            victim = next(writer for writer in writers if writer.address == held[0][0])
            survivor = next(writer for writer in writers if writer is not victim)
            await victim.create_when_owned(session_id)
            acknowledged = [
                await victim.append(session_id, f"r{n}", f"id-{n}", since=n + 1) for n in range(5)
            ]
            assert acknowledged == [1, 2, 3, 4, 5]

            await asyncio.to_thread(victim.process.stop, signal.SIGKILL)
            await wait_until(lambda: settled(survivor), "the survivor owns every shard")
            moved = [s for s, (address, _) in before.items() if address == victim.address]
            assert all(held[s][1] > before[s][1] for s in moved)
            # a retry of the last acknowledged request: answered from the file, not written again
            assert await survivor.append_when_owned(session_id, "r4", "id-4", since=5) == 5
            assert await survivor.append(session_id, "r5", "id-5", since=6) == 6
        for writer in writers:
            await writer.close()

    asyncio.run(scenario())
    for writer in writers:
        writer.process.stop()
    (path,) = data_dir.glob(f"shards/*/sessions/*{session_id}*.jsonl")
    seqs = [orjson.loads(line)["seq"] for line in path.read_bytes().splitlines()]
    assert seqs == list(range(7))


def test_a_shard_that_comes_back_is_read_afresh(etcd1: EtcdCluster, data_dir: Path, tmp_path: Path):
    """A shard goes from writer A to B (B joins), B appends, then back to A (B drained): A carries
    on after B's records, not from what it knew when it let the shard go."""
    first = Writer(start_writer(data_dir, tmp_path / "a.log", etcd1.endpoints))

    async def scenario() -> None:
        async with EtcdClient(etcd1.endpoints) as etcd:
            held: dict[int, tuple[str, int]] = {}

            async def settled(*alive: Writer) -> bool:
                nonlocal held
                held = await owners(etcd)
                return balanced(held, [writer.address for writer in alive])

            await wait_until(lambda: settled(first), "the first writer owns every shard")
            sessions = [id_in_shard(shard) for shard in range(SHARDS)]
            for session_id in sessions:
                await first.create_when_owned(session_id)
                assert await first.append(session_id, "from A", "a-1", since=1) == 1

            second = Writer(
                await asyncio.to_thread(start_writer, data_dir, tmp_path / "b.log", etcd1.endpoints)
            )
            await wait_until(lambda: settled(first, second), "two writers share the shards")
            moved = [shard for shard, (address, _) in held.items() if address == second.address]
            for shard in moved:
                assert await second.append_when_owned(sessions[shard], "from B", "b-1", since=2) == 2

            assert await asyncio.to_thread(second.process.stop) == 0
            await wait_until(lambda: settled(first), "the shards back at the first writer")
            for shard in moved:
                assert await first.append_when_owned(sessions[shard], "from A again", "a-2", since=3) == 3
            await second.close()
        await first.close()

    asyncio.run(scenario())
    assert first.process.stop() == 0


async def refused_unless_owned(writer: Writer, session_id: str) -> bool:
    """Whether an Append to ``session_id`` (a deleted session) at ``writer`` is refused otherwise
    than NOT_OWNER (False while the writer does not write its shard yet)."""
    try:
        await writer.append(session_id, "after the delete")
    except grpc.RpcError as error:
        return not not_owner(error)
    raise AssertionError(f"an append to deleted session {session_id} was written")


def test_a_shard_that_comes_back_knows_the_deletions_made_meanwhile(
    etcd1: EtcdCluster, data_dir: Path, tmp_path: Path
):
    """A shard goes from writer A to B, B deletes a session of it, the shard comes back to A: A
    has forgotten the session (an Append is NOT_FOUND) and knows its tombstone (a DeleteSession
    again is answered already_deleted; the id cannot be created again)."""
    first = Writer(start_writer(data_dir, tmp_path / "a.log", etcd1.endpoints))

    async def scenario() -> None:
        async with EtcdClient(etcd1.endpoints) as etcd:
            held: dict[int, tuple[str, int]] = {}

            async def settled(*alive: Writer) -> bool:
                nonlocal held
                held = await owners(etcd)
                return balanced(held, [writer.address for writer in alive])

            await wait_until(lambda: settled(first), "the first writer owns every shard")
            sessions = [id_in_shard(shard) for shard in range(SHARDS)]
            for session_id in sessions:
                await first.create_when_owned(session_id)
                assert await first.append(session_id, "from A") == 1

            second = Writer(
                await asyncio.to_thread(start_writer, data_dir, tmp_path / "b.log", etcd1.endpoints)
            )
            await wait_until(lambda: settled(first, second), "two writers share the shards")
            moved = [shard for shard, (address, _) in held.items() if address == second.address]
            for shard in moved:
                await second.append_when_owned(sessions[shard], "from B", "b-1", since=2)
                deleted = await second.stub.DeleteSession(
                    writer_pb2.DeleteSessionRequest(session_id=sessions[shard]), timeout=30
                )
                assert not deleted.already_deleted

            assert await asyncio.to_thread(second.process.stop) == 0
            await wait_until(lambda: settled(first), "the shards back at the first writer")
            for shard in moved:
                session_id = sessions[shard]

                await wait_until(
                    functools.partial(refused_unless_owned, first, session_id),
                    f"session {session_id} forgotten by the first writer",
                )
                with pytest.raises(grpc.RpcError) as unknown:
                    await first.append(session_id, "after the delete")
                assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
                again = await first.stub.DeleteSession(
                    writer_pb2.DeleteSessionRequest(session_id=session_id), timeout=30
                )
                assert again.already_deleted
                with pytest.raises(grpc.RpcError) as taken:
                    await first.create(session_id)
                assert taken.value.code() == grpc.StatusCode.ALREADY_EXISTS
            await second.close()
        await first.close()

    asyncio.run(scenario())
    assert first.process.stop() == 0
