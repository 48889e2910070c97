"""How the services are served (serving.server, rollout_cli.serve_options), with real processes:
client certificates, the announced address, reflection v1, metrics of both services, JSON log
lines, token reloads, a plaintext health-only port, a reader on a read-only data root, tracing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import orjson
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from shared.session_meta import read_session_meta
from tests.conftest import run_rollout, start_service
from tests.data_roots import session_file, session_files
from tests.e2e.secured import A, B, bearer, make_certificates, tls_arguments, tls_channel, write_tokens
from tests.ports import free_port
from tests.processes import launch, reap

PAUSED = records_pb2.StopKind.Value("STOP_KIND_PAUSED")


def _user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def test_mtls_refuses_a_client_without_a_certificate_and_takes_the_tenant_from_its_cn(
    tmp_path, data_dir
) -> None:
    """With --tls-client-ca and no token file, a client without a certificate cannot connect, and a
    client's certificate subject CN is the tenant its sessions are recorded under."""
    certificates = make_certificates(tmp_path)
    writer = start_service(
        "writer", data_dir, *tls_arguments(certificates, "--tls-client-ca", str(certificates.ca_file))
    )
    try:
        with tls_channel(writer.address, certificates) as channel:
            with pytest.raises(grpc.RpcError) as caught:
                writer_pb2_grpc.RolloutWriterStub(channel).CreateSession(
                    writer_pb2.CreateSessionRequest(), timeout=5
                )
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        with tls_channel(writer.address, certificates, certificates.client_pair(tmp_path, "acme")) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            created = stub.CreateSession(writer_pb2.CreateSessionRequest(), timeout=10)
            with pytest.raises(grpc.RpcError) as caught:
                stub.CreateSession(writer_pb2.CreateSessionRequest(tenant="other"), timeout=10)
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        writer.stop()
    path = session_file(data_dir, created.session_id)
    assert (read_session_meta(path) or {})["tenant"] == "acme"


def test_the_announced_address_is_the_bound_one_and_plaintext_off_loopback_is_warned(data_dir) -> None:
    """--address 0.0.0.0:0 is announced as 0.0.0.0:<port> (and answers there); serving it without
    TLS logs a warning naming the options that fix it."""
    writer = start_service("writer", data_dir, "--address", "0.0.0.0:0")  # the last --address counts
    try:
        host, _, port = writer.address.rpartition(":")
        assert host == "0.0.0.0"
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        writer.stop()
    assert f"serves 0.0.0.0:{port} in plaintext" in writer.log()  # the bound address
    assert "--tls-cert" in writer.log()
    assert f"writer serving on 0.0.0.0:{port} (plaintext, no tokens)" in writer.log()


def test_rollout_version_names_the_installed_version() -> None:
    """rollout --version prints the package's version."""
    from importlib.metadata import version

    done = run_rollout("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"rollout, version {version('rollout-ledger')}"


def _reflection(
    channel: grpc.Channel, service: str, request: reflection_pb2.ServerReflectionRequest, token: str
):
    info = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        reflection_pb2.ServerReflectionRequest.SerializeToString,
        reflection_pb2.ServerReflectionResponse.FromString,
    )
    (answer,) = info(iter([request]), metadata=bearer(token), timeout=10)
    return answer


def test_reflection_v1_and_v1alpha_answer_with_a_token(tmp_path, data_dir) -> None:
    """A reflection client speaking grpc.reflection.v1 lists the services (both reflection versions
    among them) and gets the descriptors of the writer's service and of reflection v1 itself; v1alpha
    answers the same; both need the token."""
    tokens = write_tokens(tmp_path / "tokens.json")
    writer = start_service("writer", data_dir, "--auth-tokens", str(tokens))
    try:
        with grpc.insecure_channel(writer.address) as channel:
            for service in (
                "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection",
            ):
                listed = _reflection(
                    channel, service, reflection_pb2.ServerReflectionRequest(list_services=""), A
                )
                names = {entry.name for entry in listed.list_services_response.service}
                assert {
                    "rollout.v1.RolloutWriter",
                    "grpc.health.v1.Health",
                    "grpc.reflection.v1.ServerReflection",
                    "grpc.reflection.v1alpha.ServerReflection",
                } <= names
                for symbol, package in (
                    ("rollout.v1.RolloutWriter", "rollout.v1"),
                    ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1"),
                ):
                    found = _reflection(
                        channel,
                        service,
                        reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol),
                        A,
                    )
                    files = [
                        descriptor_pb2.FileDescriptorProto.FromString(raw)
                        for raw in found.file_descriptor_response.file_descriptor_proto
                    ]
                    assert package in {file.package for file in files}, found
    finally:
        writer.stop()


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def _value(text: str, sample: str) -> float:
    """The value of the metric line starting with ``sample`` (name and labels as exported)."""
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {sample} in:\n{text}")


def test_metrics_of_both_services_and_a_json_log_line_per_refused_call(data_dir) -> None:
    """Both services export per-RPC counts by status code and latency histograms at
    --metrics-address; the writer its append latency, queue depth and open sessions; the reader
    its replay cache answers. With --log-format json a refused call logs one JSON line naming the
    RPC, the code and the message."""
    writer_port, reader_port = free_port(), free_port()
    writer = start_service(
        "writer", data_dir, "--metrics-address", f"127.0.0.1:{writer_port}", "--log-format", "json"
    )
    reader = start_service("reader", data_dir, "--metrics-address", str(reader_port))
    try:
        with grpc.insecure_channel(writer.address) as w, grpc.insecure_channel(reader.address) as r:
            stub = writer_pb2_grpc.RolloutWriterStub(w)
            session = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
            stub.Append(writer_pb2.AppendRequest(session_id=session, records=[_user("hi")]))
            absent = str(uuid.uuid4())
            with pytest.raises(grpc.RpcError):
                stub.Append(writer_pb2.AppendRequest(session_id=absent, records=[_user("lost")]))
            replays = reader_pb2_grpc.RolloutReaderStub(r)
            for _ in range(2):
                replays.GetReplay(reader_pb2.ReplayRequest(session_id=session))
        text = _scrape(writer_port)
        labels = 'grpc_method="Append",grpc_service="rollout.v1.RolloutWriter",grpc_type="unary"'
        assert _value(text, f'grpc_server_handled_total{{grpc_code="OK",{labels}}}') == 1
        assert _value(text, f'grpc_server_handled_total{{grpc_code="NOT_FOUND",{labels}}}') == 1
        assert _value(text, f"grpc_server_started_total{{{labels}}}") == 2
        assert _value(text, f"grpc_server_handling_seconds_count{{{labels}}}") == 2
        assert _value(text, "rollout_append_seconds_count") == 1
        assert _value(text, "rollout_queued_records") == 0
        assert _value(text, "rollout_open_sessions") == 1
        served = _scrape(reader_port)
        reader_labels = 'grpc_method="GetReplay",grpc_service="rollout.v1.RolloutReader",grpc_type="unary"'
        assert _value(served, f'grpc_server_handled_total{{grpc_code="OK",{reader_labels}}}') == 2
        assert _value(served, 'rollout_replay_cache_answers_total{how="rebuilt"}') == 1
        assert _value(served, 'rollout_replay_cache_answers_total{how="unchanged"}') == 1
    finally:
        writer.stop()
        reader.stop()
    lines = [json.loads(line) for line in writer.log().splitlines() if line.startswith("{")]
    assert lines, writer.log()
    (refused,) = [line for line in lines if line.get("code") == "NOT_FOUND"]
    assert refused["rpc"] == "/rollout.v1.RolloutWriter/Append"
    assert refused["outcome"] == "refused"
    assert refused["level"] == "warning"
    assert refused["detail"] == f"session '{absent}' not found"
    assert {"timestamp", "logger", "event", "peer", "duration_ms"} <= refused.keys()


def test_the_token_file_is_read_again_on_sighup_and_a_bad_one_keeps_the_tokens(tmp_path, data_dir) -> None:
    """After SIGHUP a token added to the file is accepted and a removed one refused; a file broken
    meanwhile leaves the tokens in force (and says so in the log)."""
    tokens = write_tokens(tmp_path / "tokens.json", {A: "a"})
    writer = start_service("writer", data_dir, "--auth-tokens", str(tokens))

    def code(token: str) -> grpc.StatusCode:
        with grpc.insecure_channel(writer.address) as channel:
            try:
                writer_pb2_grpc.RolloutWriterStub(channel).CreateSession(
                    writer_pb2.CreateSessionRequest(), metadata=bearer(token), timeout=10
                )
            except grpc.RpcError as error:
                return error.code()
            return grpc.StatusCode.OK

    def reload_and_wait(marker: str) -> None:
        before = writer.log().count(marker)
        writer.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60  # a hang guard: a reload takes milliseconds
        while writer.log().count(marker) == before:
            assert time.monotonic() < deadline, f"the writer never logged {marker!r} after SIGHUP"
            time.sleep(0.05)

    try:
        assert (code(A), code(B)) == (grpc.StatusCode.OK, grpc.StatusCode.UNAUTHENTICATED)
        write_tokens(tokens, {B: "b"})
        reload_and_wait("auth tokens reloaded")
        assert (code(A), code(B)) == (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.OK)
        tokens.write_text("{not json")
        reload_and_wait("auth tokens not reloaded")
        assert code(B) == grpc.StatusCode.OK
    finally:
        writer.stop()
    assert "the previous ones stay in force" in writer.log()
    assert B not in writer.log()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[]", "must be a JSON object"),
        (orjson.dumps({"tok-1": ""}), "entry 1: the tenant must be a non-empty string"),
        (orjson.dumps({"tok-1": "a", "tok 2": "b"}), "entry 2: a token is non-empty and has no blanks"),
        (orjson.dumps({"tok-1": {"tenant": "a", "admin": True}}), "entry 1: unknown keys ['admin']"),
    ],
)
def test_a_bad_token_file_stops_the_service_with_a_sentence(tmp_path, data_dir, content, message) -> None:
    """A token file that cannot be used ends serve-writer with exit 1 and what is wrong (never a token)."""
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(content)
    done = run_rollout(
        "serve-writer", "--data-dir", str(data_dir), "--address", "127.0.0.1:0", "--auth-tokens", str(tokens)
    )
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert "tok-1" not in done.stderr


def test_a_tls_service_answers_health_checks_in_plaintext_on_its_health_address(tmp_path, data_dir) -> None:
    """--health-address serves health checking alone, in plaintext (for grpc probes), beside a TLS port;
    nothing else is served there."""
    certificates = make_certificates(tmp_path)
    port = free_port()
    reader = start_service(
        "reader", data_dir, *tls_arguments(certificates), "--health-address", f"127.0.0.1:{port}"
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="rollout.v1.RolloutReader"), timeout=10
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as caught:
                reader_pb2_grpc.RolloutReaderStub(channel).ListSessions(
                    reader_pb2.ListSessionsRequest(), timeout=10
                )
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        reader.stop()


@contextmanager
def _read_only(folder: Path) -> Iterator[Path]:
    """``folder`` bind-mounted read-only at a new path (root can mount on this machine and in CI)."""
    view = folder.parent / f"{folder.name}-ro"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(folder), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_a_reader_serves_a_read_only_data_root_and_never_creates_one(data_dir, tmp_path) -> None:
    """A reader starts on a read-only mount of the data root (as a Kubernetes reader mounts it) and
    answers every RPC there; a reader given a data root that does not exist starts, lists nothing
    and leaves it uncreated."""
    writer = start_service("writer", data_dir)
    with grpc.insecure_channel(writer.address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        parent = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
        stub.Append(writer_pb2.AppendRequest(session_id=parent, records=[_user("hello")]))
        stub.Stop(writer_pb2.StopRequest(session_id=parent, stop_kind=PAUSED))
    writer.stop()
    with _read_only(data_dir) as view:
        reader = start_service("reader", view)
        try:
            with grpc.insecure_channel(reader.address) as channel:
                stub = reader_pb2_grpc.RolloutReaderStub(channel)
                assert [
                    s.session_id for s in stub.ListSessions(reader_pb2.ListSessionsRequest()).sessions
                ] == [parent]
                assert stub.GetReplay(reader_pb2.ReplayRequest(session_id=parent)).messages[0].text == "hello"
                assert list(stub.StreamReplay(reader_pb2.ReplayRequest(session_id=parent)))
                assert stub.GetStopFacts(reader_pb2.StopFactsRequest(session_id=parent)).stop_kind == "paused"
                assert stub.VerifySession(reader_pb2.VerifyRequest(session_id=parent)).ok
                assert stub.GetMemoryView(reader_pb2.MemoryViewRequest(session_id=parent)).messages
                assert list(stub.StreamMemoryView(reader_pb2.MemoryViewRequest(session_id=parent)))
                stub.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=parent))
        finally:
            assert reader.stop() == 0
    missing = tmp_path / "nothing-here"
    reader = start_service("reader", missing)
    try:
        with grpc.insecure_channel(reader.address) as channel:
            listed = reader_pb2_grpc.RolloutReaderStub(channel).ListSessions(reader_pb2.ListSessionsRequest())
            assert list(listed.sessions) == []
    finally:
        reader.stop()
    assert not missing.exists()


class _Collector:
    """An OTLP trace collector stand-in: keeps the spans it is sent, by name."""

    def __init__(self) -> None:
        self.spans: dict[str, object] = {}
        self.received = threading.Event()

    @property
    def names(self) -> list[str]:
        return list(self.spans)

    def Export(self, request, context):  # the TraceService's one RPC
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.spans.update((span.name, span) for span in scope_spans.spans)
        if len(self.spans) >= 2:
            self.received.set()
        return trace_service_pb2.ExportTraceServiceResponse()


def test_otlp_tracing_exports_a_span_per_rpc_to_the_configured_endpoint(data_dir, monkeypatch) -> None:
    """--otlp-tracing sends a server span for each RPC to the OTLP endpoint the standard
    OTEL_EXPORTER_OTLP_* variables name; a refused call's span carries its status code."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    writer = start_service("writer", data_dir, "--otlp-tracing")
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            stub.CreateSession(writer_pb2.CreateSessionRequest())
            with pytest.raises(grpc.RpcError) as refusal:
                stub.Stop(writer_pb2.StopRequest(session_id=str(uuid.uuid4())))
        assert collector.received.wait(20), writer.log()
    finally:
        writer.stop()
        server.stop(None)
    assert "/rollout.v1.RolloutWriter/CreateSession" in collector.names
    refused = collector.spans["/rollout.v1.RolloutWriter/Stop"]
    codes = {a.key: a.value.int_value for a in refused.attributes if a.key == "rpc.grpc.status_code"}
    assert refusal.value.code() != grpc.StatusCode.OK
    assert codes == {"rpc.grpc.status_code": refusal.value.code().value[0]}


def test_serve_passes_tls_and_tokens_to_both_services(tmp_path, data_dir) -> None:
    """rollout serve --tls-cert --tls-key --auth-tokens starts both services with them: each
    refuses a call without a token and answers one with it, over TLS; --reader-metrics-address
    serves the reader's metrics."""
    certificates = make_certificates(tmp_path)
    tokens = write_tokens(tmp_path / "tokens.json")
    writer_port, reader_port, metrics_port = free_port(), free_port(), free_port()
    serve = launch(
        [
            *(sys.executable, "-m", "rollout_cli.main", "serve", "--data-dir", str(data_dir)),
            *("--writer-address", f"127.0.0.1:{writer_port}", "--reader-address", f"127.0.0.1:{reader_port}"),
            *tls_arguments(certificates, "--auth-tokens", str(tokens)),
            *("--reader-metrics-address", str(metrics_port)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=Path(__file__).resolve().parent.parent,
        start_new_session=True,  # its own process group: a failed test can end the whole pair
        sigint=signal.SIG_DFL,  # Ctrl-C reaches it, whatever this test run inherited
    )
    try:
        assert serve.stdout is not None
        listening = [serve.stdout.readline() for _ in range(3)]
        assert sum("listening on" in line for line in listening) == 2, listening
        with tls_channel(f"127.0.0.1:{writer_port}", certificates) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.CreateSession(writer_pb2.CreateSessionRequest(), timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            session = stub.CreateSession(
                writer_pb2.CreateSessionRequest(), metadata=bearer(A), timeout=10
            ).session_id
        with tls_channel(f"127.0.0.1:{reader_port}", certificates) as channel:
            stub = reader_pb2_grpc.RolloutReaderStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetStopFacts(reader_pb2.StopFactsRequest(session_id=session), timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            stub.GetStopFacts(reader_pb2.StopFactsRequest(session_id=session), metadata=bearer(A), timeout=10)
        labels = 'grpc_method="GetStopFacts",grpc_service="rollout.v1.RolloutReader",grpc_type="unary"'
        metrics = _scrape(metrics_port)
        assert _value(metrics, f'grpc_server_handled_total{{grpc_code="UNAUTHENTICATED",{labels}}}') == 1
        assert _value(metrics, f'grpc_server_handled_total{{grpc_code="OK",{labels}}}') == 1
        serve.send_signal(signal.SIGINT)
        assert serve.wait(30) == 0
    finally:
        reap(serve)


def test_the_start_up_line_says_how_callers_reach_the_service(tmp_path) -> None:
    """The 'serving on' line names the transport, authentication and health-only address in force."""
    from serving.auth import TokenTable
    from serving.server import ServerSettings, TlsFiles

    certificates = make_certificates(tmp_path)
    tls = TlsFiles(certificates.cert_file, certificates.key_file, client_ca=certificates.ca_file)
    tokens = TokenTable(write_tokens(tmp_path / "tokens.json"))
    assert ServerSettings().describe() == "plaintext, no tokens"
    assert (
        ServerSettings(tls=tls, tokens=tokens, health_address="0.0.0.0:8081").describe()
        == "TLS with client certificates, bearer tokens required, health checks also on 0.0.0.0:8081 (plaintext)"
    )


@pytest.mark.parametrize(
    ("common_names", "message"),
    [
        (("acme", "other"), "names 2 common names (CN: 'acme', 'other')"),
        ((), "names no subject common name (CN)"),
    ],
)
def test_a_client_certificate_without_exactly_one_cn_is_refused(
    tmp_path, data_dir, common_names, message
) -> None:
    """With client certificates naming the tenant, a certificate whose subject has two CNs is
    refused UNAUTHENTICATED as ambiguous (never taken for its first CN), one without a CN too;
    nothing is created."""
    certificates = make_certificates(tmp_path)
    writer = start_service(
        "writer", data_dir, *tls_arguments(certificates, "--tls-client-ca", str(certificates.ca_file))
    )
    try:
        pair = certificates.client_pair_with_subject(*common_names)
        with (
            tls_channel(writer.address, certificates, pair) as channel,
            pytest.raises(grpc.RpcError) as caught,
        ):
            writer_pb2_grpc.RolloutWriterStub(channel).CreateSession(
                writer_pb2.CreateSessionRequest(), timeout=10
            )
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, caught.value.details()
        assert message in caught.value.details()
        if len(common_names) > 1:
            assert "ambiguous" in caught.value.details()
    finally:
        writer.stop()
    assert list(session_files(data_dir)) == []


def test_a_stream_ends_when_its_client_certificate_expires_and_later_calls_are_refused(tmp_path) -> None:
    """A stream opened with a client certificate ends UNAUTHENTICATED at the certificate's notAfter
    (the connection stays open: gRPC checks a certificate only when it connects), and a later call on
    the same connection is refused as expired (the service's clock is the test's)."""
    import asyncio

    from serving.auth import AuthInterceptor, read_certificate
    from serving.rpc_observer import RpcObserver

    certificates = make_certificates(tmp_path)
    key, chain = certificates.client_pair_with_subject("acme")
    certificate = read_certificate(chain)
    assert certificate is not None
    now = [certificate.not_after - 1.0]  # the stream opens one second before notAfter

    async def follow(request: bytes, context: grpc.aio.ServicerContext):
        yield b"first"
        await asyncio.Event().wait()  # ends only when its credentials do

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def scenario() -> tuple[grpc.StatusCode, str, grpc.StatusCode, str]:
        server = grpc.aio.server(
            interceptors=[RpcObserver("test"), AuthInterceptor(None, certificates=True, clock=lambda: now[0])]
        )
        handlers = {
            "Follow": grpc.unary_stream_rpc_method_handler(follow),
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Expiry", handlers),))
        credentials = grpc.ssl_server_credentials(
            [(certificates.key_file.read_bytes(), certificates.cert_file.read_bytes())],
            root_certificates=certificates.ca_file.read_bytes(),
            require_client_auth=True,
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        try:
            channel_credentials = grpc.ssl_channel_credentials(certificates.ca_file.read_bytes(), key, chain)
            async with grpc.aio.secure_channel(f"localhost:{port}", channel_credentials) as channel:
                stream = channel.unary_stream("/test.Expiry/Follow")(b"", timeout=60)
                assert await stream.read() == b"first"
                now[0] = certificate.not_after + 10.0
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    await stream.read()  # nothing more comes: the stream ends at notAfter
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await channel.unary_unary("/test.Expiry/Echo")(b"x", timeout=60)
        finally:
            await server.stop(None)
        return ended.value.code(), ended.value.details(), refused.value.code(), refused.value.details()

    ended_code, ended_details, refused_code, refused_details = asyncio.run(scenario())
    assert ended_code == grpc.StatusCode.UNAUTHENTICATED, ended_details
    assert "client certificate that opened this stream expired at" in ended_details
    assert refused_code == grpc.StatusCode.UNAUTHENTICATED, refused_details
    assert "client certificate expired at" in refused_details


def test_a_cancelled_watch_under_tokens_leaves_no_traceback(tmp_path, data_dir) -> None:
    """A WatchSession the client cancels, on a reader with --auth-tokens: its stream is closed
    from another context; nothing is logged as an error (it was 'Task exception was never
    retrieved ... was created in a different Context')."""
    tokens = write_tokens(tmp_path / "tokens.json")
    writer = start_service("writer", data_dir, "--auth-tokens", str(tokens))
    reader = start_service("reader", data_dir, "--auth-tokens", str(tokens))
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            sid = stub.CreateSession(writer_pb2.CreateSessionRequest(), metadata=bearer(A)).session_id
            record = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="x"))
            stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[record]), metadata=bearer(A))
        with grpc.insecure_channel(reader.address) as channel:
            watch = reader_pb2_grpc.RolloutReaderStub(channel).WatchSession
            for _ in range(5):
                stream = watch(reader_pb2.WatchSessionRequest(session_id=sid), metadata=bearer(A))
                assert [r.seq for r in next(stream).records] == [0, 1]
                stream.cancel()
    finally:
        assert reader.stop() == 0
        writer.stop()
    log = reader.log()
    assert "cancelled WatchSession" in log  # the cancels reached the reader
    assert "Task exception was never retrieved" not in log, log[-3000:]
    assert "different Context" not in log, log[-3000:]
