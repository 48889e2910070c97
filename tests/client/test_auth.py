"""The client side of authentication: a bearer token in ``authorization`` metadata, TLS roots
from a CA file. The servers do not check tokens yet, so a real in-test gRPC server with an
interceptor plays that part."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import trustme

from rollout.v1 import reader_pb2, reader_pb2_grpc
from rollout_client import RetryPolicy, RolloutClient, UnauthenticatedError, UnavailableError

TOKEN = "tok-3f9c"
FAST = RetryPolicy(deadline=2.0, initial_backoff=0.01, max_backoff=0.05)


class BearerCheck(grpc.ServerInterceptor):
    """Refuses (UNAUTHENTICATED) every call without ``authorization: Bearer <TOKEN>``; keeps what it saw."""

    def __init__(self) -> None:
        self.seen: list[str | bytes | None] = []

    def intercept_service(self, continuation, details):
        metadata = dict(details.invocation_metadata)
        self.seen.append(metadata.get("authorization"))
        if metadata.get("authorization") == f"Bearer {TOKEN}":
            return continuation(details)

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "a valid bearer token is required")

        return grpc.unary_unary_rpc_method_handler(refuse)


class StopFactsOnly(reader_pb2_grpc.RolloutReaderServicer):
    def GetStopFacts(self, request, context):
        return reader_pb2.StopFacts(session_id=request.session_id, found=True, stop_kind="paused")


def _serve(credentials: grpc.ServerCredentials | None) -> tuple[grpc.Server, int, BearerCheck]:
    check = BearerCheck()
    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[check])
    reader_pb2_grpc.add_RolloutReaderServicer_to_server(StopFactsOnly(), server)
    address = "127.0.0.1:0"
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    server.start()
    return server, port, check


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[int, Path, BearerCheck]]:
    """A reader stand-in serving TLS with a certificate for localhost, and its CA file."""
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    key_and_chain = [(cert.private_key_pem.bytes(), b"".join(pem.bytes() for pem in cert.cert_chain_pems))]
    server, port, check = _serve(grpc.ssl_server_credentials(key_and_chain))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    yield port, ca_file, check
    server.stop(None)


def test_token_and_tls_ca_reach_the_server(tls) -> None:
    """With tls_ca and token, the call is TLS and carries 'authorization: Bearer <token>'."""
    port, ca_file, check = tls
    with RolloutClient("localhost:1", f"localhost:{port}", token=TOKEN, tls_ca=ca_file, retry=FAST) as client:
        assert client.session("s-1").stop_facts().stop_kind == "paused"
    assert check.seen == [f"Bearer {TOKEN}"]


def test_without_the_token_the_call_is_unauthenticated(tls) -> None:
    """TLS alone: the server's UNAUTHENTICATED arrives as UnauthenticatedError."""
    port, ca_file, check = tls
    with (
        RolloutClient("localhost:1", f"localhost:{port}", tls_ca=ca_file, retry=FAST) as client,
        pytest.raises(UnauthenticatedError, match="bearer token"),
    ):
        client.session("s-1").stop_facts()
    assert check.seen == [None]


def test_a_certificate_from_another_ca_is_refused(tls, tmp_path) -> None:
    """A CA file that did not sign the server's certificate: the handshake fails (UnavailableError)."""
    port, _, check = tls
    other = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    with (
        RolloutClient("localhost:1", f"localhost:{port}", token=TOKEN, tls_ca=other, retry=FAST) as client,
        pytest.raises(UnavailableError),
    ):
        client.session("s-1").stop_facts()
    assert check.seen == []


def test_a_token_over_loopback_plaintext_is_sent() -> None:
    """Without TLS a token may go to a loopback address (local channel credentials)."""
    server, port, check = _serve(None)
    try:
        with RolloutClient("127.0.0.1:1", f"127.0.0.1:{port}", token=TOKEN, retry=FAST) as client:
            assert client.session("s-2").stop_facts().found
    finally:
        server.stop(None)
    assert check.seen == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize("address", ["10.1.2.3:50051", "ledger.example:50051"])
def test_a_token_to_another_host_without_tls_is_refused(address) -> None:
    """A token that would cross a network in clear text raises ValueError before any call."""
    with pytest.raises(ValueError, match="clear text"):
        RolloutClient(address, "127.0.0.1:50052", token=TOKEN)
