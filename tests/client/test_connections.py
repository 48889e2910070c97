"""How the client reaches its services (rollout_client/_connections.py): a service that never
answered fails the call at once, one that answered before is waited for while it restarts
(nothing sent meanwhile), an append none of whose attempts could be sent says it was not
written, and one client serves several event loops with a channel per loop."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rollout_client import (
    CHANNEL_OPTIONS,
    AsyncRolloutClient,
    RetryPolicy,
    RolloutClient,
    UnavailableError,
    user,
)
from rollout_client._loops import PerLoop
from tests.client.conftest import TEST_RETRY
from tests.conftest import start_service
from tests.processes import ServiceProcess
from tests.processes import start_service as start_service_at

CLOSED = "127.0.0.1:1"  # nothing listens on port 1
#: A deadline far longer than failing fast takes: the call must end long before it.
LONG = RetryPolicy(deadline=30.0, initial_backoff=0.02, max_backoff=0.5)


class CountingCalls(grpc.aio.UnaryUnaryClientInterceptor):
    """Counts the unary calls started on the channels it is given to, by method name."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        method = client_call_details.method
        self.methods.append(method.decode() if isinstance(method, bytes) else method)
        return await continuation(client_call_details, request)

    def count(self, name: str) -> int:
        return sum(1 for method in self.methods if method.endswith("/" + name))


class Opener:
    """A ``channels=`` opener: plaintext channels with a call counter, each kept with its service."""

    def __init__(self) -> None:
        self.calls = CountingCalls()
        self.opened: list[tuple[str, grpc.aio.Channel]] = []

    def __call__(self, service: str, address: str) -> grpc.aio.Channel:
        channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=[self.calls])
        self.opened.append((service, channel))
        return channel

    def channels(self, service: str) -> list[grpc.aio.Channel]:
        return [channel for kind, channel in self.opened if kind == service]


def _elapsed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except BaseException as error:
        return time.monotonic() - started, error
    return time.monotonic() - started, None


@pytest.mark.parametrize("kind", ["blocking", "async"])
@pytest.mark.parametrize("service", ["writer", "reader", "attached append"])
def test_a_service_that_never_answered_fails_the_call_at_once_naming_its_address(kind, service) -> None:
    """A closed port raises UnavailableError "is it running at <address>?" long before the deadline."""
    session_id = "0192f0c0-0000-7000-8000-000000000000"
    if kind == "blocking":
        client = RolloutClient(CLOSED, CLOSED, retry=LONG)
        calls = {
            "writer": client.create_session,
            "reader": lambda: client.session(session_id).stop_facts(),
            "attached append": lambda: client.session(session_id).append(user("x")),
        }
        elapsed, error = _elapsed(calls[service])
        client.close()
    else:
        core = AsyncRolloutClient(CLOSED, CLOSED, retry=LONG)
        calls_async = {
            "writer": core.create_session,
            "reader": lambda: core.session(session_id).stop_facts(),
            "attached append": lambda: core.session(session_id).append(user("x")),
        }

        async def scenario() -> None:
            try:
                await calls_async[service]()
            finally:
                await core.close()

        elapsed, error = _elapsed(lambda: asyncio.run(scenario()))
    assert isinstance(error, UnavailableError), error
    assert f"is it running at {CLOSED}?" in str(error)
    assert "Connection refused" in str(error)  # gRPC's own reason is kept
    assert elapsed < LONG.deadline / 2


@pytest.fixture
def pair(data_dir: Path) -> Iterator[dict[str, ServiceProcess]]:
    """A writer and a reader the test may stop and start again (on the same port)."""
    services = {"writer": start_service("writer", data_dir), "reader": start_service("reader", data_dir)}
    yield services
    for service in services.values():
        service.stop()


def _restart_writer(pair: dict[str, ServiceProcess], data_dir: Path, address: str) -> None:
    log = data_dir.parent / "writer-restarted.log"
    pair["writer"] = start_service_at("writer", data_dir, log, address=address)


def _wait_until_disconnected(client: RolloutClient, channel: grpc.aio.Channel) -> None:
    """Until the client's channel has noticed that its writer went away (it is not READY)."""

    async def state() -> grpc.ChannelConnectivity:
        return channel.get_state()

    while client.run(state()) is grpc.ChannelConnectivity.READY:
        time.sleep(0.01)


def test_an_append_waits_for_a_restarting_writer_and_goes_out_once_it_is_back(pair, data_dir) -> None:
    """An append made while the writer is down is not sent until the writer accepts connections
    again (one Append call in all), then acknowledged at its seq."""
    opener = Opener()
    with RolloutClient(pair["writer"].address, pair["reader"].address, retry=LONG, channels=opener) as client:
        session = client.create_session()
        session.append(user("before"))
        address = pair["writer"].address
        pair["writer"].stop(signal.SIGKILL)
        (channel,) = opener.channels("writer")
        _wait_until_disconnected(client, channel)
        before = opener.calls.count("Append")
        starting = threading.Event()
        outcome: dict[str, Any] = {}

        def append() -> None:
            starting.set()
            try:
                outcome["seqs"] = session.append(user("during")).seqs
            except Exception as error:  # reported below
                outcome["error"] = error

        worker = threading.Thread(target=append)
        worker.start()
        starting.wait()
        time.sleep(1.0)  # the append waits for the writer meanwhile
        assert worker.is_alive()
        _restart_writer(pair, data_dir, address)
        worker.join()
        assert "error" not in outcome, outcome.get("error")
        assert outcome["seqs"] == (2,)
        assert opener.calls.count("Append") - before == 1
        assert [m["content"] for m in session.replay().messages] == ["before", "during"]


def test_an_append_none_of_whose_attempts_could_be_sent_says_it_was_not_written(pair, data_dir) -> None:
    """The writer gone for the whole deadline: UnavailableError "was not written" (not "may have
    landed"), and indeed nothing was written."""
    opener = Opener()
    short = RetryPolicy(deadline=1.5, initial_backoff=0.02, max_backoff=0.25)
    with RolloutClient(
        pair["writer"].address, pair["reader"].address, retry=short, channels=opener
    ) as client:
        session = client.create_session()
        session.append(user("before"))
        address = pair["writer"].address
        pair["writer"].stop(signal.SIGKILL)
        _wait_until_disconnected(client, opener.channels("writer")[0])
        with pytest.raises(UnavailableError, match="was not written") as caught:
            session.append(user("never sent"))
        assert "is it running at" in str(caught.value)
        _restart_writer(pair, data_dir, address)
        assert [m["content"] for m in session.replay().messages] == ["before"]


def test_one_async_client_and_session_serve_several_event_loops(writer_process, reader_process) -> None:
    """asyncio.run twice and four threads with loops of their own share one AsyncRolloutClient and
    one AsyncSession: every append lands once, a channel is opened per loop, and close() closes
    the channel of the loop it runs on."""
    opener = Opener()
    client = AsyncRolloutClient(
        writer_process.address, reader_process.address, retry=TEST_RETRY, channels=opener
    )
    session = asyncio.run(client.create_session())
    asyncio.run(session.append(user("second loop")))

    def appends(thread: int) -> None:
        async def run() -> None:
            for turn in range(5):
                await session.append(user(f"thread {thread} turn {turn}"))

        asyncio.run(run())

    workers = [threading.Thread(target=appends, args=(thread,), daemon=True) for thread in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert not any(worker.is_alive() for worker in workers), "an append from another loop hangs"

    async def finish() -> tuple[list[str], grpc.aio.Channel]:
        replay = await session.replay()
        last = opener.channels("writer")[-1]
        await session.append(user("last"))
        await client.close()
        return [m["content"] for m in replay.messages], last

    contents, _ = asyncio.run(finish())
    expected = ["second loop"] + [f"thread {t} turn {n}" for t in range(4) for n in range(5)]
    assert sorted(contents) == sorted(expected)
    assert len(opener.channels("writer")) == 7  # one per loop: two runs, four threads, finish()
    assert opener.channels("writer")[-1].get_state() is grpc.ChannelConnectivity.SHUTDOWN


def test_given_channels_carry_every_call_and_credentials_go_with_them(writer_process, reader_process) -> None:
    """channels=: the opener is asked once per service on the client's loop and every call goes
    through its channels; token= or tls_ca= beside it is refused."""
    opener = Opener()
    with RolloutClient(writer_process.address, reader_process.address, channels=opener) as client:
        session = client.create_session()
        session.append(user("through the given channel"))
        session.stop_facts()
    assert [service for service, _ in opener.opened] == ["writer", "reader"]
    assert opener.calls.count("CreateSession") == 1
    assert opener.calls.count("Append") == 1
    assert opener.calls.count("GetStopFacts") == 1
    assert all(channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN for _, channel in opener.opened)
    with pytest.raises(ValueError, match="channels="):
        RolloutClient(writer_process.address, reader_process.address, channels=opener, token="t")


def test_a_value_per_loop_is_made_once_per_loop_and_dropped_with_its_loop() -> None:
    """PerLoop (channels, append and mutation locks): one value per running loop; a closed loop's
    is forgotten, so a later loop (which may reuse its address) gets a fresh one."""
    values = PerLoop(asyncio.Lock)

    async def twice() -> tuple[asyncio.Lock, asyncio.Lock]:
        return values.get(), values.get()

    first, again = asyncio.run(twice())
    assert first is again
    second, _ = asyncio.run(twice())
    assert second is not first
    assert values.values() == []  # both loops closed
    assert values.current() is None
