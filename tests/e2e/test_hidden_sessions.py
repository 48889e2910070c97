"""A reader of a cluster that does not see a session's file yet (docs/cluster.md §5): on another
host of a shared volume a new file can stay out of view for tens of seconds, so the reader asks
the owner of the session's shard before it answers NOT_FOUND.

The other host's view is simulated by a reader over a second data root of the same shard count,
which lacks the files the writers make on the first: a session is hidden from it until its file
is copied over (the view catching up)."""

from __future__ import annotations

import shutil
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2, status_pb2
from prometheus_client.parser import text_string_to_metric_families

from rollout.v1 import reader_pb2, reader_pb2_grpc, writer_pb2, writer_pb2_grpc
from rollout_client import RetryPolicy, RolloutClient, delegation, user
from shared.layout import DataRoot
from shared.reasons import OWNER_ADDRESS, OWNER_UNREACHED, SESSION_NOT_VISIBLE
from shared.shards import create_cluster, shard_of
from tests.client.conftest import TEST_RETRY
from tests.conftest import start_service
from tests.e2e.secured import A, B, bearer, start_secured_pair, tls_arguments, tls_channel
from tests.e2e.static_cluster import StaticCluster, id_in_shard
from tests.ports import free_port
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


def start_reader(view: Path, *writers: str, metrics_port: int | None = None) -> ServiceProcess:
    """A reader over ``view``, asking ``writers`` (none: the files alone) about sessions it misses;
    its metrics at ``metrics_port`` when given."""
    extra = ("--writers", ",".join(writers)) if writers else ()
    metrics = ("--metrics-address", f"127.0.0.1:{metrics_port}") if metrics_port else ()
    return start_service("reader", view, "--no-search", *extra, *metrics)


def ask(reader: ServiceProcess, rpc: str, request: Any) -> Any:
    """``rpc`` of ``reader`` (unary): the answer, or the grpc.RpcError."""
    with grpc.insecure_channel(reader.address) as channel:
        try:
            return getattr(reader_pb2_grpc.RolloutReaderStub(channel), rpc)(request, timeout=60)
        except grpc.RpcError as error:
            return error


def stop_facts(reader: ServiceProcess, session_id: str) -> grpc.RpcError | reader_pb2.StopFacts:
    """GetStopFacts of ``session_id`` at ``reader``: the answer, or the error."""
    answer: grpc.RpcError | reader_pb2.StopFacts = ask(
        reader, "GetStopFacts", reader_pb2.StopFactsRequest(session_id=session_id)
    )
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
    (path,) = (cluster.data_dir / folder).glob(f"*_{session_id}*.jsonl")
    (view / folder).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, view / folder / path.name)


def seqs_of(cluster: StaticCluster, session_id: str) -> list[int]:
    """The seq of each line of a session's file as its writer wrote it."""
    folder = cluster.data_dir / f"shards/{shard_of(session_id, SHARDS):03d}/sessions"
    (path,) = folder.glob(f"*_{session_id}*.jsonl")
    return [orjson.loads(line)["seq"] for line in path.read_bytes().splitlines()]


def copy_markers_into_view(cluster: StaticCluster, view: Path, parent_id: str) -> None:
    """The view catches up with a parent's delegation markers (its shard's delegations folder)."""
    source = DataRoot(cluster.data_dir).delegations_folder(parent_id)
    shutil.copytree(source, DataRoot(view).delegations_folder(parent_id), dirs_exist_ok=True)


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


def children(answer: object) -> list[tuple[str, str, str]]:
    """(parent, delegation id, child) of each link of a FindDelegations answer."""
    assert isinstance(answer, reader_pb2.FindDelegationsResponse), answer
    return [
        (link.parent_session_id, link.delegation_id, link.child_session_id) for link in answer.delegations
    ]


def test_delegations_of_sessions_not_seen_are_not_visible_yet_never_left_out(
    cluster: StaticCluster, view: Path
) -> None:
    """A parent in the first writer's shards delegates to a child in the second's. While the
    reader sees neither file, FindDelegations from either is SESSION_NOT_VISIBLE naming its owner.
    Once the parent and its markers show but the child's file does not, the children list is
    refused the same way (naming the child's owner), not answered without the child; a marker
    whose child no writer holds (a creation that crashed before its file) is left out. Once the
    child shows, both directions answer. A reader given no writers answers from its files alone:
    NOT_FOUND, then a list without the child. A visible parent with no marker is an empty list."""
    parent_id, child_id, lonely_id = (id_in_shard(shard, SHARDS) for shard in (0, 1, 2))
    with RolloutClient(",".join(cluster.addresses), retry=TEST_RETRY) as client:
        parent = client.create_session("director", session_id=parent_id, root=True)
        with delegation(parent=parent, tool_call_id="call_fix"):
            client.create_session("coder", session_id=child_id)
        client.create_session("loner", session_id=lonely_id, root=True)
    reader = start_reader(view, cluster.addresses[0])
    alone = start_reader(view)
    by_parent = reader_pb2.FindDelegationsRequest(parent_session_id=parent_id)
    by_child = reader_pb2.FindDelegationsRequest(child_session_id=child_id)
    try:
        for request, owner in ((by_parent, parent_id), (by_child, child_id)):
            code, reason, metadata = refusal(ask(reader, "FindDelegations", request))
            assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, SESSION_NOT_VISIBLE), request
            assert metadata[OWNER_ADDRESS] == cluster.owner(owner)
            assert refusal(ask(alone, "FindDelegations", request))[0] is grpc.StatusCode.NOT_FOUND
        copy_into_view(cluster, view, parent_id)
        copy_markers_into_view(cluster, view, parent_id)
        crashed = id_in_shard(3, SHARDS)  # a marker whose child no writer holds
        DataRoot(view).delegation_marker(parent_id, "call_crashed", crashed).touch()
        code, reason, metadata = refusal(ask(reader, "FindDelegations", by_parent))
        assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, SESSION_NOT_VISIBLE)
        assert (metadata[OWNER_ADDRESS], metadata["shard"]) == (cluster.owner(child_id), "1")
        assert children(ask(alone, "FindDelegations", by_parent)) == []
        copy_into_view(cluster, view, child_id)
        expected = [(parent_id, "call_fix", child_id)]
        assert children(ask(reader, "FindDelegations", by_parent)) == expected
        assert children(ask(reader, "FindDelegations", by_child)) == expected
        copy_into_view(cluster, view, lonely_id)
        lonely = reader_pb2.FindDelegationsRequest(parent_session_id=lonely_id)
        assert children(ask(reader, "FindDelegations", lonely)) == []
    finally:
        reader.stop()
        alone.stop()


def resolved(reader: ServiceProcess, key: str) -> tuple[str, bool]:
    """(session id, found) of ResolveSession(``key``) at ``reader``."""
    answer = ask(reader, "ResolveSession", reader_pb2.ResolveSessionRequest(session_key=key))
    assert isinstance(answer, reader_pb2.ResolveSessionResponse), answer
    return answer.session_id, answer.found


def test_a_key_whose_session_the_owner_holds_resolves_as_found(cluster: StaticCluster, view: Path) -> None:
    """ResolveSession of a key (and of a session id given as the key) whose session the reader does
    not see but its owner holds: found, with that id, at once (the id is derived from the key, not
    read from the file). A key no writer holds: not found, as on one host. A reader given no
    writers: not found until the file shows."""
    with RolloutClient(",".join(cluster.addresses), retry=TEST_RETRY) as client:
        keyed = client.create_session("worker", session_key="nightly-build-7", root=True)
    reader = start_reader(view, cluster.addresses[1])
    alone = start_reader(view)
    try:
        assert resolved(reader, "nightly-build-7") == (keyed.id, True)
        assert resolved(reader, keyed.id) == (keyed.id, True)
        assert resolved(alone, "nightly-build-7") == (keyed.id, False)
        unknown_id, unknown_found = resolved(reader, "never-made")
        assert not unknown_found
        assert resolved(alone, "never-made") == (unknown_id, False)
        copy_into_view(cluster, view, keyed.id)
        assert resolved(alone, "nightly-build-7") == (keyed.id, True)
    finally:
        reader.stop()
        alone.stop()


def test_a_reader_whose_owners_are_gone_refuses_each_lookup_it_cannot_settle(
    cluster: StaticCluster, view: Path
) -> None:
    """No writer answers: FindDelegations of an unseen child and ResolveSession of a key whose
    session is not seen are OWNER_UNREACHED (retry); what the reader sees is answered without a
    question; GetMemories names no session and reads the memory store as this host sees it."""
    with RolloutClient(",".join(cluster.addresses), retry=TEST_RETRY) as client:
        seen = client.create_session("worker", session_key="seen-key", root=True)
    copy_into_view(cluster, view, seen.id)
    reader = start_reader(view, *cluster.addresses)
    try:
        cluster.stop()
        unseen = reader_pb2.FindDelegationsRequest(child_session_id=str(uuid.uuid4()))
        for answer in (
            ask(reader, "FindDelegations", unseen),
            ask(reader, "ResolveSession", reader_pb2.ResolveSessionRequest(session_key="unseen-key")),
        ):
            assert refusal(answer)[:2] == (grpc.StatusCode.UNAVAILABLE, OWNER_UNREACHED)
        assert resolved(reader, "seen-key") == (seen.id, True)
        visible = reader_pb2.FindDelegationsRequest(child_session_id=seen.id)
        assert children(ask(reader, "FindDelegations", visible)) == [("", "", seen.id)]
        memories = ask(reader, "GetMemories", reader_pb2.GetMemoriesRequest())
        assert isinstance(memories, reader_pb2.GetMemoriesResponse), memories
        assert list(memories.memories) == []
    finally:
        reader.stop()


def handled(metrics_port: int, method: str, code: str) -> float:
    """How many ``method`` calls the reader whose metrics are at ``metrics_port`` ended with ``code``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "grpc_server_handled_total"
        and sample.labels.get("grpc_method") == method
        and sample.labels.get("grpc_code") == code
    )


def test_a_watch_opened_before_the_file_shows_waits_for_it(cluster: StaticCluster, view: Path) -> None:
    """WatchSession of a session the reader does not see yet but its owner holds is UNAVAILABLE
    SESSION_NOT_VISIBLE, never NOT_FOUND: the SDK's watch, opened before the file shows, retries
    and then yields every record from seq 0 to the stop, once each."""
    with RolloutClient(",".join(cluster.addresses), retry=TEST_RETRY) as client:
        made = client.create_session("worker", session_id=id_in_shard(5, SHARDS), root=True)
        made.append(user("one"), user("two"))
        made.stop("completed", "done")
    metrics_port = free_port()
    reader = start_reader(view, cluster.addresses[0], metrics_port=metrics_port)
    patient = RetryPolicy(deadline=120.0, initial_backoff=0.05, max_backoff=0.5)
    try:
        with grpc.insecure_channel(reader.address) as channel:
            stream = reader_pb2_grpc.RolloutReaderStub(channel).WatchSession(
                reader_pb2.WatchSessionRequest(session_id=made.id), timeout=60
            )
            with pytest.raises(grpc.RpcError) as refused:
                next(iter(stream))
        code, reason, metadata = refusal(refused.value)
        assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, SESSION_NOT_VISIBLE)
        assert metadata[OWNER_ADDRESS] == cluster.owner(made.id)
        # The client closes before the pool waits for the watch: a failure here ends the watch.
        with (
            ThreadPoolExecutor(1) as pool,
            RolloutClient(",".join(cluster.addresses), reader.address, retry=patient) as client,
        ):
            watching = pool.submit(lambda: [record.seq for record in client.session(made.id).watch()])
            deadline = time.monotonic() + 120
            while handled(metrics_port, "WatchSession", "UNAVAILABLE") < 2:  # the watch's own refusal
                assert not watching.done(), watching.result()
                assert time.monotonic() < deadline, "the watch never asked the reader"
                time.sleep(0.05)
            copy_into_view(cluster, view, made.id)
            assert watching.result(timeout=240) == seqs_of(cluster, made.id)
    finally:
        reader.stop()
