"""LedgerSession's compaction snapshot, the hook the Agents SDK's automatic compaction uses
(OpenAIResponsesCompactionSession, EncryptedSession): the last items, whether they are the whole
history, and an atomic replacement of a suffix: a retraction and the output in one append sent
with the next seq of the view read."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from unittest.mock import AsyncMock, MagicMock

from agents import Agent, RunConfig, Runner, SQLiteSession, set_tracing_disabled
from agents.memory import OpenAIResponsesCompactionSession
from agents.testing import ScriptedModel
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from rollout_client import assistant, tool_call, tool_result, user
from rollout_client.agents import LedgerSession

set_tracing_disabled(True)

SUMMARY = {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque summary"}


def _items(prefix: str, count: int) -> list[dict]:
    return [{"role": "user", "content": f"{prefix} {index}"} for index in range(count)]


def test_a_suffix_is_replaced_by_one_append_and_the_rest_is_kept(client) -> None:
    """replace_suffix(start, output): items[start:] of the snapshot give way to output, everything
    before stays; the file gains one retraction and the output's messages, nothing rewritten."""
    ledger = LedgerSession("compaction-suffix", client=client)
    history = _items("turn", 6)

    async def run() -> tuple:
        await ledger.add_items(history)
        snapshot = await ledger._get_compaction_snapshot(3)
        replaced = await snapshot.replace_suffix(1, [SUMMARY])
        return snapshot, replaced, await ledger.get_items()

    snapshot, replaced, after = asyncio.run(run())
    assert (snapshot.items, snapshot.complete, replaced) == (history[3:], False, True)
    assert after == [*history[:4], SUMMARY]
    session = client.session(client.resolve_session("compaction-suffix")[0])
    records = session.verify().records
    assert records == 1 + len(history) + 2  # session_meta, the items, one retraction, one summary


def test_a_snapshot_of_the_whole_history_is_complete(client) -> None:
    """With a limit at or over the history's length the snapshot is the whole history, complete."""
    ledger = LedgerSession("compaction-complete", client=client)

    async def run() -> tuple:
        empty = await ledger._get_compaction_snapshot(5)
        await ledger.add_items(_items("turn", 3))
        return empty, await ledger._get_compaction_snapshot(3), await ledger._get_compaction_snapshot(2)

    empty, whole, partial = asyncio.run(run())
    assert (empty.items, empty.complete) == ([], True)
    assert asyncio.run(empty.replace_suffix(0, [SUMMARY])) is False  # nothing to replace
    assert (whole.items, whole.complete) == (_items("turn", 3), True)
    assert (len(partial.items), partial.complete) == (2, False)


def test_a_replacement_after_the_session_changed_writes_nothing(client) -> None:
    """An append (from any object) after the snapshot was read: replace_suffix returns False and
    the history is as the other writer left it."""
    ledger = LedgerSession("compaction-moved", client=client)
    other = LedgerSession("compaction-moved", client=client)
    newer = {"role": "user", "content": "appended meanwhile"}

    async def run() -> tuple:
        await ledger.add_items(_items("turn", 4))
        snapshot = await ledger._get_compaction_snapshot(2)
        await other.add_items([newer])
        return await snapshot.replace_suffix(0, [SUMMARY]), await ledger.get_items()

    replaced, after = asyncio.run(run())
    assert replaced is False
    assert after == [*_items("turn", 4), newer]


def test_leading_items_that_prune_prefix_accepts_are_taken_out_up_to_the_first_it_refuses(client) -> None:
    """prune_prefix: the run of leading items it accepts leaves with the suffix, in the same append;
    an accepted item after a refused one stays."""
    ledger = LedgerSession("compaction-prune", client=client)
    history = [*_items("expired", 3), *_items("live", 1), *_items("expired late", 1), *_items("recent", 3)]

    async def run() -> list:
        await ledger.add_items(history)
        snapshot = await ledger._get_compaction_snapshot(
            2, prune_prefix=lambda item: "expired" in item["content"]
        )
        assert await snapshot.replace_suffix(0, [SUMMARY])
        return await ledger.get_items()

    assert asyncio.run(run()) == [
        *_items("live", 1),
        *_items("expired late", 1),
        *_items("recent", 1),
        SUMMARY,
    ]


def test_a_message_holding_several_items_is_replaced_whole_and_its_earlier_items_appended_again(
    client,
) -> None:
    """A message written without the adapter (text and a tool call in one): a suffix starting at its
    call retracts the message and appends its text again before the output, order kept."""
    session = client.create_session()
    session.append(
        user("question"),
        assistant("let me look", tool_calls=[tool_call("c1", "lookup", "{}")]),
        tool_result("c1", "found"),
    )
    ledger = LedgerSession(session.id, client=client)

    async def run() -> tuple:
        snapshot = await ledger._get_compaction_snapshot(2)
        assert await snapshot.replace_suffix(0, [SUMMARY])
        return snapshot.items, await ledger.get_items()

    window, after = asyncio.run(run())
    assert [item.get("type") for item in window] == ["function_call", "function_call_output"]
    assert after == [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "let me look"},
        SUMMARY,
    ]


def test_a_subclass_overriding_an_item_call_gets_no_snapshot(client) -> None:
    """A subclass with its own add_items (say, transforming items) is not bypassed: no snapshot."""

    class Transforming(LedgerSession):
        async def add_items(self, items):
            await super().add_items([{**item, "content": item["content"].upper()} for item in items])

    class Plain(LedgerSession):
        pass

    assert asyncio.run(Transforming("compaction-sub", client=client)._get_compaction_snapshot(2)) is None
    assert asyncio.run(Plain("compaction-sub", client=client)._get_compaction_snapshot(2)) is not None


async def _compact_the_latest_exchange(store) -> tuple[list, list]:
    """A Runner turn over OpenAIResponsesCompactionSession(store) seeing one of four stored items
    (limit 1), compaction approved: the stored items after it, and the compaction request's input."""
    compactor = MagicMock()
    compactor.responses.compact = AsyncMock(return_value=SimpleNamespace(output=[SUMMARY]))
    session = OpenAIResponsesCompactionSession(
        "compaction-runner",
        store,
        client=compactor,
        compaction_mode="input",
        should_trigger_compaction=lambda _: True,
    )
    reply = ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
    )
    await store.add_items(_items("earlier", 4))
    agent = Agent(name="worker", model=ScriptedModel(steps=[[reply]]))
    await Runner.run(agent, "continue", session=session, run_config=RunConfig(session_settings={"limit": 1}))
    compactor.responses.compact.assert_awaited_once()
    return await store.get_items(), compactor.responses.compact.call_args.kwargs["input"]


def test_the_sdk_compacts_the_latest_exchange_of_a_longer_history_as_over_sqlite(client) -> None:
    """OpenAIResponsesCompactionSession over a LedgerSession whose history is longer than the model
    saw: the exchange (from its first user message) becomes the summary, the earlier history is
    kept, as over SQLiteSession (without a snapshot the SDK skips such a compaction)."""
    ledger, request = asyncio.run(
        _compact_the_latest_exchange(LedgerSession("compaction-runner", client=client))
    )
    assert (ledger, request) == asyncio.run(_compact_the_latest_exchange(SQLiteSession("compaction-runner")))
    assert ledger == [*_items("earlier", 3), SUMMARY]
    assert [item.get("content") for item in request[:2]] == ["earlier 3", "continue"]
