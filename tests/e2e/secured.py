"""A writer and a reader served as in production: TLS (certificates made here with trustme)
and bearer tokens of two tenants, each with a plain and an importer token; generic callers
of any RPC of either service, taken from the service descriptors."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import orjson
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message_factory import GetMessageClass

from rollout.v1 import reader_pb2, writer_pb2
from tests.conftest import ServiceProcess, start_service

WRITER = writer_pb2.DESCRIPTOR.services_by_name["RolloutWriter"]
READER = reader_pb2.DESCRIPTOR.services_by_name["RolloutReader"]
TOKENS = {
    "tok-a-7c1d9e": "a",
    "tok-a-import-52e0": {"tenant": "a", "importer": True},
    "tok-b-0f3a8b": "b",
    "tok-b-import-9d44": {"tenant": "b", "importer": True},
}
A, A_IMPORT, B, B_IMPORT = TOKENS


@dataclass
class Certificates:
    """A CA, the servers' certificate for localhost/127.0.0.1, and files of both."""

    ca: trustme.CA
    ca_file: Path
    cert_file: Path
    key_file: Path

    def client_pair(self, folder: Path, common_name: str) -> tuple[bytes, bytes]:
        """A client certificate signed by this CA whose subject CN is ``common_name``: (key, chain) PEM."""
        issued = self.ca.issue_cert(f"{common_name}.clients.test", common_name=common_name)
        return issued.private_key_pem.bytes(), b"".join(pem.bytes() for pem in issued.cert_chain_pems)

    def client_pair_with_subject(
        self, *common_names: str, not_after: datetime.datetime | None = None
    ) -> tuple[bytes, bytes]:
        """A client certificate signed by this CA whose subject holds each of ``common_names`` as a
        CN attribute of its own (none, one or several), valid for a day or until ``not_after``:
        (key, certificate) PEM."""
        issuer = x509.load_pem_x509_certificate(self.ca.cert_pem.bytes())
        issuer_key = serialization.load_pem_private_key(self.ca.private_key_pem.bytes(), None)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, name) for name in common_names]
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "clients"), *subject]))
            .issuer_name(issuer.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(not_after or now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(issuer_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return key_pem, certificate.public_bytes(serialization.Encoding.PEM)


def make_certificates(folder: Path) -> Certificates:
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    server.private_key_pem.write_to_path(str(key_file))
    cert_file.write_bytes(b"".join(pem.bytes() for pem in server.cert_chain_pems))
    return Certificates(ca, ca_file, cert_file, key_file)


def write_tokens(path: Path, tokens: dict[str, Any] = TOKENS) -> Path:
    path.write_bytes(orjson.dumps(tokens))
    return path


def tls_arguments(certificates: Certificates, *extra: str) -> list[str]:
    return ["--tls-cert", str(certificates.cert_file), "--tls-key", str(certificates.key_file), *extra]


def local(address: str) -> str:
    """The address with the host the server certificate names (localhost)."""
    return "localhost:" + address.rpartition(":")[2]


def tls_channel(
    address: str, certificates: Certificates, client_pair: tuple[bytes, bytes] | None = None
) -> grpc.Channel:
    key, chain = client_pair if client_pair is not None else (None, None)
    credentials = grpc.ssl_channel_credentials(certificates.ca_file.read_bytes(), key, chain)
    return grpc.secure_channel(local(address), credentials)


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    return () if token is None else (("authorization", f"Bearer {token}"),)


def call(channel: grpc.Channel, method: MethodDescriptor, requests: Any, token: str | None) -> list[Any]:
    """Call ``method`` (any shape) with ``requests`` (one message, or an iterable for a client
    stream) as ``token``; returns the responses as a list. Raises grpc.RpcError."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    serialize = GetMessageClass(method.input_type).SerializeToString
    deserialize = GetMessageClass(method.output_type).FromString
    metadata = bearer(token)
    shape = (method.client_streaming, method.server_streaming)
    if shape == (False, False):
        return [channel.unary_unary(path, serialize, deserialize)(requests, metadata=metadata, timeout=20)]
    if shape == (False, True):
        return list(
            channel.unary_stream(path, serialize, deserialize)(requests, metadata=metadata, timeout=20)
        )
    if shape == (True, False):
        return [
            channel.stream_unary(path, serialize, deserialize)(iter(requests), metadata=metadata, timeout=20)
        ]
    return list(
        channel.stream_stream(path, serialize, deserialize)(iter(requests), metadata=metadata, timeout=20)
    )


def refusal(
    channel: grpc.Channel, method: MethodDescriptor, requests: Any, token: str | None
) -> grpc.RpcError:
    """The error a call ends with (AssertionError when it succeeds)."""
    try:
        responses = call(channel, method, requests, token)
    except grpc.RpcError as error:
        return error
    raise AssertionError(f"{method.name} succeeded: {responses!r}")


def every_method() -> Iterator[MethodDescriptor]:
    for service in (WRITER, READER):
        yield from service.methods


@dataclass
class SecuredPair:
    writer: ServiceProcess
    reader: ServiceProcess
    certificates: Certificates
    tokens_file: Path

    def channels(self) -> tuple[grpc.Channel, grpc.Channel]:
        return tls_channel(self.writer.address, self.certificates), tls_channel(
            self.reader.address, self.certificates
        )

    def stop(self) -> None:
        for service in (self.writer, self.reader):
            service.stop()


def start_secured_pair(folder: Path, *extra: Iterable[str]) -> SecuredPair:
    """A writer and a reader on one data root under ``folder``, with TLS and :data:`TOKENS`."""
    data = folder / "data"
    data.mkdir()
    certificates = make_certificates(folder)
    tokens_file = write_tokens(folder / "tokens.json")
    arguments = tls_arguments(certificates, "--auth-tokens", str(tokens_file))
    writer = start_service("writer", data, *arguments)
    try:
        reader = start_service("reader", data, *arguments)
    except BaseException:
        writer.stop()
        raise
    return SecuredPair(writer, reader, certificates, tokens_file)
