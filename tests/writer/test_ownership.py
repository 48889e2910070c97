"""Shard ownership as the writer asks it (writer_service.ownership, docs/spec.md §7): before writing a batch,
after its durability, and the single-process default that owns every shard."""

from __future__ import annotations

import ast
import asyncio
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from rollout.v1 import records_pb2, writer_pb2
from shared.errors import NotOwnerError
from shared.reasons import NOT_OWNER, OWNER_ADDRESS, OWNER_EPOCH
from shared.session_meta import SessionSpec
from shared.shards import shard_of
from shared.status import _status_of
from shared.wire import append_payloads
from tests.data_roots import session_files
from writer_service.ownership import EMBEDDED_EPOCH, EmbeddedOwnership
from writer_service.sessions import SessionLedger, WriterConfig

REPO = Path(__file__).resolve().parents[2]
SHARDS = 4


def user(text: str) -> list:
    return append_payloads(
        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text)), 0
    )


def id_in_shard(shard: int) -> str:
    """A new session id whose shard (of :data:`SHARDS`) is ``shard``."""
    while True:
        session_id = str(uuid.uuid4())
        if shard_of(session_id, SHARDS) == shard:
            return session_id


class ScriptedOwnership:
    """Owns every shard at ``epoch``, except those in ``lost``; refuses acknowledgements of the
    shards in ``refused``; records every question (from any thread)."""

    def __init__(self, epoch: int = 7) -> None:
        self.epoch = epoch
        self.lost: set[int] = set()
        self.refused: set[int] = set()
        self.asked: list[tuple[str, int, float]] = []
        self._lock = threading.Lock()

    def owns(self, shard: int) -> int | None:
        with self._lock:
            self.asked.append(("owns", shard, 0.0))
        return None if shard in self.lost else self.epoch

    def may_acknowledge(self, shard: int, epoch: int, durable_at: float) -> bool:
        assert epoch == self.epoch
        with self._lock:
            self.asked.append(("may_acknowledge", shard, durable_at))
        return shard not in self.refused

    def owner_of(self, shard: int) -> tuple[str, int] | None:
        return (OTHER_WRITER, self.epoch + 1) if shard in self.lost else (OWN_ADDRESS, self.epoch)


#: The address ScriptedOwnership gives for itself, and for the owner of the shards it lost.
OWN_ADDRESS = "127.0.0.1:7001"
OTHER_WRITER = "10.0.0.9:7002"


def config(data_dir: Path) -> WriterConfig:
    return WriterConfig(data_dir=data_dir, shards=SHARDS)


def test_the_embedded_default_owns_every_shard_at_one_epoch_and_always_acknowledges() -> None:
    """EmbeddedOwnership answers epoch 1 for any shard and lets every batch be acknowledged."""
    ownership = EmbeddedOwnership()
    assert [ownership.owns(shard) for shard in (0, 17, 255, 65535)] == [EMBEDDED_EPOCH] * 4
    assert ownership.may_acknowledge(3, EMBEDDED_EPOCH, time.monotonic())


def test_each_batch_is_asked_for_before_its_write_and_after_its_durability(data_dir) -> None:
    """An append asks whether its shard is owned before the round, then whether it may be
    acknowledged, with a monotonic time taken after the sync and before the acknowledgement."""
    ownership = ScriptedOwnership()
    sid = id_in_shard(2)

    async def scenario() -> tuple[float, float]:
        ledger = SessionLedger(config(data_dir), ownership=ownership)
        try:
            await ledger.create_session(SessionSpec(session_id=sid))
            ownership.asked.clear()
            before = time.monotonic()
            await ledger.append(sid, [user("hello")])
            return before, time.monotonic()
        finally:
            await ledger.close()

    before, after = asyncio.run(scenario())
    kinds = [(kind, shard) for kind, shard, _ in ownership.asked]
    assert kinds == [("owns", 2), ("may_acknowledge", 2)]
    assert before <= ownership.asked[1][2] <= after


def test_a_refused_acknowledgement_fails_its_waiters_and_nothing_more_is_written_to_the_shard(
    data_dir,
) -> None:
    """A batch whose acknowledgement is refused fails with NotOwnerError (its bytes stay, never
    acknowledged); later appends to any session of that shard are refused without a write, while
    another shard's sessions are acknowledged as before."""
    ownership = ScriptedOwnership()
    fenced, other_in_shard, elsewhere = id_in_shard(1), id_in_shard(1), id_in_shard(3)

    async def scenario() -> tuple[dict[str, bytes], dict[str, bytes], list[int]]:
        ledger = SessionLedger(config(data_dir), ownership=ownership)
        try:
            for sid in (fenced, other_in_shard, elsewhere):
                await ledger.create_session(SessionSpec(session_id=sid))
            paths = {sid: ledger.root.locate(sid)[1] for sid in (fenced, other_in_shard)}
            ownership.refused.add(1)
            with pytest.raises(NotOwnerError) as caught:
                await ledger.append(fenced, [user("not acknowledged")])
            assert (caught.value.shard, caught.value.epoch) == (1, ownership.epoch)
            written = {sid: path.read_bytes() for sid, path in paths.items()}
            ownership.refused.clear()  # asked again it would say yes: the fence holds anyway
            for sid in (fenced, other_in_shard):
                with pytest.raises(NotOwnerError, match="nothing more is written"):
                    await ledger.append(sid, [user("refused before any write")])
            seqs, _ = await ledger.append(elsewhere, [user("acknowledged")])
            return written, {sid: path.read_bytes() for sid, path in paths.items()}, seqs
        finally:
            await ledger.close()

    written, after, seqs = asyncio.run(scenario())
    assert b"not acknowledged" in written[fenced]  # written and synced, never acknowledged
    assert after == written
    assert seqs == [1]


def test_a_session_created_as_ownership_ends_is_not_acknowledged(data_dir) -> None:
    """A CreateSession whose file became durable after its shard's ownership ended is refused
    (NotOwnerError, the file left unacknowledged), and the shard takes no other session after it."""
    ownership = ScriptedOwnership()
    ownership.refused.add(3)
    first, second = id_in_shard(3), id_in_shard(3)

    async def scenario() -> None:
        ledger = SessionLedger(config(data_dir), ownership=ownership)
        try:
            with pytest.raises(NotOwnerError, match="was not acknowledged") as caught:
                await ledger.create_session(SessionSpec(session_id=first))
            assert (caught.value.shard, caught.value.epoch) == (3, ownership.epoch)
            with pytest.raises(NotOwnerError, match="nothing more is written"):
                await ledger.create_session(SessionSpec(session_id=second))
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert [path.name.split("_")[2] for path in session_files(data_dir)] == [f"{first}.jsonl"]


def test_a_shard_that_is_not_owned_is_refused_before_anything_is_written(data_dir) -> None:
    """With its shard not owned, CreateSession writes no file and Append writes no line: both
    NotOwnerError without an epoch; another shard serves."""
    ownership = ScriptedOwnership()
    lost, kept = id_in_shard(0), id_in_shard(2)

    async def scenario() -> int:
        ledger = SessionLedger(config(data_dir), ownership=ownership)
        try:
            await ledger.create_session(SessionSpec(session_id=lost))
            path = ledger.root.locate(lost)[1]
            size = path.stat().st_size
            ownership.lost.add(0)
            with pytest.raises(NotOwnerError) as caught:
                await ledger.append(lost, [user("x")])
            assert (caught.value.shard, caught.value.epoch) == (0, ownership.epoch)
            assert caught.value.owner == (OTHER_WRITER, ownership.epoch + 1)  # where to go instead
            with pytest.raises(NotOwnerError) as refused:
                await ledger.create_session(SessionSpec(session_id=id_in_shard(0)))
            assert (refused.value.shard, refused.value.epoch) == (0, None)
            assert refused.value.owner == (OTHER_WRITER, ownership.epoch + 1)
            await ledger.create_session(SessionSpec(session_id=kept))
            assert path.stat().st_size == size
            return len(list(path.parent.glob("*.jsonl")))
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) == 1


def test_not_owner_is_unavailable_with_the_shard_and_epoch() -> None:
    """NotOwnerError maps to UNAVAILABLE (retryable) with ErrorInfo NOT_OWNER naming shard and epoch,
    and the owner's address and epoch, empty when unknown."""
    code, message, details = _status_of(NotOwnerError("shard 5 is not ours; retry", shard=5, epoch=9), "")
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "retry" in message
    (info,) = details
    assert isinstance(info, error_details_pb2.ErrorInfo)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        NOT_OWNER,
        "rollout-ledger",
        {"shard": "5", "epoch": "9", OWNER_ADDRESS: "", OWNER_EPOCH: ""},
    )
    redirect = NotOwnerError("shard 5 is not ours; retry", shard=5, owner=(OTHER_WRITER, 12))
    (info,) = _status_of(redirect, "")[2]
    assert isinstance(info, error_details_pb2.ErrorInfo)
    assert dict(info.metadata) == {"shard": "5", "epoch": "", OWNER_ADDRESS: OTHER_WRITER, OWNER_EPOCH: "12"}


@pytest.mark.parametrize("module", ["committer", "sessions", "server", "ownership", "importing"])
def test_the_write_path_never_imports_a_coordination_client(module: str) -> None:
    """The servicer, the ledger, the committer and the ownership seam import neither etcd's client
    nor the coordination package: ownership reaches them only through the Ownership interface."""
    tree = ast.parse((REPO / "writer_service" / f"{module}.py").read_text())
    imported = {
        name
        for node in ast.walk(tree)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert not {
        name for name in imported if name.startswith(("aetcd", "etcd", "writer_service.coordination"))
    }
