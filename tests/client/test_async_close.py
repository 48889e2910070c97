"""AsyncRolloutClient.close(): calls in flight end with ClientClosedError, and a closed client
opens no channel again (every later call raises ClientClosedError)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from rollout.v1 import reader_pb2, reader_pb2_grpc
from rollout_client import AsyncRolloutClient, ClientClosedError


class _HangingReader(reader_pb2_grpc.RolloutReaderServicer):
    """A reader whose ResolveSession answers only when ``release`` is set."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def ResolveSession(
        self, request: reader_pb2.ResolveSessionRequest, context: grpc.aio.ServicerContext
    ) -> reader_pb2.ResolveSessionResponse:
        self.calls += 1
        self.started.set()
        await self.release.wait()
        return reader_pb2.ResolveSessionResponse()


async def _serve(reader: _HangingReader) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    reader_pb2_grpc.add_RolloutReaderServicer_to_server(reader, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_a_call_in_flight_ends_with_client_closed_and_nothing_reopens() -> None:
    async def scenario() -> tuple[BaseException | None, int]:
        reader = _HangingReader()
        server, address = await _serve(reader)
        try:
            client = AsyncRolloutClient(address, address)
            in_flight = asyncio.ensure_future(client.resolve_session("a-key"))
            await reader.started.wait()
            await client.close()
            try:
                await in_flight
            except BaseException as error:  # the outcome is what is checked
                outcome: BaseException | None = error
            else:
                outcome = None
            with pytest.raises(ClientClosedError, match="closed"):
                await client.resolve_session("another-key")
            return outcome, reader.calls
        finally:
            reader.release.set()
            await server.stop(None)

    outcome, calls = asyncio.run(scenario())
    assert isinstance(outcome, ClientClosedError), repr(outcome)
    assert calls == 1  # the call after close() never reached the service


def test_a_caller_cancelling_its_own_call_still_sees_cancelled() -> None:
    async def scenario() -> bool:
        reader = _HangingReader()
        server, address = await _serve(reader)
        try:
            async with AsyncRolloutClient(address, address) as client:
                in_flight = asyncio.ensure_future(client.resolve_session("a-key"))
                await reader.started.wait()
                in_flight.cancel()
                try:
                    await in_flight
                except asyncio.CancelledError:
                    return True
                return False
        finally:
            reader.release.set()
            await server.stop(None)

    assert asyncio.run(scenario())
