"""An OpenAI Agents SDK session over the ledger: ``LedgerSession`` (``pip install
rollout-ledger[agents]``).

``Runner.run(agent, "...", session=LedgerSession(session_id, client=client))`` keeps
the run's history in a ledger session instead of a local database: durable, shared
by every process that opens the same id, replayable and forkable like any session.
``client`` is a :class:`rollout_client.RolloutClient` or an
:class:`rollout_client.AsyncRolloutClient`; with the blocking one, calls run on the
client's own loop and are awaited from the caller's loop, which never blocks.

How the SDK's input items are stored (one ledger ``message`` per item, exactly
recoverable):

* **native**, when the ledger's chat shape holds the item exactly:
  ``{"role": r, "content": c}`` (r one of user/system/developer/assistant) is the
  message itself; ``{"type": "function_call", "call_id", "name", "arguments"}`` an
  assistant message with that one tool call; ``{"type": "function_call_output",
  "call_id", "output": text}`` a tool message;
* **carried**, for every other item (output messages with ids and status,
  reasoning, custom tool calls, hosted tool calls, ...): a message whose content is
  one part ``{"type": "openai_agents_item", "item": <the item as given>}``. Its role
  says who produced the item (the item's own role; ``assistant`` for model output;
  ``user`` for other outputs given back to the model), and a function or custom tool
  call and its output still carry ``tool_calls`` / ``tool_call_id``, so the ledger
  pairs them as it pairs any call (Resume closes a call left without output; Fork
  never cuts between them).

:meth:`LedgerSession.pop_item` and :meth:`LedgerSession.clear_session` append a
``compacted`` record whose replacement history is the remaining items (none for
clear): the file stays append-only, replay shows the new view (with a
``compacted_rebuild`` entry in its degraded ledger), and the removed items stay in
the file. Messages not written by this adapter are read as items too: text or parts
as ``{"role", "content"}``, each tool call as a ``function_call`` /
``custom_tool_call``, a tool message as the matching ``*_call_output``, each
reasoning block as a ``reasoning`` item (summary text, encrypted content).

Limits: numbers inside items travel as doubles (integers beyond ±2**53 lose
precision); an output item whose call is not in the session's history is refused
by the writer (InvalidArgumentError), as the model API would refuse it; pop_item and
clear_session read the history then append, so two processes popping the same
session at the same moment may each remove the same item from their view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar, cast

from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from rollout_client._aio import AsyncRolloutClient
from rollout_client._records import Compaction, tool_call
from rollout_client._session import AsyncSession
from rollout_client._sync import RolloutClient
from shared.records import reasoning_blocks_of

T = TypeVar("T")

#: Type of the content part that carries an item the chat shape cannot hold exactly.
ITEM_PART = "openai_agents_item"
_CHAT_ROLES = frozenset({"user", "system", "developer", "assistant"})
_CALL_TYPES = {"function_call": "function", "custom_tool_call": "custom"}
_OUTPUT_TYPES = {"function": "function_call_output", "custom": "custom_tool_call_output"}
#: Item types the caller gives back to the model (not produced by it) besides outputs.
_CALLER_ITEMS = frozenset({"mcp_approval_response", "item_reference"})
_POP_SUMMARY = "openai-agents: pop_item"
_CLEAR_SUMMARY = "openai-agents: clear_session"


def _native_message(item: Mapping[str, Any]) -> dict[str, Any] | None:
    keys, kind = set(item), item.get("type")
    if (
        keys == {"role", "content"}
        and item["role"] in _CHAT_ROLES
        and isinstance(item["content"], str | list)
    ):
        return {"role": item["role"], "content": item["content"]}
    strings = all(isinstance(value, str) for value in item.values())
    if kind == "function_call" and keys == {"type", "call_id", "name", "arguments"} and strings:
        return {
            "role": "assistant",
            "tool_calls": [tool_call(item["call_id"], item["name"], item["arguments"])],
        }
    if kind == "function_call_output" and keys == {"type", "call_id", "output"} and strings:
        return {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
    return None


def _carried_message(item: Mapping[str, Any]) -> dict[str, Any]:
    kind, call_id = item.get("type"), item.get("call_id")
    message: dict[str, Any] = {"role": "assistant", "content": [{"type": ITEM_PART, "item": dict(item)}]}
    if kind in _CALL_TYPES and call_id and isinstance(call_id, str) and item.get("name"):
        call_type = _CALL_TYPES[kind]
        arguments = item.get("arguments" if call_type == "function" else "input", "")
        message["tool_calls"] = [tool_call(call_id, str(item["name"]), str(arguments), type=call_type)]
    elif kind in _OUTPUT_TYPES.values() and call_id and isinstance(call_id, str):
        message["role"] = "tool"
        message["tool_call_id"] = call_id
    elif item.get("role") in _CHAT_ROLES:
        message["role"] = item["role"]
    elif isinstance(kind, str) and (kind.endswith("_output") or kind in _CALLER_ITEMS):
        message["role"] = "user"
    return message


def item_to_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """The ledger message dict that stores one Agents SDK input item (native when that gives
    the item back exactly, else carried). Raises TypeError for an item that is not a dict."""
    if not isinstance(item, Mapping):
        raise TypeError(f"an Agents SDK input item is a dict, not {type(item).__name__}")
    native = _native_message(item)
    if native is not None and messages_to_items([native]) == [dict(item)]:
        return native
    return _carried_message(item)


def _carried_item(message: Mapping[str, Any]) -> dict[str, Any] | None:
    content = message.get("content")
    if isinstance(content, list) and len(content) == 1:
        part = content[0]
        if isinstance(part, dict) and part.get("type") == ITEM_PART and set(part) == {"type", "item"}:
            item = part["item"]
            return item if isinstance(item, dict) else None
    return None


def messages_to_items(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Agents SDK input items of a replayed message sequence, in order (see the module
    docstring for messages this adapter did not write)."""
    items: list[dict[str, Any]] = []
    call_types: dict[str, str] = {}
    for message in messages:
        calls = message.get("tool_calls") or []
        for call in calls:
            call_types[call.get("id", "")] = call.get("type", "function")
        carried = _carried_item(message)
        if carried is not None:
            items.append(carried)
            continue
        for block in reasoning_blocks_of(message):
            reasoning: dict[str, Any] = {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": block.get("content", "")}],
            }
            if "encrypted" in block:
                reasoning["encrypted_content"] = block["encrypted"]
            items.append(reasoning)
        content = message.get("content")
        if message.get("role") == "tool":
            call_id = str(message.get("tool_call_id", ""))
            kind = _OUTPUT_TYPES.get(call_types.get(call_id, "function"), "function_call_output")
            items.append({"type": kind, "call_id": call_id, "output": content if content is not None else ""})
            continue
        if content is not None:
            items.append({"role": message.get("role", ""), "content": content})
        for call in calls:
            function = call.get("function", {})
            if call.get("type") == "custom":
                items.append(
                    {
                        "type": "custom_tool_call",
                        "call_id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "input": function.get("arguments", ""),
                    }
                )
            else:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "arguments": function.get("arguments", ""),
                    }
                )
    return items


class LedgerSession:
    """The Agents SDK ``Session`` protocol over ledger session ``session_id`` (an existing
    session: create it with ``client.create_session(...)``).

    ``session_settings.limit`` is the default of :meth:`get_items`' ``limit``. Errors are
    the client's typed errors (e.g. NotFoundError for an unknown id, SessionStoppedError when
    adding to a stopped session).
    """

    def __init__(
        self,
        session_id: str,
        *,
        client: RolloutClient | AsyncRolloutClient,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self._blocking = client if isinstance(client, RolloutClient) else None
        core = client.core if isinstance(client, RolloutClient) else client
        self._session: AsyncSession = core.session(session_id)

    async def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._blocking is None:
            return await coroutine
        return await asyncio.wrap_future(self._blocking.submit(coroutine))

    async def _items(self) -> list[dict[str, Any]]:
        replay = await self._run(self._session.replay())
        return messages_to_items(replay.messages)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, oldest first; with ``limit`` only the latest ``limit`` items (0: none;
        a negative limit: all, as SQLiteSession does). One replay of the session."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = await self._items()
        if limit is not None and limit >= 0:
            items = items[len(items) - limit :] if limit else []
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in order, as one atomic request (exactly once)."""
        if items:
            await self._run(
                self._session.append(*(item_to_message(cast(Mapping[str, Any], i)) for i in items))
            )

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (None when empty): appends a compaction whose
        replacement history is every other item."""
        items = await self._items()
        if not items:
            return None
        last = items.pop()
        history = [item_to_message(item) for item in items]
        await self._run(self._session.append(Compaction(_POP_SUMMARY, history)))
        return cast(TResponseInputItem, last)

    async def clear_session(self) -> None:
        """Empty the history: appends a compaction with an empty replacement history."""
        await self._run(self._session.append(Compaction(_CLEAR_SUMMARY, [])))
