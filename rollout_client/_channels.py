"""gRPC channels to the writer and the reader, with the optional TLS roots and bearer token.

* ``tls_ca``: a PEM file of the CA that signed the services' certificates; the channel
  is TLS (``grpc.ssl_channel_credentials``).
* ``token``: sent on every call as ``authorization: Bearer <token>`` metadata
  (``grpc.access_token_call_credentials``). gRPC sends call credentials only over a
  secure channel; without ``tls_ca`` the token is allowed to loopback addresses only
  (``grpc.local_channel_credentials``), so it never crosses a network in clear text.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import grpc

#: Largest reply accepted (the reader's own limit: a bigger unary replay is refused there).
MAX_RECEIVE_BYTES = 256 * 1024 * 1024
#: Largest request sent (a record of up to the writer's default 64 MiB limit fits with room; the
#: writer refuses a record over its limit itself, naming the limit).
MAX_SEND_BYTES = 256 * 1024 * 1024
#: A lost connection is tried again after 0.1 s, the wait growing to at most 0.25 s (gRPC's own
#: defaults, 1 s growing to 120 s, left a client 0.5-6 s behind a restarted service). The connect
#: timeout (grpc.min_reconnect_backoff_ms, 20 s) is kept: a shorter one would fail the TLS
#: handshakes of slow links. Refused connections cost one packet each way.
INITIAL_RECONNECT_BACKOFF_MS = 100
MAX_RECONNECT_BACKOFF_MS = 250
#: The gRPC channel arguments of every channel the clients open (give them to channels opened
#: for the ``channels=`` seam too): message limits and reconnect backoff.
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    ("grpc.max_send_message_length", MAX_SEND_BYTES),
    ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
)


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def channel_credentials(
    address: str, token: str | None, tls_ca: str | Path | None
) -> grpc.ChannelCredentials | None:
    """The credentials of a channel to ``address`` (None: plaintext, no token).

    Raises ValueError for a token to a non-loopback address without ``tls_ca``, and
    OSError when ``tls_ca`` cannot be read.
    """
    if tls_ca is not None:
        transport = grpc.ssl_channel_credentials(root_certificates=Path(tls_ca).read_bytes())
    elif token is not None:
        if not _is_loopback(address):
            raise ValueError(
                f"a token to {address} would travel in clear text; pass tls_ca= (the CA file of the"
                " services' certificates), or reach the service over a loopback address"
            )
        transport = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    else:
        return None
    if token is None:
        return transport
    return grpc.composite_channel_credentials(transport, grpc.access_token_call_credentials(token))


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    """An asyncio channel to ``address`` bound to the running event loop."""
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)


def blocking_channel(
    address: str, *, token: str | None = None, tls_ca: str | Path | None = None
) -> grpc.Channel:
    """A blocking gRPC channel to ``address`` with the same credentials and limits the clients use.

    For code that drives the generated stubs itself (a streaming import, a load
    generator): a ``token`` travels as ``authorization: Bearer <token>``; ``tls_ca`` is
    the CA file of the services' certificates. Raises ValueError for a token to a
    non-loopback address without ``tls_ca``, OSError when ``tls_ca`` cannot be read.
    """
    credentials = channel_credentials(address, token, tls_ca)
    if credentials is None:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
