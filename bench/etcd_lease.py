"""What coordination through etcd costs, on loopback: one lease keepalive on the kept stream and
one ownership transaction, against baselines measured in the same run.

    .venv/bin/python bench/etcd_lease.py [--members 1,3] [--ops 1000] [--rounds 5]

For each cluster size, a fresh etcd cluster (tests/cluster/etcd.py: Debian's etcd 3.4, its data
on the temporary directory's file system); on three members, the client goes through the leader
and then through a follower (a follower forwards keepalives to the leader and proposals through
raft). One operation in flight at a time, ``--ops`` of each per round, in this order:

- ``keepalive, kept stream``: a Lease of writer_service.coordination kept alive with interval 0
  (each keepalive sent as soon as the previous one is answered), on its one stream;
- ``keepalive, new stream`` (baseline): aetcd's ``Client.refresh_lease``, a stream per keepalive;
- ``acquire txn``: ``try_acquire`` of a fresh key (create-if-absent, under the lease);
- ``release txn``: ``release`` of that key at its epoch (delete if the create revision matches);
- ``read`` (baseline): ``owners`` of one key, a linearizable Range (etcd confirms it with its
  leader, without a raft write).

Prints per operation the wall time per operation (ms), the CPU time etcd spent per operation
(all members, from /proc/<pid>/task/*/schedstat) and this process's CPU time per operation, each
the median (min-max) over the rounds; and the ratios kept / new stream, and txn / read.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aetcd
import grpc
from _support import HelpFormatter, proc_cpu_ns

from tests.cluster.etcd import EtcdCluster, etcd_cluster
from writer_service.coordination import ClusterKeys, EtcdClient, OwnerRecord
from writer_service.coordination.protocol import etcd_rpc

OWNER = OwnerRecord("127.0.0.1:50051", "bench")
OPERATIONS = ("keepalive, kept stream", "keepalive, new stream", "acquire txn", "release txn", "read")

Figures = dict[str, dict[str, list[float]]]  # operation -> "wall" / "etcd" / "client" -> per round


async def _leader_index(cluster: EtcdCluster) -> int:
    """The member that leads the cluster now (asked of the first member)."""
    async with grpc.aio.insecure_channel(cluster.members[0].endpoint) as channel:
        status = await etcd_rpc.MaintenanceStub(channel).Status(etcd_rpc.StatusRequest())
    for index, member in enumerate(cluster.members):
        async with grpc.aio.insecure_channel(member.endpoint) as channel:
            mine = await etcd_rpc.MaintenanceStub(channel).Status(etcd_rpc.StatusRequest())
        if mine.header.member_id == status.leader:
            return index
    raise RuntimeError("no member is the leader")


async def _measure(
    cluster: EtcdCluster, operation: Callable[[], Awaitable[None]], ops: int, figures: dict[str, list[float]]
) -> None:
    pids = [member.process.pid for member in cluster.members if member.process is not None]
    etcd_before, client_before, started = (
        sum(map(proc_cpu_ns, pids)),
        time.process_time(),
        time.perf_counter(),
    )
    await operation()
    figures["wall"].append((time.perf_counter() - started) / ops)
    figures["etcd"].append((sum(map(proc_cpu_ns, pids)) - etcd_before) / 1e9 / ops)
    figures["client"].append((time.process_time() - client_before) / ops)


async def _round(cluster: EtcdCluster, endpoint: str, ops: int, figures: Figures, round_index: int) -> None:
    async with EtcdClient(endpoint) as etcd:
        lease = await etcd.grant_lease(60, interval=0.0)

        async def keepalives() -> None:
            target = lease.renewals + ops
            while lease.renewals < target:
                await asyncio.sleep(0.002)

        await keepalives()  # warm-up: the stream is open and answering
        await _measure(cluster, keepalives, ops, figures["keepalive, kept stream"])
        await lease.abandon()
        host, port = endpoint.rsplit(":", 1)
        async with aetcd.Client(host, int(port)) as baseline:
            other = await baseline.lease(60)

            async def refreshes() -> None:
                for _ in range(ops):
                    await baseline.refresh_lease(other.id)

            await _measure(cluster, refreshes, ops, figures["keepalive, new stream"])
            await baseline.revoke_lease(other.id)
        owned = await etcd.grant_lease(60)
        keys = [ClusterKeys(f"bench-{round_index}").shard(shard) for shard in range(ops)]
        epochs: list[int] = []

        async def acquires() -> None:
            for key in keys:
                epoch = await etcd.try_acquire(key, owned, OWNER)
                assert epoch is not None
                epochs.append(epoch)

        async def releases() -> None:
            for key, epoch in zip(keys, epochs, strict=True):
                assert await etcd.release(key, epoch)

        async def reads() -> None:
            for _ in range(ops):
                await etcd.owners(keys[0])

        await _measure(cluster, acquires, ops, figures["acquire txn"])
        await _measure(cluster, releases, ops, figures["release txn"])
        await _measure(cluster, reads, ops, figures["read"])


def _spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    scaled = [value * scale for value in values]
    return f"{statistics.median(scaled):.{digits}f} ({min(scaled):.{digits}f}-{max(scaled):.{digits}f})"


def _report(title: str, figures: Figures) -> None:
    print(f"\n{title}: median (min-max) over the rounds")
    print(f"{'':>24}  {'ms/op wall':>22}  {'etcd CPU us/op':>22}  {'client CPU us/op':>22}")
    for operation in OPERATIONS:
        row = figures[operation]
        print(
            f"{operation:>24}  {_spread(row['wall'], 1e3):>22}  {_spread(row['etcd'], 1e6, 0):>22}"
            f"  {_spread(row['client'], 1e6, 0):>22}"
        )
    kept, new = figures["keepalive, kept stream"], figures["keepalive, new stream"]
    read = figures["read"]
    kept_ratio = [a / b for a, b in zip(kept["wall"], new["wall"], strict=True)]
    kept_cpu = [a / b for a, b in zip(kept["etcd"], new["etcd"], strict=True)]
    print(
        f"  kept / new stream: wall {_spread(kept_ratio, digits=2)}, etcd CPU {_spread(kept_cpu, digits=2)}"
    )
    for operation in ("acquire txn", "release txn"):
        ratio = [a / b for a, b in zip(figures[operation]["wall"], read["wall"], strict=True)]
        print(f"  {operation} / read: wall {_spread(ratio, digits=2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--members", default="1,3", help="cluster sizes, comma-separated (1 or 3)")
    parser.add_argument("--ops", type=int, default=1000, help="operations of each kind per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    for size in (int(part) for part in args.members.split(",")):
        with tempfile.TemporaryDirectory() as folder, etcd_cluster(Path(folder), size) as cluster:
            leader = asyncio.run(_leader_index(cluster))
            targets = {"the member": leader} if size == 1 else {"the leader": leader}
            if size > 1:
                targets["a follower"] = (leader + 1) % size
            for name, index in targets.items():
                figures: Figures = {op: {"wall": [], "etcd": [], "client": []} for op in OPERATIONS}
                for round_index in range(args.rounds):
                    asyncio.run(
                        _round(cluster, cluster.members[index].endpoint, args.ops, figures, round_index)
                    )
                _report(f"{size} member(s), through {name}", figures)


if __name__ == "__main__":
    main()
