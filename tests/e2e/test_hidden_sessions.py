"""A reader of a cluster that does not see a session's file yet (docs/cluster.md §5): on another
host of a shared volume a new file can stay out of view for tens of seconds, so the reader asks
the owner of the session's shard before it answers NOT_FOUND.

The other host's view is simulated by a reader over a second data root of the same shard count,
which lacks the files the writers make on the first: a session is hidden from it until its file
is copied over (the view catching up)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from rollout.v1 import reader_pb2, reader_pb2_grpc, writer_pb2, writer_pb2_grpc
from rollout_client import RolloutClient, user
from shared.layout import DataRoot
from shared.reasons import OWNER_ADDRESS, OWNER_UNREACHED, SESSION_NOT_VISIBLE
from shared.shards import create_cluster, shard_of
from tests.client.conftest import TEST_RETRY
from tests.conftest import start_service
from tests.e2e.secured import A, B, bearer, start_secured_pair, tls_arguments, tls_channel
from tests.e2e.static_cluster import StaticCluster, id_in_shard
from tests.processes import ServiceProcess

SHARDS = 16


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StaticCluster]:
    """Two writers on one root of 16 shards: even shards to the first, odd to the second."""
    made = StaticCluster.create(tmp_path, writers=2, shards=SHARDS)
    made.start()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def view(tmp_path: Path) -> Path:
    """Another host's view of the cluster's data root: same shard count, none of its files yet."""
    root = tmp_path / "view"
    root.mkdir()
    create_cluster(root, SHARDS)
    return root


def start_reader(view: Path, *writers: str) -> ServiceProcess:
    """A reader over ``view``, asking ``writers`` (none: the files alone) about sessions it misses."""
    extra = ("--writers", ",".join(writers)) if writers else ()
    return start_service("reader", view, "--no-search", *extra)


def stop_facts(reader: ServiceProcess, session_id: str) -> grpc.RpcError | reader_pb2.StopFacts:
    """GetStopFacts of ``session_id`` at ``reader``: the answer, or the error."""
    with grpc.insecure_channel(reader.address) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)
        try:
            answer: reader_pb2.StopFacts = stub.GetStopFacts(
                reader_pb2.StopFactsRequest(session_id=session_id), timeout=60
            )
        except grpc.RpcError as error:
            return error
        return answer


def refusal(answer: object) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    """(code, ErrorInfo reason, its metadata) of a refused call ("" and {} without an ErrorInfo)."""
    assert isinstance(answer, grpc.RpcError), f"answered {answer}"
    for key, value in answer.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return answer.code(), info.reason, dict(info.metadata)
    return answer.code(), "", {}


def copy_into_view(cluster: StaticCluster, view: Path, session_id: str) -> None:
    """The view catches up: the session's file shows there."""
    folder = f"shards/{shard_of(session_id, SHARDS):03d}/sessions"
    (path,) = (cluster.data_dir / folder).glob(f"*_{session_id}.jsonl")
    (view / folder).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, view / folder / path.name)


def test_a_session_the_owner_holds_is_unavailable_not_not_found(cluster: StaticCluster, view: Path) -> None:
    """Sessions of both writers' shards, hidden from the reader's view: UNAVAILABLE
    SESSION_NOT_VISIBLE naming the owner (the reader was given the first writer only: the owner of
    the other's shards comes from its map); an id no writer holds is NOT_FOUND; once the file
    shows in the view, the session is served. A reader given no writers answers NOT_FOUND, as
    before."""
    with RolloutClient(",".join(cluster.addresses), retry=TEST_RETRY) as client:
        sessions = [
            client.create_session(session_id=id_in_shard(shard, SHARDS), root=True) for shard in (0, 1)
        ]
        for session in sessions:
            session.append(user("acknowledged before the view shows the file"))
    reader = start_reader(view, cluster.addresses[0])
    alone = start_reader(view)
    try:
        for session in sessions:
            code, reason, metadata = refusal(stop_facts(reader, session.id))
            assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, SESSION_NOT_VISIBLE)
            assert metadata[OWNER_ADDRESS] == cluster.owner(session.id)
            assert metadata["shard"] == str(shard_of(session.id, SHARDS))
            assert refusal(stop_facts(alone, session.id))[0] is grpc.StatusCode.NOT_FOUND
        assert refusal(stop_facts(reader, str(uuid.uuid4())))[0] is grpc.StatusCode.NOT_FOUND
        for session in sessions:
            copy_into_view(cluster, view, session.id)
            answer = stop_facts(reader, session.id)
            assert isinstance(answer, reader_pb2.StopFacts), answer
            assert answer.session_id == session.id
    finally:
        reader.stop()
        alone.stop()


def test_a_reader_that_can_ask_no_owner_does_not_answer_not_found(cluster: StaticCluster, view: Path) -> None:
    """The writers are gone: a session the reader does not see may exist, so it is UNAVAILABLE
    OWNER_UNREACHED (retry), not NOT_FOUND; a session whose file it sees is served as ever."""
    with RolloutClient(",".join(cluster.addresses), retry=TEST_RETRY) as client:
        seen = client.create_session(session_id=id_in_shard(2, SHARDS), root=True)
        seen.append(user("visible"))
    copy_into_view(cluster, view, seen.id)
    reader = start_reader(view, *cluster.addresses)
    try:
        cluster.stop()
        code, reason, _ = refusal(stop_facts(reader, str(uuid.uuid4())))
        assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, OWNER_UNREACHED)
        answer = stop_facts(reader, seen.id)
        assert isinstance(answer, reader_pb2.StopFacts), answer
    finally:
        reader.stop()


def test_the_owner_is_asked_as_the_caller_so_another_tenant_learns_nothing(tmp_path: Path) -> None:
    """With TLS and bearer tokens: the reader passes the caller's token on to the owner, whose
    tenancy check answers for that caller. Tenant a is told its hidden session is not visible yet;
    tenant b is told NOT_FOUND, exactly as for an id that does not exist."""
    pair = start_secured_pair(tmp_path)
    try:
        shards = DataRoot(tmp_path / "data").shards
        view = tmp_path / "view"
        view.mkdir()
        create_cluster(view, shards)
        arguments = tls_arguments(pair.certificates, "--auth-tokens", str(pair.tokens_file))
        reader = start_service(
            "reader",
            view,
            "--no-search",
            "--writers",
            pair.writer.address,
            "--writers-tls-ca",
            str(pair.certificates.ca_file),
            *arguments,
        )
        try:
            with tls_channel(pair.writer.address, pair.certificates) as channel:
                made = writer_pb2_grpc.RolloutWriterStub(channel).CreateSession(
                    writer_pb2.CreateSessionRequest(session_id=str(uuid.uuid4())),
                    metadata=bearer(A),
                    timeout=60,
                )
            with tls_channel(reader.address, pair.certificates) as channel:
                stub = reader_pb2_grpc.RolloutReaderStub(channel)
                answers = {}
                for token in (A, B):
                    with pytest.raises(grpc.RpcError) as refused:
                        stub.GetStopFacts(
                            reader_pb2.StopFactsRequest(session_id=made.session_id),
                            metadata=bearer(token),
                            timeout=60,
                        )
                    answers[token] = refusal(refused.value)[:2]
            assert answers == {
                A: (grpc.StatusCode.UNAVAILABLE, SESSION_NOT_VISIBLE),
                B: (grpc.StatusCode.NOT_FOUND, ""),
            }
        finally:
            reader.stop()
    finally:
        pair.stop()
