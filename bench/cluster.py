"""Writers of a cluster on a real three-member etcd on loopback: failover under load, fencing of a
paused owner, and what the cluster costs per append against the single embedded writer.

    .venv/bin/python bench/cluster.py [--kills 20] [--agents 64] [--lease-ttl 10] [--shards 256]
                                      [--rounds 3] [--appends 40] [--fencing-ttl 2] [--phase 15]
                                      [--only failover,fencing,etcd-faults,rebalance,cost] [--keep]

A fresh etcd cluster (tests/cluster/etcd.py: Debian's etcd 3.4, three members) and a data root
on the temporary directory's file system; writers are ``rollout serve-writer --etcd ...
--cluster NAME`` processes of this checkout (``--durability``, default fsync).

``failover``: three writers; ``--agents`` agents (one AsyncRolloutClient, the SDK's routing,
its default retry policy with a 120 s deadline) each append one ~1 KB record per call to a
session of its own, without pause. Then ``--kills`` times: SIGKILL the next writer in turn,
and from that instant append to a probe session in every shard it owned (created beforehand,
one per shard; probes retry every 20-100 ms): the shard *answers from another writer* when
its probe is acknowledged. Per kill: when a watch of the owner keys saw the dead writer's lease
end (its keys deleted), when etcd showed every shard of the dead writer owned by another, and
when every such shard answered (the last probe); p50 / p99 / max over the kills, against the
TTL, and of each step. The killed writer is started again on its address and the next kill
waits until the shards are balanced over three writers again. At the end, every agent and probe
session is replayed through a reader and verified: each acknowledged record must be there exactly
once, in acknowledgement order (lost / duplicated counts), and every session must verify. Errors the agents saw (anything the SDK raised after its retries)
are counted by kind.

``fencing``: ``--rounds`` rounds of tests/cluster/paused_owner.py (two writers, lease TTL
``--fencing-ttl``; one stopped by SIGSTOP between a round's write and its sync, past its TTL,
while the other takes its shard and appends; then SIGCONT), each on a fresh data root; counted:
rounds where the resumed owner acknowledged (must be 0), answered UNAVAILABLE NOT_OWNER with its
epoch, where the retry was answered at the seq the record landed at, acknowledged records lost,
duplicated or at another seq, sessions not verifying.

``etcd-faults``: three writers under ``--agents`` agents' load; ``--phase`` seconds on three etcd
members, then one member killed, then a second (no quorum: no keepalive is answered, so every
writer's deadline falls at most a TTL after it), then both restarted. Printed per phase: acks,
their rate and p50 / p99 latency; how long after the quorum was lost the last ack came (it must
be under the TTL); how long after the restart the first ack came. ``rebalance``: the same load;
a fourth writer joins (the time until the shards are balanced over four, and the acks during
that handover), then one of the first three drains on SIGTERM (likewise). Both end with every
agent's session replayed and checked as in ``failover``.

``cost``: in each of ``--rounds`` rounds, on fresh data roots, the embedded writer (no etcd:
the baseline) and clusters of 1, 2 and 3 writers take the same load: ``--agents`` agents,
``--appends`` appends each, one record per call, after a warm-up. Printed: the writers' CPU
(all writer processes, /proc schedstat) per 1,000 appends, as the median over the rounds and
as a ratio to the embedded writer's of the same round; etcd requests other than keepalives
per second idle and under load (from etcd's own gRPC counters: the same rate under load
means no etcd round trip on the append path); the embedded writer under a third of the agents
(``embedded /3``, each appending three times as often: what each of three writers takes) and
the ratio of three writers to it; and, on each cluster idle for ``--idle``
seconds, keepalives per second per writer, the etcd CPU each writer adds to etcd's own idle
load (measured with no writer, during the embedded run) and a writer's own CPU when idle.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import shlex
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _support import REPO, HelpFormatter, proc_cpu_ns
from prometheus_client.parser import text_string_to_metric_families

from rollout_client import AsyncRolloutClient, AsyncSession, RetryPolicy, RolloutError, user
from shared.shards import shard_of
from tests.cluster.cluster_writers import shard_owners
from tests.cluster.etcd import EtcdCluster, etcd_cluster
from tests.cluster.paused_owner import paused_owner_round
from tests.ports import free_ports
from tests.processes import ServiceProcess, start_service
from writer_service.coordination import ClusterKeys, EtcdClient, EventKind, OwnerRecord

TEXT = ("The agent read the file, ran the tests and wrote a short plan for the next step. " * 14)[:950]
AGENT_RETRY = RetryPolicy(deadline=120.0)
PROBE_RETRY = RetryPolicy(deadline=120.0, initial_backoff=0.02, max_backoff=0.1, attempt_timeout=2.0)
#: Seconds a cluster may take to settle (every shard owned, balanced) before the bench gives up.
SETTLE_LIMIT = 300.0


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


# -- a cluster of writer processes -------------------------------------------------------


@dataclass
class Writers:
    """Writer processes of one cluster (or the embedded writer when ``etcd`` is None)."""

    data_dir: Path
    logs: Path
    etcd: str | None
    name: str
    shards: int
    lease_ttl: int
    durability: str
    running: dict[str, ServiceProcess] = field(default_factory=dict)

    def start(self, address: str = "127.0.0.1:0") -> str:
        extra = ["--shards", str(self.shards), "--durability", self.durability]
        if self.etcd is not None:
            extra += ["--etcd", self.etcd, "--cluster", self.name, "--lease-ttl", str(self.lease_ttl)]
        index = len(list(self.logs.glob("writer-*.log")))
        process = start_service(
            "writer", self.data_dir, self.logs / f"writer-{index}.log", *extra, address=address
        )
        self.running[process.address] = process
        return process.address

    def kill(self, address: str) -> None:
        process = self.running.pop(address)
        process.stop(signal.SIGKILL)

    def pids(self) -> list[int]:
        return [process.process.pid for process in self.running.values()]

    def stop(self) -> None:
        for process in self.running.values():
            process.process.send_signal(signal.SIGTERM)
        for process in self.running.values():
            process.stop(timeout=60)
        self.running.clear()

    @property
    def addresses(self) -> str:
        return ",".join(self.running)


async def owners(etcd: EtcdClient, keys: ClusterKeys) -> dict[int, str]:
    """Shard -> owner address, as etcd holds them now."""
    return {shard: address for shard, (address, _) in (await shard_owners(etcd, keys)).items()}


async def settled(etcd: EtcdClient, keys: ClusterKeys, shards: int, addresses: list[str]) -> dict[int, str]:
    """Wait until every shard is owned by ``addresses`` alone, each holding floor..ceil of its
    share; returns the map. RuntimeError after SETTLE_LIMIT seconds."""
    give_up = time.monotonic() + SETTLE_LIMIT
    while True:
        held = await owners(etcd, keys)
        counts = Counter(held.values())
        if (
            len(held) == shards
            and set(counts) == set(addresses)
            and max(counts.values()) <= -(-shards // len(addresses))
            and min(counts.values()) >= shards // len(addresses)
        ):
            return held
        if time.monotonic() > give_up:
            raise RuntimeError(f"the cluster did not settle within {SETTLE_LIMIT:g} s: {dict(counts)}")
        await asyncio.sleep(0.1)


def etcd_counters(cluster: EtcdCluster) -> Counter[str]:
    """gRPC messages every member received so far, by method (etcd's /metrics)."""
    total: Counter[str] = Counter()
    for member in cluster.members:
        with urllib.request.urlopen(f"http://{member.endpoint}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        for family in text_string_to_metric_families(text):
            if family.name == "grpc_server_msg_received":
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        total[sample.labels["grpc_method"]] += int(sample.value)
    return total


def etcd_cpu(cluster: EtcdCluster) -> int:
    return sum(proc_cpu_ns(member.process.pid) for member in cluster.members if member.process is not None)


# -- agents ------------------------------------------------------------------------------


@dataclass
class Agent:
    """One agent's session and what it was told: each acknowledged text and its seq, in order."""

    session: AsyncSession
    acked: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Load:
    agents: list[Agent]
    errors: Counter[str] = field(default_factory=Counter)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    #: (time.monotonic() of the acknowledgement, seconds the append took), every agent's.
    acks: list[tuple[float, float]] = field(default_factory=list)

    async def run(self, agent: Agent, index: int, limit: int | None = None) -> None:
        count = 0
        while not self.stop.is_set() and (limit is None or count < limit):
            text = f"agent {index} record {len(agent.acked)} {TEXT}"
            sent = time.monotonic()
            try:
                result = await agent.session.append(user(text))
            except RolloutError as error:
                kind = re.sub(r"[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", error.message)
                self.errors[f"{type(error).__name__}: {kind[:240]}"] += 1
                await asyncio.sleep(0.1)
                continue
            now = time.monotonic()
            self.acks.append((now, now - sent))
            agent.acked.append((result.seqs[0], text))
            count += 1

    def window(self, start: float, end: float) -> str:
        """Acknowledgements made from ``start`` to ``end`` (monotonic): count, rate, p50 / p99."""
        taken = [seconds for at, seconds in self.acks if start <= at < end]
        if not taken:
            return f"no ack in {end - start:.1f} s"
        return (
            f"{len(taken)} acks in {end - start:.1f} s ({len(taken) / (end - start):.0f}/s),"
            f" p50 {percentile(taken, 0.5) * 1000:.0f} ms, p99 {percentile(taken, 0.99) * 1000:.0f} ms"
        )

    def acknowledged(self) -> int:
        return sum(len(agent.acked) for agent in self.agents)


async def verify(reader_client: AsyncRolloutClient, agents: list[Agent]) -> tuple[int, int, int, list[str]]:
    """(records checked, lost, duplicated, problems): each acknowledged record is in its session's
    replay exactly once, in acknowledgement order, at its seq; every session verifies."""
    lost = duplicated = checked = 0
    problems: list[str] = []
    for agent in agents:
        session = reader_client.session(agent.session.id)
        replay = await session.replay()
        contents = Counter(message.get("content") for message in replay.messages)
        texts = [text for _, text in agent.acked]
        for text in texts:
            checked += 1
            if contents[text] == 0:
                lost += 1
            elif contents[text] > 1:
                duplicated += 1
        order = [
            message.get("content") for message in replay.messages if message.get("content") in set(texts)
        ]
        if order != texts[: len(order)] or len(order) != len(texts):
            problems.append(f"{agent.session.id}: records out of acknowledgement order")
        seqs = [seq for seq, _ in agent.acked]
        if seqs != sorted(set(seqs)):
            problems.append(f"{agent.session.id}: acknowledged seqs not increasing")
        report = await session.verify()
        if not report.ok:
            problems.append(f"{agent.session.id}: does not verify: {report.findings}")
    return checked, lost, duplicated, problems


# -- failover ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _three_writers(
    options: argparse.Namespace, root: Path, name: str
) -> AsyncIterator[tuple[EtcdCluster, EtcdClient, ClusterKeys, Writers, list[str], str]]:
    """Three writers of cluster ``name`` on a fresh three-member etcd, with the shards settled
    over them, and a reader (no content index) on their data root: (etcd cluster, a client of
    it, the cluster's keys, the writers, their addresses, the reader's address). Every process
    is stopped at the end."""
    with etcd_cluster(root / f"{name}-etcd", 3) as cluster:
        keys = ClusterKeys(name)
        data, logs = root / f"{name}-data", root / f"{name}-logs"
        data.mkdir()
        logs.mkdir()
        writers = Writers(
            data, logs, cluster.endpoints, keys.name, options.shards, options.lease_ttl, options.durability
        )
        addresses = [writers.start(f"127.0.0.1:{port}") for port in free_ports(3)]
        reader = start_service("reader", data, logs / "reader.log", "--no-search")
        try:
            async with EtcdClient(cluster.endpoints) as etcd:
                await settled(etcd, keys, options.shards, addresses)
                yield cluster, etcd, keys, writers, addresses, reader.address
        finally:
            writers.stop()
            reader.stop()


async def failover(options: argparse.Namespace, root: Path) -> None:
    async with _three_writers(options, root, "failover") as (cluster, etcd, keys, writers, addresses, reader):
        await _failover_runs(options, cluster, etcd, keys, writers, addresses, reader)


async def _failover_runs(
    options: argparse.Namespace,
    cluster: EtcdCluster,
    etcd: EtcdClient,
    keys: ClusterKeys,
    writers: Writers,
    addresses: list[str],
    reader: str,
) -> None:
    agents_client = AsyncRolloutClient(",".join(addresses), reader, retry=AGENT_RETRY)
    probe_client = AsyncRolloutClient(",".join(addresses), reader, retry=PROBE_RETRY)
    async with agents_client, probe_client:
        agents = [
            Agent(await agents_client.create_session(f"agent-{i}", root=True)) for i in range(options.agents)
        ]
        probe_ids: dict[int, str] = {}
        while len(probe_ids) < options.shards:
            candidate = str(uuid.uuid4())
            probe_ids.setdefault(shard_of(candidate, options.shards), candidate)
        probes: dict[int, Agent] = {}
        for shard, session_id in sorted(probe_ids.items()):
            probes[shard] = Agent(
                await probe_client.create_session("probe", root=True, session_id=session_id)
            )
        load = Load(agents)
        tasks = [asyncio.create_task(load.run(agent, i)) for i, agent in enumerate(agents)]
        expired: list[float] = []
        moved: list[float] = []
        answered: list[float] = []
        started = time.monotonic()
        print(
            f"# {options.agents} agents appending; {options.kills} kills, lease TTL {options.lease_ttl} s",
            flush=True,
        )
        try:
            for kill in range(options.kills):
                victim = addresses[kill % len(addresses)]
                held = await settled(etcd, keys, options.shards, addresses)
                lost_shards = sorted(shard for shard, owner in held.items() if owner == victim)
                handover = asyncio.create_task(_handover(etcd, keys, victim, lost_shards))
                await asyncio.sleep(1.0)  # under load on the settled cluster before the kill
                before = load.acknowledged()
                killed_at = time.monotonic()
                writers.kill(victim)
                probe_tasks = [
                    asyncio.create_task(_probe(probes[shard], kill, killed_at)) for shard in lost_shards
                ]
                expired_at, moved_at = await handover
                times = await asyncio.gather(*probe_tasks)
                expired.append(expired_at - killed_at)
                moved.append(moved_at - killed_at)
                answered.append(max(times))
                print(
                    f"kill {kill + 1:2d}: {victim} ({len(lost_shards)} shards): lease ended after"
                    f" {expired[-1]:5.2f} s, owner keys moved after {moved[-1]:5.2f} s, every shard"
                    f" answered after {max(times):5.2f} s (first {min(times):5.2f} s);"
                    f" {load.acknowledged() - before} acks meanwhile",
                    flush=True,
                )
                writers.start(victim)
        finally:
            load.stop.set()
            await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
        await settled(etcd, keys, options.shards, addresses)
        checked, lost, duplicated, problems = await verify(agents_client, [*agents, *probes.values()])
    ttl = options.lease_ttl
    print()
    print(
        f"failover over {len(answered)} kills (lease TTL {ttl} s, target: every shard answers within TTL + 2 s = {ttl + 2} s, p99):"
    )
    for name, values in (("owner keys moved", moved), ("every shard answered", answered)):
        print(
            f"  {name:22s} p50 {percentile(values, 0.5):5.2f} s  p99 {percentile(values, 0.99):5.2f} s"
            f"  max {max(values):5.2f} s  = TTL + {percentile(values, 0.99) - ttl:+.2f} s at p99"
        )
    steps = (
        ("kill -> lease ended (keys deleted, as watched)", expired),
        ("lease ended -> every key owned by another", [m - e for m, e in zip(moved, expired, strict=True)]),
        ("owned -> every shard answered a probe", [a - m for a, m in zip(answered, moved, strict=True)]),
    )
    for name, values in steps:
        print(
            f"    {name:48s} p50 {percentile(values, 0.5):5.2f} s  p99 {percentile(values, 0.99):5.2f} s"
            f"  max {max(values):5.2f} s"
        )
    print(
        f"  {load.acknowledged()} agent appends acknowledged in {elapsed:.0f} s ({load.acknowledged() / elapsed:.0f}/s);"
        f" {checked} acknowledged records checked: lost {lost}, duplicated {duplicated};"
        f" sessions not verifying or out of order: {len(problems)}"
    )
    print(f"  errors the agents saw after the SDK's retries: {sum(load.errors.values())}")
    for kind, count in load.errors.most_common():
        print(f"    {count:6d}  {kind}")
    for problem in problems[:10]:
        print(f"  problem: {problem}")


async def _probe(agent: Agent, kill: int, killed_at: float) -> float:
    """Append to a probe session until acknowledged; seconds from the kill to the acknowledgement.
    Each attempt's text is its own: one whose outcome the SDK could not learn may be in the file
    too, unacknowledged, and is then not counted as a duplicate."""
    attempt = 0
    while True:
        attempt += 1
        text = f"probe after kill {kill}, attempt {attempt}"
        try:
            result = await agent.session.append(user(text))
        except RolloutError as error:  # the SDK's deadline passed: say so, go on probing
            print(f"  probe of kill {kill}: {type(error).__name__}: {error.message}", flush=True)
            await asyncio.sleep(0.1)
            continue
        agent.acked.append((result.seqs[0], text))
        return time.monotonic() - killed_at


async def _handover(
    etcd: EtcdClient, keys: ClusterKeys, victim: str, shards: list[int]
) -> tuple[float, float]:
    """Watch the owner keys of ``shards`` (owned by ``victim``): the ``time.monotonic()`` at which
    the first deletion of one was delivered (the victim's lease ended) and at which the last of
    them was put by another writer. RuntimeError after SETTLE_LIMIT seconds."""
    expired_at: float | None = None
    waiting = set(shards)
    async with asyncio.timeout(SETTLE_LIMIT), etcd.watch(keys.shards) as watch:
        async for event in watch:
            shard = keys.shard_of(event.key)
            if shard not in waiting:
                continue
            if event.kind is EventKind.DELETE and expired_at is None:
                expired_at = time.monotonic()
            elif event.kind is EventKind.PUT and OwnerRecord.decode(event.key, event.value).address != victim:
                waiting.discard(shard)
                if not waiting:
                    return expired_at or time.monotonic(), time.monotonic()
    raise RuntimeError(f"the watch of {victim}'s shards ended")


# -- fencing ---------------------------------------------------------------------------------


async def fencing(options: argparse.Namespace, root: Path) -> None:
    """``--rounds`` rounds of tests/cluster/paused_owner.py on one three-member etcd."""
    counts: Counter[str] = Counter()
    with etcd_cluster(root / "fencing-etcd", 3) as cluster:
        for index in range(options.rounds):
            folder = root / f"fencing-{index}"
            folder.mkdir()
            result = await paused_owner_round(
                cluster.endpoints, folder, f"fencing-{index}", ttl=options.fencing_ttl
            )
            counts["rounds"] += 1
            counts["sound"] += result.sound
            counts["acknowledged after the deadline"] += result.acknowledged_after_deadline
            counts["resumed owner answered UNAVAILABLE NOT_OWNER with its epoch"] += (
                result.old_owner_answer == "UNAVAILABLE" and result.not_owner_epoch != ""
            )
            counts["retry answered at the seq the record landed at"] += (
                result.retry_seq is not None and result.retry_seq == result.marked_seq
            )
            counts["acknowledged records"] += len(result.acknowledged)
            counts["lost"] += len(result.lost)
            counts["duplicated"] += len(result.duplicated)
            counts["at another seq than acknowledged"] += len(result.misplaced)
            counts["sessions not verifying"] += not result.verifies
            if not result.sound:
                print(f"  round {index + 1}: NOT SOUND: {result}", flush=True)
            elif (index + 1) % 10 == 0:
                print(f"  {index + 1} rounds, {counts['sound']} sound", flush=True)
    print()
    print(
        f"fencing: an owner stopped between write and fsync past its lease (TTL {options.fencing_ttl} s),"
        " another writer takes over and appends, then SIGCONT:"
    )
    for name, count in counts.items():
        print(f"  {name:62s} {count}")


# -- etcd faults and rebalancing under load ---------------------------------------------------


@contextlib.asynccontextmanager
async def _loaded_cluster(
    options: argparse.Namespace, root: Path, name: str
) -> AsyncIterator[tuple[EtcdCluster, EtcdClient, ClusterKeys, Writers, list[str], Load]]:
    """Three writers on a fresh three-member etcd with ``--agents`` agents appending; at the end the
    load stops and every agent's session is replayed and checked (lost, duplicated, verifying)."""
    async with (
        _three_writers(options, root, name) as (cluster, etcd, keys, writers, addresses, reader),
        AsyncRolloutClient(",".join(addresses), reader, retry=AGENT_RETRY) as client,
    ):
        agents = [Agent(await client.create_session(f"agent-{i}", root=True)) for i in range(options.agents)]
        load = Load(agents)
        tasks = [asyncio.create_task(load.run(agent, i)) for i, agent in enumerate(agents)]
        try:
            yield cluster, etcd, keys, writers, addresses, load
        finally:
            load.stop.set()
            await asyncio.gather(*tasks)
        checked, lost, duplicated, problems = await verify(client, agents)
        print(
            f"  {load.acknowledged()} appends acknowledged; {checked} checked: lost {lost},"
            f" duplicated {duplicated}; sessions not verifying or out of order: {len(problems)};"
            f" errors the agents saw after the SDK's retries: {sum(load.errors.values())}"
        )
        for kind, count in load.errors.most_common():
            print(f"    {count:6d}  {kind}")


async def etcd_faults(options: argparse.Namespace, root: Path) -> None:
    """One etcd member killed under load, then a second (no quorum), then both back."""
    ttl = options.lease_ttl
    print(f"etcd faults: 3 writers, {options.agents} agents appending, lease TTL {ttl} s")
    async with _loaded_cluster(options, root, "faults") as (cluster, _, _, _, _, load):
        await asyncio.sleep(options.phase)
        steady_end = time.monotonic()
        print(f"  3 members:          {load.window(steady_end - options.phase, steady_end)}", flush=True)
        await asyncio.to_thread(cluster.kill, 2)
        one_down = time.monotonic()
        await asyncio.sleep(options.phase)
        print(f"  one member killed:  {load.window(one_down, time.monotonic())}", flush=True)
        await asyncio.to_thread(cluster.kill, 1)
        no_quorum = time.monotonic()
        await asyncio.sleep(ttl + 5)
        after = [(at, at - seconds) for at, seconds in load.acks if at >= no_quorum]
        if after:
            received = max(at for at, _ in after) - no_quorum
            sent = max(sent for _, sent in after) - no_quorum
            stopped = (
                f"the last ack received {received:.2f} s after it; the latest sent request acknowledged"
                f" was sent {sent:.2f} s after it"
            )
        else:
            stopped = "no ack after it"
        print(
            f"  two killed (no quorum): {stopped} (each writer's deadline is under TTL = {ttl} s after it:"
            f" a request sent later and acknowledged would break fencing);"
            f" {load.window(no_quorum, time.monotonic())}",
            flush=True,
        )
        for index in (1, 2):
            await asyncio.to_thread(cluster.restart, index, wait=False)
        back = time.monotonic()
        await asyncio.to_thread(cluster.wait_healthy)
        healthy = time.monotonic()
        while not any(at >= back for at, _ in load.acks):
            await asyncio.sleep(0.05)
        first = min(at for at, _ in load.acks if at >= back)
        print(
            f"  both back: healthy after {healthy - back:.2f} s, first ack after {first - back:.2f} s",
            flush=True,
        )
        await asyncio.sleep(options.phase)
        print(f"  3 members again:    {load.window(first, time.monotonic())}", flush=True)


async def rebalance(options: argparse.Namespace, root: Path) -> None:
    """A fourth writer joins under load, then one of the first three drains (SIGTERM)."""
    print(f"rebalance: 3 writers, {options.agents} agents appending, lease TTL {options.lease_ttl} s")
    async with _loaded_cluster(options, root, "rebalance") as (_, etcd, keys, writers, addresses, load):
        await asyncio.sleep(options.phase)
        steady_end = time.monotonic()
        print(f"  3 writers:           {load.window(steady_end - options.phase, steady_end)}", flush=True)
        joined = time.monotonic()
        fourth = writers.start()
        await settled(etcd, keys, options.shards, [*addresses, fourth])
        balanced_at = time.monotonic()
        print(
            f"  a 4th joins: balanced over 4 after {balanced_at - joined:.2f} s;"
            f" during the handover {load.window(joined, balanced_at)}",
            flush=True,
        )
        await asyncio.sleep(options.phase)
        leaving = addresses[0]
        drained_at = time.monotonic()
        process = writers.running.pop(leaving)
        exited = asyncio.create_task(asyncio.to_thread(process.stop, signal.SIGTERM, 60))
        await settled(etcd, keys, options.shards, [*addresses[1:], fourth])
        balanced_at = time.monotonic()
        code = await exited
        print(
            f"  one drains (SIGTERM): its shards owned by the other 3 after {balanced_at - drained_at:.2f} s"
            f" (exit code {code}); during the handover {load.window(drained_at, balanced_at)}",
            flush=True,
        )
        await asyncio.sleep(options.phase)
        print(f"  3 writers again:     {load.window(balanced_at, time.monotonic())}", flush=True)


# -- cost ------------------------------------------------------------------------------------

#: The embedded writer under a third of the agents (each of three writers' share of the load).
THIRD = "embedded /3"
CONFIGS = ("embedded", "1 writer", "2 writers", "3 writers", THIRD)
#: Configurations the ratios compare with the embedded writer under the whole load.
CLUSTERS = CONFIGS[1:4]


async def cost(options: argparse.Namespace, root: Path) -> None:
    figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with etcd_cluster(root / "cost-etcd", 3) as cluster:
        for round_index in range(options.rounds):
            for config in CONFIGS:
                await _cost_round(options, root, cluster, config, round_index, figures[config])
            latest = {config: figures[config]["cpu"][-1] for config in CONFIGS}
            ratios = ", ".join(f"{latest[config] / latest['embedded']:.2f}" for config in CLUSTERS)
            print(
                f"round {round_index + 1}: writer CPU ms / 1,000 appends: "
                + ", ".join(f"{config} {value:.0f}" for config, value in latest.items())
                + f" (ratios to embedded {ratios}; 3 writers to embedded /3"
                + f" {latest['3 writers'] / latest[THIRD]:.2f})",
                flush=True,
            )
    print()
    print(
        f"cost, median (min-max) over {options.rounds} rounds; {options.agents} agents x {options.appends} appends each:"
    )
    base_cpu = figures["embedded"]["cpu"]
    for config in CONFIGS:
        cpu = figures[config]["cpu"]
        ratios = [value / base for value, base in zip(cpu, base_cpu, strict=True)]
        line = (
            f"  {config:10s} writer CPU {statistics.median(cpu):6.0f} ms / 1,000 appends ({min(cpu):.0f}-{max(cpu):.0f})"
            f"  ratio {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            f"  appends/s {statistics.median(figures[config]['rate']):.0f}"
        )
        print(line)
    thirds = [
        value / third for value, third in zip(figures["3 writers"]["cpu"], figures[THIRD]["cpu"], strict=True)
    ]
    print(
        f"  3 writers against the embedded writer under a third of the agents ({options.agents // 3} agents,"
        f" each writer's share): ratio {statistics.median(thirds):.2f} ({min(thirds):.2f}-{max(thirds):.2f})"
    )
    base = figures["embedded"]
    print(
        f"etcd load, lease TTL {options.lease_ttl} s; idle {options.idle:g} s on each cluster; with no writer:"
        f" etcd CPU {statistics.median(base['etcd_cpu_idle']):.1f} ms/s (3 members),"
        f" requests {statistics.median(base['etcd_other_idle']):.1f}/s"
    )
    for config in CLUSTERS:
        values, count = figures[config], int(config.split()[0])
        added = [
            (value - empty) / count
            for value, empty in zip(values["etcd_cpu_idle"], base["etcd_cpu_idle"], strict=True)
        ]
        print(
            f"  {config:10s} keepalives/s per writer {statistics.median(values['keepalives']):.2f};"
            f" etcd CPU added per writer {statistics.median(added):+.2f} ms/s ({min(added):+.2f} to {max(added):+.2f});"
            f" writer CPU idle {statistics.median(values['writer_idle']):.2f} ms/s each;"
            f" etcd requests other than keepalives {statistics.median(values['etcd_other_idle']):.1f}/s idle,"
            f" {statistics.median(values['etcd_other_load']):.1f}/s under load"
            f" ({statistics.median(values['rate']):.0f} appends/s); etcd CPU under load"
            f" {statistics.median(values['etcd_cpu_load']):.0f} ms / 1,000 appends"
        )


async def _cost_round(
    options: argparse.Namespace,
    root: Path,
    cluster: EtcdCluster,
    config: str,
    round_index: int,
    figures: dict[str, list[float]],
) -> None:
    tag = f"cost-{round_index}-{config.split()[0]}{'-third' if config == THIRD else ''}"
    data = root / tag
    data.mkdir()
    logs = root / f"{tag}-logs"
    logs.mkdir()
    embedded = config in ("embedded", THIRD)
    count = 1 if embedded else int(config.split()[0])
    etcd = None if embedded else cluster.endpoints
    # The embedded writer under a third of the agents, each appending three times as often: the
    # share of the load each of three writers takes (fewer records per durability round).
    agent_count, appends = (
        (options.agents // 3, options.appends * 3) if config == THIRD else (options.agents, options.appends)
    )
    keys = ClusterKeys(tag)
    writers = Writers(data, logs, etcd, keys.name, options.shards, options.lease_ttl, options.durability)
    try:
        if (
            config == "embedded"
        ):  # no writer uses etcd: its own idle load, the baseline of the per-writer figures
            idle_counts = etcd_counters(cluster)  # scraped outside the CPU window: /metrics costs etcd CPU
            idle_cpu = etcd_cpu(cluster)
            await asyncio.sleep(options.idle)
            figures["etcd_cpu_idle"].append((etcd_cpu(cluster) - idle_cpu) / 1e6 / options.idle)
            counts = etcd_counters(cluster) - idle_counts
            figures["etcd_other_idle"].append(_other(counts) / options.idle)
        addresses = [writers.start() for _ in range(count)]
        if etcd is not None:
            async with EtcdClient(etcd) as client:
                await settled(client, keys, options.shards, addresses)
            await asyncio.sleep(1.0)
            idle_counts = etcd_counters(cluster)
            idle_cpu, idle_writers = etcd_cpu(cluster), _cpu(writers)
            await asyncio.sleep(options.idle)
            figures["etcd_cpu_idle"].append((etcd_cpu(cluster) - idle_cpu) / 1e6 / options.idle)
            counts = etcd_counters(cluster) - idle_counts
            figures["keepalives"].append(counts["LeaseKeepAlive"] / options.idle / count)
            figures["etcd_other_idle"].append(_other(counts) / options.idle)
            figures["writer_idle"].append((_cpu(writers) - idle_writers) / 1e6 / options.idle / count)
        async with AsyncRolloutClient(writers.addresses, retry=AGENT_RETRY) as client:
            agents = [Agent(await client.create_session(f"agent-{i}", root=True)) for i in range(agent_count)]
            load = Load(agents)
            await asyncio.gather(*(load.run(agent, i, 5) for i, agent in enumerate(agents)))  # warm-up
            before_counts = etcd_counters(cluster) if etcd is not None else Counter()
            before_cpu, before_etcd = _cpu(writers), etcd_cpu(cluster)
            before_acked, started = load.acknowledged(), time.monotonic()
            await asyncio.gather(*(load.run(agent, i, appends) for i, agent in enumerate(agents)))
            elapsed = time.monotonic() - started
            appends = load.acknowledged() - before_acked
            writer_cpu, etcd_load = _cpu(writers) - before_cpu, etcd_cpu(cluster) - before_etcd
            figures["cpu"].append(writer_cpu / 1e6 / appends * 1000)
            figures["rate"].append(appends / elapsed)
            if etcd is not None:
                counts = etcd_counters(cluster) - before_counts
                figures["etcd_other_load"].append(_other(counts) / elapsed)
                figures["etcd_cpu_load"].append(etcd_load / 1e6 / appends * 1000)
            if load.errors:
                print(f"  {config}: errors {dict(load.errors)}", flush=True)
    finally:
        writers.stop()


def _other(counts: Counter[str]) -> int:
    """etcd requests other than keepalives (reads, transactions, watch messages)."""
    return sum(value for method, value in counts.items() if method != "LeaseKeepAlive")


def _cpu(writers: Writers) -> int:
    return sum(proc_cpu_ns(pid) for pid in writers.pids())


# -- main ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _root(options: argparse.Namespace) -> Iterator[Path]:
    if options.keep:
        folder = tempfile.mkdtemp(prefix="rollout-cluster-bench-", dir=options.tmp)
        print(f"# data roots and logs kept in {folder}", flush=True)
        yield Path(folder)
        return
    with tempfile.TemporaryDirectory(prefix="rollout-cluster-bench-", dir=options.tmp) as folder:
        yield Path(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="writers killed in the failover run")
    parser.add_argument("--agents", type=int, default=64, help="agents appending at once")
    parser.add_argument("--lease-ttl", type=int, default=10, help="writers' lease TTL (s)")
    parser.add_argument("--shards", type=int, default=256, help="shards of the cluster")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the cost figures")
    parser.add_argument("--appends", type=int, default=40, help="appends per agent per cost round")
    parser.add_argument(
        "--idle", type=float, default=10.0, help="seconds each cluster idles for its keepalive figures"
    )
    parser.add_argument("--durability", choices=("fsync", "unsafe_no_fsync"), default="fsync")
    parser.add_argument(
        "--fencing-ttl", type=int, default=2, help="writers' lease TTL (s) in the fencing rounds"
    )
    parser.add_argument(
        "--phase",
        type=float,
        default=15.0,
        help="seconds of each phase of the etcd-faults and rebalance runs",
    )
    parser.add_argument(
        "--only",
        default="failover,cost",
        help="comma list of failover, fencing (--rounds rounds), etcd-faults, rebalance, cost",
    )
    parser.add_argument(
        "--tmp", default=None, help="folder of the temporary data roots (default: the system's)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data roots and logs (says where)")
    options = parser.parse_args()
    print("$ " + shlex.join([".venv/bin/python", "bench/cluster.py", *sys.argv[1:]]))
    print(f"# {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; checkout {REPO}", flush=True)
    chosen = set(options.only.split(","))
    with _root(options) as root:
        if "failover" in chosen:
            asyncio.run(failover(options, root))
        if "fencing" in chosen:
            asyncio.run(fencing(options, root))
        if "etcd-faults" in chosen:
            asyncio.run(etcd_faults(options, root))
        if "rebalance" in chosen:
            asyncio.run(rebalance(options, root))
        if "cost" in chosen:
            asyncio.run(cost(options, root))


if __name__ == "__main__":
    main()
