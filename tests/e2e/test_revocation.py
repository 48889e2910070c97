"""Revoking a token ends what it opened: once the token file no longer holds a token and the
service has re-read it (SIGHUP), every stream that token opened ends with UNAUTHENTICATED and
delivers nothing more, on both services and in every call shape; the streams of a token that
stays valid go on (real processes, plaintext on loopback)."""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Iterator

import grpc
import pytest

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from tests.conftest import ServiceProcess, start_service
from tests.data_roots import session_file, session_files
from tests.e2e.secured import bearer, write_tokens

REVOKED, KEPT = "tok-revoked-5e1f", "tok-kept-77a0"
REVOKED_IMPORT, KEPT_IMPORT = "tok-revoked-import-0c3d", "tok-kept-import-9b12"
TOKENS = {
    REVOKED: "a",
    KEPT: "a",
    REVOKED_IMPORT: {"tenant": "a", "importer": True},
    KEPT_IMPORT: {"tenant": "a", "importer": True},
}
PAUSED = records_pb2.StopKind.Value("STOP_KIND_PAUSED")
#: Generous limit for anything a test waits on (the suite may run beside a loaded machine).
WAIT_SECONDS = 60


def _user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def revoke(service: ServiceProcess, tokens_file, *revoked: str) -> None:
    """Rewrite the token file without ``revoked``, SIGHUP the service and wait until it has re-read it."""
    write_tokens(tokens_file, {token: tenant for token, tenant in TOKENS.items() if token not in revoked})
    marker = "auth tokens reloaded"
    before = service.log().count(marker)
    service.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + WAIT_SECONDS
    while service.log().count(marker) == before:
        assert time.monotonic() < deadline, f"the {service} never re-read its tokens"
        time.sleep(0.02)


@pytest.fixture
def pair(tmp_path, data_dir) -> Iterator[tuple[ServiceProcess, ServiceProcess, object]]:
    tokens_file = write_tokens(tmp_path / "tokens.json", TOKENS)
    writer = start_service("writer", data_dir, "--auth-tokens", str(tokens_file))
    try:
        reader = start_service("reader", data_dir, "--auth-tokens", str(tokens_file))
    except BaseException:
        writer.stop()
        raise
    yield writer, reader, tokens_file
    writer.stop()
    reader.stop()


def next_or_error(stream: Iterator) -> object:
    """The stream's next response, or the error it ended with."""
    try:
        return next(stream)
    except grpc.RpcError as error:
        return error


def _seqs(response: reader_pb2.WatchSessionResponse) -> list[int]:
    return [record.seq for record in response.records]


def test_a_revoked_token_ends_its_watch_and_a_kept_one_goes_on(pair) -> None:
    """Two WatchSessions of one session, one per token: after the first token is revoked (file
    rewritten, SIGHUP to the reader) and a record appended, its watch ends UNAUTHENTICATED without
    that record, and the other watch receives it."""
    writer, reader, tokens_file = pair
    with grpc.insecure_channel(writer.address) as w, grpc.insecure_channel(reader.address) as r:
        appends = writer_pb2_grpc.RolloutWriterStub(w)
        sid = appends.CreateSession(writer_pb2.CreateSessionRequest(), metadata=bearer(KEPT)).session_id
        appends.Append(
            writer_pb2.AppendRequest(session_id=sid, records=[_user("before")]), metadata=bearer(KEPT)
        )
        watches = reader_pb2_grpc.RolloutReaderStub(r)
        request = reader_pb2.WatchSessionRequest(session_id=sid)
        revoked = watches.WatchSession(request, metadata=bearer(REVOKED), timeout=WAIT_SECONDS)
        kept = watches.WatchSession(request, metadata=bearer(KEPT), timeout=WAIT_SECONDS)
        for stream in (revoked, kept):
            seen: list[int] = []
            while 1 not in seen:
                seen += _seqs(next(stream))
        revoke(reader, tokens_file, REVOKED)
        appends.Append(
            writer_pb2.AppendRequest(session_id=sid, records=[_user("after")]), metadata=bearer(KEPT)
        )
        assert _seqs(next(kept)) == [2], "the watch of a token still valid goes on"
        ended = next_or_error(revoked)
        assert isinstance(ended, grpc.RpcError), (
            f"the revoked token's watch delivered {ended} after the reload"
        )
        assert ended.code() == grpc.StatusCode.UNAUTHENTICATED, ended.details()
        assert "no longer" in ended.details()
        kept.cancel()
    assert "UNAUTHENTICATED" in reader.log()


def test_a_revoked_token_ends_its_stream_replay_before_its_end(pair) -> None:
    """A StreamReplay of a 40 MB session whose client has read its first chunk ends UNAUTHENTICATED
    once its token is revoked, before the replay's last message; the same replay with a kept token
    reads to the end."""
    writer, reader, tokens_file = pair
    records = 40
    with grpc.insecure_channel(writer.address) as w, grpc.insecure_channel(reader.address) as r:
        appends = writer_pb2_grpc.RolloutWriterStub(w)
        sid = appends.CreateSession(writer_pb2.CreateSessionRequest(), metadata=bearer(KEPT)).session_id
        for n in range(records):
            appends.Append(
                writer_pb2.AppendRequest(session_id=sid, records=[_user(f"{n} " + "x" * 1_000_000)]),
                metadata=bearer(KEPT),
            )
        replays = reader_pb2_grpc.RolloutReaderStub(r)
        request = reader_pb2.ReplayRequest(session_id=sid)
        revoked = replays.StreamReplay(request, metadata=bearer(REVOKED), timeout=WAIT_SECONDS)
        kept = replays.StreamReplay(request, metadata=bearer(KEPT), timeout=WAIT_SECONDS)
        received = len(next(revoked).messages)
        received_kept = len(next(kept).messages)
        revoke(reader, tokens_file, REVOKED)
        while not isinstance(outcome := next_or_error(revoked), grpc.RpcError):
            received += len(outcome.messages)
        assert outcome.code() == grpc.StatusCode.UNAUTHENTICATED, outcome.details()
        assert received < records
        received_kept += sum(len(chunk.messages) for chunk in kept)
        assert received_kept == records


def test_a_revoked_token_ends_its_append_stream_and_its_import(pair, data_dir) -> None:
    """On the writer, an AppendStream (bidi) and an ImportSessions (client stream) opened with tokens
    then revoked end UNAUTHENTICATED at the reload: the stream's next request is neither written nor
    acknowledged, the import leaves nothing; the same calls of kept tokens complete."""
    writer, _, tokens_file = pair
    with grpc.insecure_channel(writer.address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        sid = stub.CreateSession(writer_pb2.CreateSessionRequest(), metadata=bearer(KEPT)).session_id

        def open_stream(token: str) -> tuple[queue.Queue, Iterator[writer_pb2.AppendResponse]]:
            requests: queue.Queue = queue.Queue()
            responses = stub.AppendStream(
                iter(requests.get, None), metadata=bearer(token), timeout=WAIT_SECONDS
            )
            return requests, responses

        def open_import(token: str, session_id: str) -> tuple[queue.Queue, grpc.Future]:
            parts: queue.Queue = queue.Queue()
            parts.put(
                writer_pb2.ImportSessionsRequest(
                    create=writer_pb2.CreateSessionRequest(session_id=session_id)
                )
            )
            parts.put(
                writer_pb2.ImportSessionsRequest(records=writer_pb2.ImportRecords(records=[_user("old")]))
            )
            answer = stub.ImportSessions.future(
                iter(parts.get, None), metadata=bearer(token), timeout=WAIT_SECONDS
            )
            return parts, answer

        revoked_requests, revoked_acks = open_stream(REVOKED)
        kept_requests, kept_acks = open_stream(KEPT)
        revoked_requests.put(writer_pb2.AppendRequest(session_id=sid, records=[_user("r1")]))
        assert list(next(revoked_acks).seqs) == [1]
        kept_requests.put(writer_pb2.AppendRequest(session_id=sid, records=[_user("k1")]))
        assert list(next(kept_acks).seqs) == [2]
        revoked_import_id = "0193aaaa-0000-7000-8000-000000000001"
        kept_import_id = "0193aaaa-0000-7000-8000-000000000002"
        revoked_parts, revoked_import = open_import(REVOKED_IMPORT, revoked_import_id)
        kept_parts, kept_import = open_import(KEPT_IMPORT, kept_import_id)
        # Both imports hold their session open until their stop arrives: wait until the writer has
        # staged them (nothing of a staged session is visible before the commit).
        deadline = time.monotonic() + WAIT_SECONDS
        while len(list(session_files(data_dir, ".*.tmp-*"))) < 2:
            assert time.monotonic() < deadline, "the imports were never staged"
            time.sleep(0.02)

        revoke(writer, tokens_file, REVOKED, REVOKED_IMPORT)

        revoked_requests.put(writer_pb2.AppendRequest(session_id=sid, records=[_user("r2")]))
        revoked_requests.put(None)
        ended = next_or_error(revoked_acks)
        assert isinstance(ended, grpc.RpcError), (
            f"the revoked token's stream acknowledged {ended} after the reload"
        )
        assert ended.code() == grpc.StatusCode.UNAUTHENTICATED, ended.details()
        kept_requests.put(writer_pb2.AppendRequest(session_id=sid, records=[_user("k2")]))
        kept_requests.put(None)
        assert [list(ack.seqs) for ack in kept_acks] == [[3]]

        stop = writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(stop_kind=PAUSED, reason="done"))
        for parts in (revoked_parts, kept_parts):
            parts.put(stop)
            parts.put(None)
        with pytest.raises(grpc.RpcError) as caught:
            revoked_import.result()
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, caught.value.details()
        assert [s.session_id for s in kept_import.result().sessions] == [kept_import_id]
    texts = [line for line in _session_file(data_dir, sid).read_text().splitlines()[1:]]
    assert ['"r1"' in texts[0], '"k1"' in texts[1], '"k2"' in texts[2], len(texts)] == [True, True, True, 3]
    assert list(session_files(data_dir, f"*{revoked_import_id}*")) == []


def _session_file(data_dir, session_id: str):
    path = session_file(data_dir, session_id)
    return path
