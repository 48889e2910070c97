"""A data root written by the version before shards (legacy_root/, made by its own writer) keeps
working as it is: one shard whose folder is the root, never migrated (shared.layout)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from tests.conftest import start_service

FIXTURE = Path(__file__).resolve().parent / "legacy_root"
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())
PAUSED = records_pb2.StopKind.Value("STOP_KIND_PAUSED")


@pytest.fixture
def legacy_dir(tmp_path: Path) -> Path:
    """The fixture root, unpacked: flat ``sessions/``, ``delegations/``, ``writer-state/``, a lock."""
    with tarfile.open(FIXTURE / "root.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "data"


@pytest.fixture
def services(
    legacy_dir: Path,
) -> Iterator[tuple[writer_pb2_grpc.RolloutWriterStub, reader_pb2_grpc.RolloutReaderStub]]:
    writer = start_service("writer", legacy_dir)
    reader = start_service("reader", legacy_dir)
    try:
        with grpc.insecure_channel(writer.address) as wc, grpc.insecure_channel(reader.address) as rc:
            yield writer_pb2_grpc.RolloutWriterStub(wc), reader_pb2_grpc.RolloutReaderStub(rc)
    finally:
        assert writer.stop() == 0
        reader.stop()


def newest_first() -> list[str]:
    """Every session of the fixture in listing order (the fork was made last, at its own time)."""
    older = [
        MANIFEST["director"],
        MANIFEST["child"],
        MANIFEST["open"],
        MANIFEST["completed"],
        *MANIFEST["small"],
    ]
    return [MANIFEST["fork"], *reversed(older)]


def walk(reader: reader_pb2_grpc.RolloutReaderStub, **filters: str) -> list[str]:
    seen: list[str] = []
    token = ""
    while True:
        page = reader.ListSessions(reader_pb2.ListSessionsRequest(page_size=5, page_token=token, **filters))
        seen += [summary.session_id for summary in page.sessions]
        token = page.next_page_token
        if not token:
            return seen


def test_replay_listing_and_lookups_read_the_legacy_root(services) -> None:
    """Replays verify, listings page with filters and cursors, delegations are found both ways."""
    _, reader = services
    assert walk(reader) == newest_first()
    assert walk(reader, tenant="beta") == [sid for sid in newest_first() if sid in _beta()]
    assert walk(reader, parent_session_id=MANIFEST["director"]) == [MANIFEST["child"]]
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=MANIFEST["director"]))
    assert [m.text for m in replay.messages] == [
        "You direct.",
        "Review the patch.",
        "",
        "looks fine",
        "Done.",
    ]
    for stopped in (MANIFEST["child"], MANIFEST["completed"]):
        verdict = reader.VerifySession(reader_pb2.VerifyRequest(session_id=stopped))
        assert verdict.ok, verdict
    (link,) = reader.FindDelegations(
        reader_pb2.FindDelegationsRequest(parent_session_id=MANIFEST["director"])
    ).delegations
    assert (link.child_session_id, link.delegation_id) == (MANIFEST["child"], "call_1")
    (back,) = reader.FindDelegations(
        reader_pb2.FindDelegationsRequest(child_session_id=MANIFEST["child"])
    ).delegations
    assert back.parent_session_id == MANIFEST["director"]


def _beta() -> set[str]:
    return {MANIFEST["completed"], *MANIFEST["small"][0::2]}


def test_append_stop_resume_fork_and_a_retried_request_work_and_stay_in_the_flat_layout(
    legacy_dir, services
) -> None:
    """The writer appends, stops, resumes and forks on the legacy root; a request the old writer
    acknowledged is answered from its file, not written again; new files go to the flat folder
    and no shard record or shard folder appears."""
    writer, reader = services
    open_id = MANIFEST["open"]
    earlier = MANIFEST["open_request"]
    retried = writer.Append(
        writer_pb2.AppendRequest(
            session_id=open_id,
            records=[
                writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="first")),
                writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="assistant", text="second")),
            ],
            request_id=earlier["request_id"],
            request_since_seq=1,
        )
    )
    assert (list(retried.seqs), retried.next_seq) == (earlier["seqs"], earlier["next_seq"])
    appended = writer.Append(
        writer_pb2.AppendRequest(
            session_id=open_id,
            records=[writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="third"))],
        )
    )
    assert list(appended.seqs) == [earlier["next_seq"]]
    stopped = writer.Stop(writer_pb2.StopRequest(session_id=open_id, stop_kind=PAUSED, reason="later"))
    assert stopped.message_count == 3
    assert reader.VerifySession(reader_pb2.VerifyRequest(session_id=open_id)).ok
    resumed = writer.Resume(writer_pb2.ResumeRequest(session_id=MANIFEST["child"]))
    assert resumed.next_seq > 0
    fork = writer.Fork(writer_pb2.ForkRequest(session_id=MANIFEST["director"], at_seq=4)).session_id
    created = writer.CreateSession(writer_pb2.CreateSessionRequest(tenant="beta")).session_id
    replay = reader.GetReplay(reader_pb2.ReplayRequest(session_id=fork))
    assert [m.text for m in replay.messages] == ["You direct.", "Review the patch.", "", "looks fine"]
    assert walk(reader)[:2] == [created, fork]
    assert len(list((legacy_dir / "sessions").glob(f"*{fork}*.jsonl"))) == 1
    assert len(list((legacy_dir / "sessions").glob(f"*{created}*.jsonl"))) == 1
    assert not (legacy_dir / "cluster.json").exists()
    assert not (legacy_dir / "shards").exists()
