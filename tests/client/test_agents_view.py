"""A LedgerSession keeps the view it read or wrote and asks the reader only for what changed since
(RecentMessagesRequest.since_next_seq): every get_items is still one round trip that sees every
acknowledged append, and the reader, never the object, decides that earlier messages changed."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from rollout.v1 import reader_pb2
from rollout_client import CHANNEL_OPTIONS, RolloutClient
from rollout_client.agents import LedgerSession
from rollout_client.in_process import InProcessLedger
from tests.client.conftest import TEST_RETRY

RECENT = "/rollout.v1.RolloutReader/GetRecentMessages"


class _Replies(grpc.aio.UnaryUnaryClientInterceptor):
    """Notes each GetRecentMessages reply: (messages carried, continues_view)."""

    def __init__(self, seen: list[tuple[int, bool]]) -> None:
        self.seen = seen

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        if method == RECENT:
            reply = await call
            assert isinstance(reply, reader_pb2.RecentMessagesResponse)
            self.seen.append((len(reply.canonical_messages), reply.continues_view))
        return call


def _items(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"u{n}"}
        if n % 2 == 0
        else {
            "type": "message",
            "role": "assistant",
            "id": f"m{n}",
            "content": [{"type": "output_text", "text": f"a{n}"}],
        }
        for n in range(first, first + count)
    ]


def test_reads_carry_only_what_changed_and_stay_exact(tmp_path) -> None:
    """An object that wrote the whole session reads it with no message carried; another object's
    adds come as a continuation of them alone; its pop (a retraction of a message the first holds)
    makes the reply the whole view. Each answer equals what a fresh object reads, and a caller
    changing the items it got changes nothing the object returns later."""
    seen: list[tuple[int, bool]] = []

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=[_Replies(seen)])

    async def run(client: RolloutClient) -> None:
        mine, other = LedgerSession("view", client=client), LedgerSession("view", client=client)
        await mine.add_items(_items(0, 40))
        got = await mine.get_items()
        assert got == _items(0, 40)
        assert seen == [(0, True)]
        got[0]["content"] = "changed by the caller"
        got[1]["content"].append("too")
        assert await mine.get_items() == _items(0, 40)
        assert await mine.get_items(limit=3) == _items(37, 3)
        assert seen[1:] == [(0, True), (0, True)]

        await other.add_items(_items(40, 2))
        seen.clear()
        assert await mine.get_items() == _items(0, 42)
        assert seen == [(2, True)]

        assert await other.pop_item() == _items(41, 1)[0]
        seen.clear()
        assert await mine.get_items() == _items(0, 41)
        assert seen == [(41, False)]
        assert await mine.get_items(limit=2) == await LedgerSession("view", client=client).get_items(limit=2)

    with (
        InProcessLedger(tmp_path / "ledger") as ledger,
        RolloutClient(ledger.writer, ledger.reader, retry=TEST_RETRY, channels=opener) as client,
    ):
        asyncio.run(run(client))


def test_an_object_that_read_a_limited_tail_asks_again_for_nothing(tmp_path) -> None:
    """A fresh object's limited read is a tail read (a lower-bound count); its next limited read of
    the unchanged session is answered with no messages, and one after another object's add with
    the limited answer, exact."""
    seen: list[tuple[int, bool]] = []

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=[_Replies(seen)])

    async def run(client: RolloutClient) -> None:
        await LedgerSession("tail", client=client).add_items(_items(0, 300))
        reading = LedgerSession("tail", client=client)
        assert await reading.get_items(limit=5) == _items(295, 5)
        assert await reading.get_items(limit=5) == _items(295, 5)
        assert seen[-1] == (0, True)
        await LedgerSession("tail", client=client).add_items(_items(300, 1))
        assert await reading.get_items(limit=5) == _items(296, 5)
        assert seen[-1][1] is False

    with (
        InProcessLedger(tmp_path / "ledger") as ledger,
        RolloutClient(ledger.writer, ledger.reader, retry=TEST_RETRY, channels=opener) as client,
    ):
        asyncio.run(run(client))


def test_a_reader_that_ignores_the_view_named_is_read_in_full(tmp_path, monkeypatch) -> None:
    """A reader that predates since_next_seq answers every read in full (no continues_view): the
    object takes each reply as the whole answer, exact through adds and pops by another object."""
    from reader_service import wire

    monkeypatch.setattr(wire, "check_recent_request", lambda request: None)
    seen: list[tuple[int, bool]] = []

    def opener(_service: str, address: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, interceptors=[_Replies(seen)])

    async def run(client: RolloutClient) -> None:
        mine, other = LedgerSession("old", client=client), LedgerSession("old", client=client)
        await mine.add_items(_items(0, 10))
        assert await mine.get_items() == _items(0, 10)
        await other.add_items(_items(10, 2))
        assert await other.pop_item() == _items(11, 1)[0]
        assert await mine.get_items() == _items(0, 11)
        assert await mine.get_items(limit=4) == _items(7, 4)
        assert await mine.pop_item() == _items(10, 1)[0]
        assert seen[0] == (10, False)
        assert not any(continued for _, continued in seen)

    with (
        InProcessLedger(tmp_path / "ledger") as ledger,
        RolloutClient(ledger.writer, ledger.reader, retry=TEST_RETRY, channels=opener) as client,
    ):
        asyncio.run(run(client))
