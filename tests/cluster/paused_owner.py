"""One round of the paused-owner scenario (docs/cluster.md §3.1, issue 23's fencing acceptance),
run by tests/cluster/test_paused_owner.py and ``bench/cluster.py --only fencing``.

Two writers of a fresh cluster share a fresh data root on a real etcd. Writer A starts with the
committer's test hook (``ROLLOUT_TEST_STOP_BEFORE_SYNC``): the round that writes a record holding
:data:`MARKER` stops A (SIGSTOP) after its write, before its sync. Then:

1. a session in a shard A owns gets two records from A (acknowledged), then the marked record,
   whose round stops A: the call waits;
2. A stays stopped past its lease's TTL; etcd ends the lease and B takes A's shards; B appends
   a record to the session (it reads the file afresh: the marked record is there, unacknowledged);
3. SIGCONT: A's round syncs and asks whether it may acknowledge: its deadline has passed, so the
   call is answered UNAVAILABLE NOT_OWNER naming the epoch (it may have landed);
4. the marked request is retried at B with its request id: answered with the seq it landed at,
   not written again; B appends one more record.

Every acknowledged record must then be in the session file once, at the seq its acknowledgement
named, and the session must verify.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson

from reader_service.replay import verify_findings, verify_session
from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from shared.shards import shard_of
from tests.cluster.cluster_writers import not_owner_metadata, shard_owners, start_cluster_writer
from tests.cluster.waits import wait_until
from tests.processes import ServiceProcess
from writer_service.committer import STOP_BEFORE_SYNC_ENV
from writer_service.coordination import ClusterKeys, EtcdClient

#: The text whose round stops writer A.
MARKER = "pause the owner here"
SHARDS = 8
#: Seconds the paused call may wait for its answer (A is stopped for about a TTL and a takeover).
PAUSED_CALL_TIMEOUT = 300.0


@dataclass
class PausedOwnerRound:
    """What one round saw. ``old_owner_answer``: the status A answered the marked call with once
    resumed ("OK" when it acknowledged it: a fencing failure), with ``not_owner_epoch`` the epoch
    its NOT_OWNER named ("" when none); ``acknowledged``: text -> seq of every acknowledged record;
    ``file_seqs``: text -> the seqs it has in the file."""

    old_owner_answer: str = ""
    not_owner_epoch: str = ""
    retry_seq: int | None = None
    marked_seq: int | None = None
    acknowledged: dict[str, int] = field(default_factory=dict)
    file_seqs: dict[str, list[int]] = field(default_factory=dict)
    verifies: bool = False
    findings: list[str] = field(default_factory=list)

    @property
    def acknowledged_after_deadline(self) -> bool:
        """Whether the paused owner acknowledged the marked record once resumed."""
        return self.old_owner_answer == "OK"

    @property
    def lost(self) -> list[str]:
        """Acknowledged records not in the file."""
        return [text for text in self.acknowledged if not self.file_seqs.get(text)]

    @property
    def duplicated(self) -> list[str]:
        """Acknowledged records in the file more than once."""
        return [text for text in self.acknowledged if len(self.file_seqs.get(text, [])) > 1]

    @property
    def misplaced(self) -> list[str]:
        """Acknowledged records found at another seq than their acknowledgement named."""
        return [
            text
            for text, seq in self.acknowledged.items()
            if self.file_seqs.get(text) and self.file_seqs[text] != [seq]
        ]

    @property
    def sound(self) -> bool:
        """Fencing held: nothing acknowledged late, the retry answered at the record's seq, no
        acknowledged record lost, repeated or misplaced, the session verifies."""
        return (
            self.old_owner_answer == grpc.StatusCode.UNAVAILABLE.name
            and self.not_owner_epoch != ""
            and self.retry_seq is not None
            and self.retry_seq == self.marked_seq
            and not self.lost
            and not self.duplicated
            and not self.misplaced
            and self.verifies
        )


def not_owner_epoch(error: grpc.aio.AioRpcError) -> str | None:
    """The ``epoch`` of an UNAVAILABLE NOT_OWNER answer's ErrorInfo; None for another error."""
    info = not_owner_metadata(error)
    return None if info is None else info["epoch"]


def _process_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (state T in /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] == "T"


class _Writer:
    def __init__(self, process: ServiceProcess) -> None:
        self.process = process
        self.address = process.address
        self.channel = grpc.aio.insecure_channel(process.address)
        self.stub = writer_pb2_grpc.RolloutWriterStub(self.channel)

    async def append(
        self, session_id: str, text: str, request_id: str, since: int, timeout: float = 30.0
    ) -> int:
        record = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))
        answer = await self.stub.Append(
            writer_pb2.AppendRequest(
                session_id=session_id, records=[record], request_id=request_id, request_since_seq=since
            ),
            timeout=timeout,
        )
        return int(answer.seqs[0])

    async def when_owned(self, call: str, *args: str | int) -> int:
        """``append(*args)`` (or CreateSession when ``call`` is "create"), again while this writer
        answers NOT_OWNER: it may not have indexed a shard etcd already shows it owns."""
        seq = -1

        async def done() -> bool:
            nonlocal seq
            try:
                if call == "create":
                    request = writer_pb2.CreateSessionRequest(session_id=str(args[0]))
                    await self.stub.CreateSession(request, timeout=30)
                else:
                    seq = await self.append(str(args[0]), str(args[1]), str(args[2]), int(args[3]))
            except grpc.aio.AioRpcError as error:
                if not_owner_epoch(error) is None:
                    raise
                return False
            return True

        await wait_until(done, f"{call} at {self.address}")
        return seq


def _start_writer(
    data_dir: Path, log: Path, etcd: str, cluster: str, ttl: int, env: dict[str, str] | None = None
) -> _Writer:
    return _Writer(
        start_cluster_writer(data_dir, log, etcd, cluster, SHARDS, "--lease-ttl", str(ttl), env=env)
    )


async def _owners(etcd: EtcdClient, keys: ClusterKeys) -> dict[int, str]:
    return {shard: address for shard, (address, _) in (await shard_owners(etcd, keys)).items()}


async def paused_owner_round(endpoints: str, root: Path, name: str, ttl: int = 2) -> PausedOwnerRound:
    """Run one round (module docstring) on the etcd at ``endpoints``, in folder ``root`` (its data
    root and logs), as cluster ``name``, writers' lease TTL ``ttl`` seconds. Every process it
    starts is stopped (resumed first) before it returns or raises."""
    result = PausedOwnerRound()
    data_dir, keys = root / "data", ClusterKeys(name)
    old = _start_writer(data_dir, root / "old.log", endpoints, name, ttl, {STOP_BEFORE_SYNC_ENV: MARKER})
    writers = [old]
    try:
        async with EtcdClient(endpoints) as etcd:
            await wait_until(
                lambda: _all_owned_by(etcd, keys, old.address), "the first writer owns every shard"
            )
            new = _start_writer(data_dir, root / "new.log", endpoints, name, ttl)
            writers.append(new)

            async def split() -> bool:
                held = list((await _owners(etcd, keys)).values())
                return held.count(old.address) == held.count(new.address) == SHARDS // 2

            await wait_until(split, "the shards split evenly between the two writers")
            held = await _owners(etcd, keys)
            shard = next(shard for shard, address in sorted(held.items()) if address == old.address)
            session_id = next(
                candidate
                for candidate in (str(uuid.uuid4()) for _ in range(100_000))
                if shard_of(candidate, SHARDS) == shard
            )
            await old.when_owned("create", session_id)
            for seq in (1, 2):
                result.acknowledged[f"before {seq}"] = await old.append(
                    session_id, f"before {seq}", f"before-{seq}", seq
                )
            paused = asyncio.create_task(
                old.append(session_id, MARKER, "marked", 3, timeout=PAUSED_CALL_TIMEOUT)
            )
            pid = old.process.process.pid
            await wait_until(lambda: _process_stopped(pid), "the old owner stopped between write and sync")

            async def taken() -> bool:
                return (await _owners(etcd, keys)).get(shard) == new.address

            await wait_until(taken, "the other writer owns the paused owner's shard")
            result.acknowledged["after takeover"] = await new.when_owned(
                "append", session_id, "after takeover", "after-takeover", 4
            )
            old.process.process.send_signal(signal.SIGCONT)
            try:
                marked_seq = await paused
            except grpc.aio.AioRpcError as error:
                result.old_owner_answer = error.code().name
                result.not_owner_epoch = not_owner_epoch(error) or ""
            else:
                result.old_owner_answer = "OK"
                result.acknowledged[MARKER] = marked_seq
            result.retry_seq = await new.append(session_id, MARKER, "marked", 3)
            result.acknowledged.setdefault(MARKER, result.retry_seq)
            result.acknowledged["last"] = await new.append(session_id, "last", "last", 5)
    finally:
        for writer in writers:
            if writer.process.process.poll() is None:
                writer.process.process.send_signal(signal.SIGCONT)
            await writer.channel.close()
        for writer in writers:
            await asyncio.to_thread(writer.process.stop)
    (path,) = data_dir.glob(f"shards/*/sessions/*{session_id}*.jsonl")
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        if record.get("type") == "message":
            result.file_seqs.setdefault(str(record["payload"].get("content")), []).append(int(record["seq"]))
    marked = result.file_seqs.get(MARKER)
    result.marked_seq = marked[0] if marked else None
    result.verifies, result.findings = verify_findings(verify_session(path))
    return result


async def _all_owned_by(etcd: EtcdClient, keys: ClusterKeys, address: str) -> bool:
    held = await _owners(etcd, keys)
    return len(held) == SHARDS and set(held.values()) == {address}
