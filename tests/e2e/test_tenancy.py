"""Tenant isolation and authentication end to end: a writer and a reader with TLS and the
bearer tokens of two tenants (real processes, certificates made here).

Every RPC of both services is walked from the service descriptors, so an RPC added later
fails these tests until it is given a request here (and so is checked)."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from rollout_client import PermissionDeniedError, RolloutClient
from shared.rounds import round_id
from tests.e2e.secured import (
    A_IMPORT,
    B_IMPORT,
    READER,
    WRITER,
    A,
    B,
    SecuredPair,
    call,
    every_method,
    local,
    refusal,
    start_secured_pair,
)

PAUSED = records_pb2.StopKind.Value("STOP_KIND_PAUSED")


def _user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def _child(parent: str, session_id: str = "") -> writer_pb2.CreateSessionRequest:
    return writer_pb2.CreateSessionRequest(
        session_id=session_id,
        agent_name="helper",
        parent_session_id=parent,
        delegation_id="call_9",
        role=writer_pb2.SESSION_ROLE_CHILD,
    )


#: For each RPC on a session: (the requests naming session ``sid``, the token of tenant b to send).
SESSION_REQUESTS: dict[str, Callable[[str], tuple[Any, str]]] = {
    "CreateSession": lambda sid: (_child(sid), B),
    "Append": lambda sid: (writer_pb2.AppendRequest(session_id=sid, records=[_user("hi")]), B),
    "AppendStream": lambda sid: ([writer_pb2.AppendRequest(session_id=sid, records=[_user("hi")])], B),
    "Stop": lambda sid: (writer_pb2.StopRequest(session_id=sid, stop_kind=PAUSED, reason="r"), B),
    "Resume": lambda sid: (writer_pb2.ResumeRequest(session_id=sid), B),
    "Fork": lambda sid: (writer_pb2.ForkRequest(session_id=sid, at_seq=1), B),
    "DeleteSession": lambda sid: (writer_pb2.DeleteSessionRequest(session_id=sid), B),
    "ImportSessions": lambda sid: (
        [
            writer_pb2.ImportSessionsRequest(create=_child(sid, str(uuid.uuid4()))),
            writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(stop_kind=PAUSED)),
        ],
        B_IMPORT,
    ),
    "GetReplay": lambda sid: (reader_pb2.ReplayRequest(session_id=sid), B),
    "StreamReplay": lambda sid: (reader_pb2.ReplayRequest(session_id=sid), B),
    "GetMemoryView": lambda sid: (reader_pb2.MemoryViewRequest(session_id=sid), B),
    "StreamMemoryView": lambda sid: (reader_pb2.MemoryViewRequest(session_id=sid), B),
    "VerifySession": lambda sid: (reader_pb2.VerifyRequest(session_id=sid), B),
    "GetStopFacts": lambda sid: (reader_pb2.StopFactsRequest(session_id=sid), B),
    "FindDelegations": lambda sid: (reader_pb2.FindDelegationsRequest(parent_session_id=sid), B),
    "WatchSession": lambda sid: (reader_pb2.WatchSessionRequest(session_id=sid), B),
    "GetRecentMessages": lambda sid: (reader_pb2.RecentMessagesRequest(session_id=sid), B),
    "ListRounds": lambda sid: (reader_pb2.ListRoundsRequest(session_id=sid), B),
    # The round of the user message at seq 1 (the session's first round).
    "GetRound": lambda sid: (reader_pb2.GetRoundRequest(session_id=sid, round_id=round_id(sid, 1)), B),
}
#: RPCs on no session: checked by their own tests below (GetShardMap holds only shard owners'
#: addresses, no session data: tests/e2e/test_routing.py; GetMemories and ResolveProvenance read
#: memory artifacts and ForgetMemories forgets them, in the caller's tenant's store only:
#: tests/memory/test_secured_tenancy.py).
NOT_ON_A_SESSION = {
    "ListSessions",
    "ResolveSession",
    "ListPendingRounds",
    "GetShardMap",
    "SearchSessions",
    "GetMemories",
    "ResolveProvenance",
    "ForgetMemories",
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[SecuredPair]:
    started = start_secured_pair(tmp_path_factory.mktemp("secured"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def channels(pair) -> Iterator[dict[str, grpc.Channel]]:
    writer, reader = pair.channels()
    yield {WRITER.full_name: writer, READER.full_name: reader}
    writer.close()
    reader.close()


def _session_of_a(channels: dict[str, grpc.Channel]) -> str:
    """A session of tenant a holding a user message and a child (so every RPC has something to find)."""
    writer = channels[WRITER.full_name]
    create = WRITER.methods_by_name["CreateSession"]
    (created,) = call(writer, create, writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT), A)
    append = WRITER.methods_by_name["Append"]
    call(
        writer, append, writer_pb2.AppendRequest(session_id=created.session_id, records=[_user("secret")]), A
    )
    call(writer, create, _child(created.session_id), A)
    return str(created.session_id)


def _same_answer(error: grpc.RpcError, other: grpc.RpcError, ids: tuple[str, str]) -> bool:
    return error.code() == other.code() and error.details().replace(
        ids[0], "<id>"
    ) == other.details().replace(ids[1], "<id>")


def test_every_rpc_is_walked() -> None:
    """Every RPC of both services is covered by the isolation walk or a test of its own."""
    assert {method.name for method in every_method()} == set(SESSION_REQUESTS) | NOT_ON_A_SESSION


@pytest.mark.parametrize("rpc", sorted(SESSION_REQUESTS))
def test_another_tenants_session_is_answered_as_one_that_does_not_exist(channels, rpc) -> None:
    """Tenant b's call on tenant a's session gets exactly the answer of a call on an id that does
    not exist (NOT_FOUND, or for a child naming it as its parent INVALID_ARGUMENT), while tenant a's
    own call on it reaches the session."""
    method = next(method for method in every_method() if method.name == rpc)
    channel = channels[method.containing_service.full_name]
    target, absent = _session_of_a(channels), str(uuid.uuid4())
    requests, token = SESSION_REQUESTS[rpc](target)
    seen = refusal(channel, method, requests, token)
    unknown = refusal(channel, method, SESSION_REQUESTS[rpc](absent)[0], token)
    assert seen.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), seen.details()
    assert _same_answer(seen, unknown, (target, absent)), (seen.details(), unknown.details())
    assert (
        target not in seen.details() or "not found" in seen.details() or "names no session" in seen.details()
    )
    owner = _outcome(channel, method, requests, A_IMPORT if token == B_IMPORT else A)
    assert owner not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


def _outcome(channel: grpc.Channel, method, requests: Any, token: str) -> grpc.StatusCode:
    """The status code a call ends with (OK when it succeeds)."""
    try:
        call(channel, method, requests, token)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_listings_show_only_the_callers_tenant(channels) -> None:
    """Tenant b never sees a's sessions listed; a filter naming another tenant is PERMISSION_DENIED;
    a's own listing has them, recorded under a even when the request named no tenant."""
    target = _session_of_a(channels)
    reader = channels[READER.full_name]
    listing = READER.methods_by_name["ListSessions"]
    writer = channels[WRITER.full_name]
    (own,) = call(writer, WRITER.methods_by_name["CreateSession"], writer_pb2.CreateSessionRequest(), B)

    def listed(token: str, tenant: str = "") -> dict[str, str]:
        (page,) = call(reader, listing, reader_pb2.ListSessionsRequest(page_size=1000, tenant=tenant), token)
        return {summary.session_id: summary.tenant for summary in page.sessions}

    seen_by_b = listed(B) | listed(B, tenant="b")
    assert own.session_id in seen_by_b
    assert target not in seen_by_b
    assert set(seen_by_b.values()) == {"b"}
    denied = refusal(reader, listing, reader_pb2.ListSessionsRequest(tenant="a"), B)
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert listed(A)[target] == "a"


def test_a_search_finds_only_the_callers_tenants_sessions(channels) -> None:
    """Tenant b searching for a word only a's session holds finds nothing, and a does find it; a
    search naming another tenant is PERMISSION_DENIED."""
    writer, reader = channels[WRITER.full_name], channels[READER.full_name]
    word = f"zq{uuid.uuid4().hex}"
    (created,) = call(writer, WRITER.methods_by_name["CreateSession"], writer_pb2.CreateSessionRequest(), A)
    (appended,) = call(
        writer,
        WRITER.methods_by_name["Append"],
        writer_pb2.AppendRequest(session_id=created.session_id, records=[_user(f"the word {word}")]),
        A,
    )
    search = READER.methods_by_name["SearchSessions"]
    give_up = time.monotonic() + 60  # the index follows the file on its own thread
    while True:
        (page,) = call(reader, search, reader_pb2.SearchSessionsRequest(query=word), A)
        if page.hits or time.monotonic() > give_up:
            break
        time.sleep(0.02)
    assert [(hit.session_id, hit.tenant) for hit in page.hits] == [(created.session_id, "a")]
    assert [match.seq for match in page.hits[0].matches] == list(appended.seqs)
    (theirs,) = call(reader, search, reader_pb2.SearchSessionsRequest(query=word), B)
    assert not theirs.hits
    denied = refusal(reader, search, reader_pb2.SearchSessionsRequest(query=word, tenant="a"), B)
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED


def test_pending_rounds_show_only_the_callers_tenant(channels) -> None:
    """ListPendingRounds: once tenant a's open session has gone a second without an append, a
    sees its pending round; b never does, and naming tenant a is PERMISSION_DENIED for b."""
    target = _session_of_a(channels)
    reader = channels[READER.full_name]
    method = READER.methods_by_name["ListPendingRounds"]

    def listed(token: str) -> set[str]:
        (reply,) = call(reader, method, reader_pb2.ListPendingRoundsRequest(idle_seconds=1), token)
        return {pending.session_id for pending in reply.rounds}

    woken = threading.Event()
    for _ in range(2400):  # waits on the condition: a's session idle for a second (about 2 min at most)
        if target in listed(A):
            break
        woken.wait(0.05)
    assert target in listed(A)
    assert target not in listed(B)
    denied = refusal(reader, method, reader_pb2.ListPendingRoundsRequest(tenant="a"), B)
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_round_id_alone_finds_only_the_callers_rounds(channels) -> None:
    """GetRound by round id alone: tenant a reads its round (held by 1 session); for b the same id
    is NOT_FOUND with exactly the answer of a round id that no session holds."""
    target = _session_of_a(channels)
    reader = channels[READER.full_name]
    method = READER.methods_by_name["GetRound"]
    first = round_id(target, 1)
    (own,) = call(reader, method, reader_pb2.GetRoundRequest(round_id=first), A)
    assert (own.held_by, own.session_id) == (1, target)
    seen = refusal(reader, method, reader_pb2.GetRoundRequest(round_id=first), B)
    absent = round_id(str(uuid.uuid4()), 1)
    unknown = refusal(reader, method, reader_pb2.GetRoundRequest(round_id=absent), B)
    assert seen.code() == grpc.StatusCode.NOT_FOUND
    assert _same_answer(seen, unknown, (first, absent)), (seen.details(), unknown.details())


def test_a_round_held_through_a_deleted_fork_stays_the_callers_alone(channels) -> None:
    """Tenant a's round is copied by a fork of a fork whose middle is then deleted: for a it is held
    by the source and the last fork (the walk goes through the deletion record); for b the id is
    NOT_FOUND, by id alone and named in b's own session, exactly as an id no session holds."""
    target = _session_of_a(channels)
    writer, reader = channels[WRITER.full_name], channels[READER.full_name]
    fork = WRITER.methods_by_name["Fork"]
    (middle,) = call(writer, fork, writer_pb2.ForkRequest(session_id=target, at_seq=1), A)
    (last,) = call(writer, fork, writer_pb2.ForkRequest(session_id=middle.session_id, at_seq=1), A)
    delete = WRITER.methods_by_name["DeleteSession"]
    call(writer, delete, writer_pb2.DeleteSessionRequest(session_id=middle.session_id), A)
    method = READER.methods_by_name["GetRound"]
    first = round_id(target, 1)
    (own,) = call(reader, method, reader_pb2.GetRoundRequest(round_id=first, session_id=last.session_id), A)
    assert (own.held_by, own.session_id) == (2, last.session_id)
    create = WRITER.methods_by_name["CreateSession"]
    (theirs,) = call(writer, create, writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT), B)
    absent = round_id(str(uuid.uuid4()), 1)
    for session_id in ("", theirs.session_id):
        seen = refusal(reader, method, reader_pb2.GetRoundRequest(round_id=first, session_id=session_id), B)
        unknown = refusal(
            reader, method, reader_pb2.GetRoundRequest(round_id=absent, session_id=session_id), B
        )
        assert seen.code() == grpc.StatusCode.NOT_FOUND
        assert _same_answer(seen, unknown, (first, absent)), (seen.details(), unknown.details())


def test_a_key_names_a_session_of_the_callers_tenant_only(channels) -> None:
    """The same session key names two sessions for tenants a and b; b resolving a's session id, or a's
    key, finds nothing of a's (ResolveSession answers found=false, as for an absent session)."""
    writer, reader = channels[WRITER.full_name], channels[READER.full_name]
    create, resolve = WRITER.methods_by_name["CreateSession"], READER.methods_by_name["ResolveSession"]
    (mine,) = call(
        writer, create, writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT, session_key="k"), A
    )
    (theirs,) = call(
        writer, create, writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT, session_key="k"), B
    )
    assert mine.session_id != theirs.session_id
    (found,) = call(reader, resolve, reader_pb2.ResolveSessionRequest(session_key="k"), A)
    assert (found.session_id, found.found) == (mine.session_id, True)
    (by_id,) = call(reader, resolve, reader_pb2.ResolveSessionRequest(session_key=mine.session_id), B)
    assert not by_id.found
    assert by_id.session_id != mine.session_id


def test_a_fork_and_a_child_stay_in_their_tenant(channels) -> None:
    """A fork and a child of tenant a's session belong to a: b cannot see them, a can."""
    target = _session_of_a(channels)
    writer, reader = channels[WRITER.full_name], channels[READER.full_name]
    (fork,) = call(
        writer, WRITER.methods_by_name["Fork"], writer_pb2.ForkRequest(session_id=target, at_seq=1), A
    )
    (links,) = call(
        reader,
        READER.methods_by_name["FindDelegations"],
        reader_pb2.FindDelegationsRequest(parent_session_id=target),
        A,
    )
    (child,) = [link.child_session_id for link in links.delegations]
    facts = READER.methods_by_name["GetStopFacts"]
    for session_id in (fork.session_id, child):
        assert refusal(reader, facts, reader_pb2.StopFactsRequest(session_id=session_id), B).code() == (
            grpc.StatusCode.NOT_FOUND
        )
        call(reader, facts, reader_pb2.StopFactsRequest(session_id=session_id), A)
    (page,) = call(
        reader, READER.methods_by_name["ListSessions"], reader_pb2.ListSessionsRequest(page_size=1000), A
    )
    tenants = {summary.session_id: summary.tenant for summary in page.sessions}
    assert tenants[fork.session_id] == tenants[child] == "a"


def test_a_session_created_for_another_tenant_is_refused(channels) -> None:
    """CreateSession naming another tenant than the token's is PERMISSION_DENIED."""
    create = WRITER.methods_by_name["CreateSession"]
    error = refusal(channels[WRITER.full_name], create, writer_pb2.CreateSessionRequest(tenant="a"), B)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "tenant" in error.details()


def test_source_times_and_imports_are_for_importers_only(channels) -> None:
    """A token not marked as an importer gets PERMISSION_DENIED for AppendRecord.ts, StopRequest.ts
    and ImportSessions; an importer token of the same tenant may set them."""
    writer = channels[WRITER.full_name]
    (created,) = call(writer, WRITER.methods_by_name["CreateSession"], writer_pb2.CreateSessionRequest(), B)
    record = writer_pb2.AppendRecord(
        message=records_pb2.ChatMessage(role="user", text="x"), ts="2026-01-02T03:04:05Z"
    )
    append = writer_pb2.AppendRequest(session_id=created.session_id, records=[record])
    stop = writer_pb2.StopRequest(session_id=created.session_id, stop_kind=PAUSED, ts="2026-01-02T03:04:06Z")
    importing = [
        writer_pb2.ImportSessionsRequest(create=writer_pb2.CreateSessionRequest(session_id=str(uuid.uuid4())))
    ]
    for rpc, requests, field in (
        ("Append", append, "records[0].ts"),
        ("Stop", stop, "ts"),
        ("ImportSessions", importing, "ImportSessions"),
    ):
        error = refusal(writer, WRITER.methods_by_name[rpc], requests, B)
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
        assert error.details().startswith(f"{field}: only importers may")
    (appended,) = call(writer, WRITER.methods_by_name["Append"], append, B_IMPORT)
    assert list(appended.seqs) == [1]
    call(writer, WRITER.methods_by_name["Stop"], stop, B_IMPORT)


@pytest.mark.parametrize("token", [None, "tok-nobody-1234"], ids=["no token", "unknown token"])
def test_without_a_valid_token_every_rpc_is_unauthenticated(channels, token) -> None:
    """No token, or one not in the file: UNAUTHENTICATED for every RPC of both services and for
    server reflection (v1 and v1alpha), before any request is looked at."""
    for method in every_method():
        channel = channels[method.containing_service.full_name]
        request = GetMessageClass(method.input_type)()
        error = refusal(channel, method, [request] if method.client_streaming else request, token)
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, (method.name, error.details())
    for service in ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"):
        info = channels[WRITER.full_name].stream_stream(
            f"/{service}/ServerReflectionInfo",
            reflection_pb2.ServerReflectionRequest.SerializeToString,
            reflection_pb2.ServerReflectionResponse.FromString,
        )
        metadata = () if token is None else (("authorization", f"Bearer {token}"),)
        with pytest.raises(grpc.RpcError) as caught:
            list(info(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=metadata))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_health_answers_without_a_token(channels) -> None:
    """Health checking stays open on both services: SERVING without any token."""
    for service in (WRITER, READER):
        stub = health_pb2_grpc.HealthStub(channels[service.full_name])
        answer = stub.Check(health_pb2.HealthCheckRequest(service=service.full_name), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_a_plaintext_client_cannot_talk_to_a_tls_port(pair) -> None:
    """A client without TLS gets no answer from either TLS port (UNAVAILABLE), even for health."""
    for process in (pair.writer, pair.reader):
        with grpc.insecure_channel(process.address) as channel:
            with pytest.raises(grpc.RpcError) as caught:
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_python_client_works_with_tls_and_a_token(pair) -> None:
    """rollout_client with token= and tls_ca= creates, appends, replays and lists in its tenant, and
    gets PERMISSION_DENIED for a listing filter naming another tenant."""
    writer, reader = local(pair.writer.address), local(pair.reader.address)
    with RolloutClient(writer, reader, token=A, tls_ca=pair.certificates.ca_file) as client:
        session = client.create_session(root=True)
        session.append({"role": "user", "content": "hello over TLS"})
        replay = session.replay()
        assert [message["content"] for message in replay.messages] == ["hello over TLS"]
        (page, *_) = client.list_sessions(page_size=1000)
        assert session.id in {summary.session_id for summary in page.sessions}
        assert {summary.tenant for summary in page.sessions} == {"a"}
        with pytest.raises(PermissionDeniedError):
            next(iter(client.list_sessions(tenant="b")))


def test_a_deleted_session_stays_another_tenants_and_its_audit_names_the_token(pair, channels) -> None:
    """Tenant b deleting a's session is NOT_FOUND before and after a deletes it (exactly as an
    unknown id); a's retried delete answers already_deleted; the deletion record names a's tenant
    and the start of a's token digest, never the token."""
    writer = channels[WRITER.full_name]
    delete = WRITER.methods_by_name["DeleteSession"]
    target = _session_of_a(channels)
    (deleted,) = call(writer, delete, writer_pb2.DeleteSessionRequest(session_id=target), A)
    assert not deleted.already_deleted
    absent = str(uuid.uuid4())
    seen = refusal(writer, delete, writer_pb2.DeleteSessionRequest(session_id=target), B)
    unknown = refusal(writer, delete, writer_pb2.DeleteSessionRequest(session_id=absent), B)
    assert seen.code() == grpc.StatusCode.NOT_FOUND
    assert _same_answer(seen, unknown, (target, absent))
    (again,) = call(writer, delete, writer_pb2.DeleteSessionRequest(session_id=target), A)
    assert (again.already_deleted, again.deleted_at) == (True, deleted.deleted_at)
    data_dir = pair.tokens_file.parent / "data"
    records = [
        orjson.loads(line)
        for path in data_dir.rglob("deletions.jsonl")
        for line in path.read_bytes().splitlines()
    ]
    (record,) = [record for record in records if record["session_id"] == target]
    digest = hashlib.blake2b(A.encode(), digest_size=32).hexdigest()
    assert record["tenant"] == "a"
    assert record["deleted_by"] == f"token:{digest[:12]}"
    assert A not in str(records)
