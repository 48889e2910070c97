"""An OpenAI Agents SDK session over the ledger: ``LedgerSession`` (``pip install
rollout-ledger[agents]``).

``Runner.run(agent, "...", session=LedgerSession("chat-42", client=client))`` keeps the
run's history in a ledger session instead of a local database: durable, shared by every
process that opens the same id, replayable and forkable like any session. It behaves as
the SDK's own ``SQLiteSession`` does on the SDK's own tests (docs/spec.md §11):

* **ids**: ``session_id`` is any string, as for ``SQLiteSession``: a key naming one ledger
  session of the caller's tenant (``client.create_session(session_key=...)``, created on the
  first ``add_items``; until then the history is empty), or the id of an existing ledger
  session;
* **exact items**: every item comes back equal as JSON, with its key order, integers of
  any size and floats as floats (see "How items are stored");
* **atomic pops**: ``pop_item`` takes the last item out with a ``retraction`` record sent
  with ``expected_next_seq`` (compare-and-swap on the session's next seq), so two pops,
  in one process or several, never return the same item, and a pop never removes an item
  added after the one it returns; its cost does not grow with the history, and nothing is
  rewritten. ``clear_session`` appends an empty compaction;
* **mutations finish what they started**: a cancelled ``add_items``, ``pop_item`` or
  ``clear_session`` is waited for (its outcome is in the ledger, or not written) before
  the cancellation is raised;
* **appends over a kept stream**: ``add_items``, ``pop_item`` and ``clear_session`` are sent on
  one writer ``AppendStream`` per session object and event loop, kept open between calls
  (:mod:`rollout_client._kept_stream`; closed by ``close()``), each exactly once as a unary
  Append is: a request whose answer the stream does not give is settled by the unary path
  with the same request id;
* ``get_items(limit=N)`` reads the last N messages from the reader's rendered copy
  (``GetRecentMessages``), not a replay of the whole session;
* **reads name the view held**: the object keeps the end of the view it last read or wrote
  (up to :data:`VIEW_BYTES` of items) and each read asks the reader for what followed it
  (``since_next_seq``): one call, that sees every acknowledged append of any process, whose
  reply carries only the new messages, or the whole answer when the reader finds that
  something before them changed (a pop, a compaction; shared.rebuild.view_continues). Every
  item returned is a fresh object;
* **automatic compaction**: the SDK's ``OpenAIResponsesCompactionSession`` (and
  ``EncryptedSession``) compact the latest exchange of a longer history in place, as over
  SQLiteSession: :meth:`LedgerSession._get_compaction_snapshot` gives them the last items and
  replaces a suffix of them with one compare-and-swap append (a ``retraction`` of its messages,
  then the summary items);
* ``close()``; after it, every call raises RuntimeError ("<class> is closed").

The SDK's own session tests (its source package's, ``SQLiteSession`` swapped for this class) run
against it in tests/client/test_agents_peer_suite.py, with the cases that hold for SQLite alone
listed there with their reasons.

``client`` is a :class:`rollout_client.RolloutClient` or an
:class:`rollout_client.AsyncRolloutClient`; either way the calls run on the caller's event loop
through the asyncio client (a blocking client's ``core``, whose channels are per loop), with no
hop to another thread and back: the Session protocol is asyncio, so its caller has a loop.

How items are stored (one ledger ``message`` per item):

* **native**, when the ledger's chat shape holds the item exactly, key order included:
  ``{"role": r, "content": "text"}`` (r one of user/system/developer/assistant) is the
  message itself; ``{"type": "function_call", "call_id", "name", "arguments"}`` an
  assistant message with that one tool call; ``{"type": "function_call_output",
  "call_id", "output": "text"}`` a tool message;
* **carried**, for every other item: a message whose content is one part ``{"type":
  "openai_agents_item", "json": <the item as JSON text>}`` (``"codec": "json"`` added when
  only Python's json module reads the text back exactly: integers beyond 64 bits, NaN;
  written and read by :mod:`rollout_client._carried`, which the ``rollout`` command reads too).
  Its role says who produced the item (the item's own role; ``assistant`` for model
  output; ``user`` for other outputs given back to the model), and a function or custom
  tool call and its output still carry ``tool_calls`` / ``tool_call_id``, so the ledger
  pairs them as it pairs any call (Resume closes a call left without output; Fork never
  cuts between them). An output whose call the session does not hold is carried
  unpaired (``role`` user), as a ``SQLiteSession`` stores it.

Messages not written by this adapter are read as items too: text or parts as ``{"role",
"content"}``, each tool call as a ``function_call`` / ``custom_tool_call``, a tool message as
the matching ``*_call_output``, each reasoning block as a ``reasoning`` item (summary text,
encrypted content); popping one of several items a message holds retracts the message and
appends the others again, in the same request.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, TypeVar, cast

import orjson
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session import _CompactionSnapshot
from agents.memory.session_settings import coerce_session_settings

from rollout.v1 import reader_pb2
from rollout_client._aio import AsyncRolloutClient
from rollout_client._appends import Attempts, is_reply_too_large
from rollout_client._carried import (
    AGENTS_ITEM_PART,
    agents_item_part,
    carried_agents_item,
    carried_agents_item_text,
)
from rollout_client._errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from rollout_client._loops import PerLoop
from rollout_client._records import (
    Compaction,
    MessageRef,
    Record,
    Retraction,
    encoded_message,
    tool_call,
)
from rollout_client._results import AppendResult
from rollout_client._session import AsyncSession
from rollout_client._sync import RolloutClient
from shared.rebuild import collector_paused
from shared.records import reasoning_blocks_of

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Type of the content part that carries an item the chat shape cannot hold exactly.
ITEM_PART = AGENTS_ITEM_PART
_CHAT_ROLES = frozenset({"user", "system", "developer", "assistant"})
_CALL_TYPES = {"function_call": "function", "custom_tool_call": "custom"}
_OUTPUT_TYPES = {"function": "function_call_output", "custom": "custom_tool_call_output"}
#: Item types the caller gives back to the model (not produced by it) besides outputs.
_CALLER_ITEMS = frozenset({"mcp_approval_response", "item_reference"})
_POP_REASON = "openai-agents: pop_item"
_CLEAR_SUMMARY = "openai-agents: clear_session"
_COMPACTION_REASON = "openai-agents: compaction"
#: The Session calls a subclass may override: then it gets no compaction snapshot (see
#: :meth:`LedgerSession._get_compaction_snapshot`).
_ITEM_CALLS = ("get_items", "add_items", "pop_item", "clear_session")
#: Key orders of the items stored natively (anything else is carried).
_NATIVE_KEYS = {
    None: ("role", "content"),
    "function_call": ("type", "call_id", "name", "arguments"),
    "function_call_output": ("type", "call_id", "output"),
}
#: Messages of the view a session object reads at least for its next pops, and keeps at least.
TAIL_MESSAGES = 64
#: Bytes of item text a session object keeps of the view it last read or wrote (its last messages,
#: TAIL_MESSAGES at least): a later read asks the reader only for what changed since.
VIEW_BYTES = 4 * 1024 * 1024

#: One item of a kept view: its JSON text, parsed afresh with orjson for each caller; or, for an item
#: only Python's json module reads back exactly (see :mod:`rollout_client._carried`), the item
#: itself, deep-copied for each caller. Either way no caller holds the view's own objects.
HeldItem = str | bytes | dict[str, Any]


def fresh_item(held: HeldItem) -> dict[str, Any]:
    """A new copy of a kept item (:data:`HeldItem`)."""
    if isinstance(held, dict):
        return copy.deepcopy(held)
    item: dict[str, Any] = orjson.loads(held)
    return item


def _held_size(held: HeldItem) -> int:
    """What a kept item counts against :data:`VIEW_BYTES` (its text's length; a held dict's repr's)."""
    return len(held) if not isinstance(held, dict) else len(repr(held))


def _native_message(item: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ledger message that is ``item`` exactly, or None (see the module doc)."""
    kind = item.get("type")
    order = _NATIVE_KEYS.get(kind) if isinstance(kind, str | None) else None
    if order is None or tuple(item) != order or not all(type(value) is str for value in item.values()):
        return None
    if kind is None:
        if item["role"] not in _CHAT_ROLES:
            return None
        return {"role": item["role"], "content": item["content"]}
    if kind == "function_call":
        return {
            "role": "assistant",
            "tool_calls": [tool_call(item["call_id"], item["name"], item["arguments"])],
        }
    return {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}


def _carried_message(item: Mapping[str, Any], paired: bool = True) -> dict[str, Any]:
    kind, call_id = item.get("type"), item.get("call_id")
    message: dict[str, Any] = {"role": "assistant", "content": [agents_item_part(item)]}
    if kind in _CALL_TYPES and call_id and isinstance(call_id, str) and item.get("name"):
        call_type = _CALL_TYPES[kind]
        arguments = item.get("arguments" if call_type == "function" else "input", "")
        message["tool_calls"] = [tool_call(call_id, str(item["name"]), str(arguments), type=call_type)]
    elif paired and kind in _OUTPUT_TYPES.values() and call_id and isinstance(call_id, str):
        message["role"] = "tool"
        message["tool_call_id"] = call_id
    elif item.get("role") in _CHAT_ROLES:
        message["role"] = item["role"]
    elif isinstance(kind, str) and (kind.endswith("_output") or kind in _CALLER_ITEMS):
        message["role"] = "user"
    return message


def item_to_message(item: Mapping[str, Any], paired: bool = True) -> dict[str, Any]:
    """The ledger message dict that stores one Agents SDK input item (native when that gives the
    item back exactly, key order included, else carried). ``paired`` False carries an output
    without ``tool_call_id`` (its call is not in the session). Raises TypeError for an item that
    is not a dict."""
    if not isinstance(item, Mapping):
        raise TypeError(f"an Agents SDK input item is a dict, not {type(item).__name__}")
    native = _native_message(item) if paired else None
    return native if native is not None else _carried_message(item, paired)


def _carried_item(message: Mapping[str, Any]) -> dict[str, Any] | None:
    content = message.get("content")
    if not (isinstance(content, list) and len(content) == 1):
        return None
    return carried_agents_item(content[0])


def message_items(message: Mapping[str, Any], call_types: dict[str, str]) -> list[dict[str, Any]]:
    """The Agents SDK input items one replayed message holds, in order (``call_types`` maps the
    call ids seen so far to their type, and learns this message's calls)."""
    calls = message.get("tool_calls") or []
    for call in calls:
        call_types[call.get("id", "")] = call.get("type", "function")
    carried = _carried_item(message)
    if carried is not None:
        return [carried]
    items: list[dict[str, Any]] = []
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
        return items
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


def canonical_items(
    raw_messages: Sequence[bytes],
) -> tuple[list[list[dict[str, Any]]], list[list[HeldItem]]]:
    """Per message of a GetRecentMessages reply's canonical JSON, the items it holds, and the forms
    a view keeps them in (:data:`HeldItem`; the hot path of :meth:`LedgerSession.get_items`: a
    carried item is parsed straight from its part, whose text is kept). The cyclic collector is
    paused meanwhile (shared.rebuild.collector_paused): the items hold no cycles, and each
    collection during the parse would walk every item parsed so far, and the caller's heap (a
    quarter of the parse's time in a process that imported the Agents SDK)."""
    loads, dumps = orjson.loads, orjson.dumps
    call_types: dict[str, str] = {}
    out: list[list[dict[str, Any]]] = []
    kept: list[list[HeldItem]] = []
    with collector_paused():
        for raw in raw_messages:
            message = loads(raw)
            content = message.get("content")
            if type(content) is list and len(content) == 1 and "tool_calls" not in message:
                carried = carried_agents_item_text(content[0])
                if carried is not None:
                    item, text = carried
                    out.append([item])
                    kept.append([text if text is not None else copy.deepcopy(item)])
                    continue
            items = message_items(message, call_types)
            out.append(items)
            kept.append([dumps(item) for item in items])
    return out, kept


def _held_of_sent(item: Mapping[str, Any], message: Mapping[str, Any]) -> HeldItem:
    """The kept form of an item as the reader will give it back, from the message that stores it
    (:func:`item_to_message`): a carried item's text, or a native item's JSON."""
    content = message.get("content")
    if type(content) is list:  # carried: a native message holds text, or no content
        part = content[0]
        if "codec" not in part:
            text: str = part["json"]
            return text
        return cast(dict[str, Any], carried_agents_item(part))  # as the reader's copy reads it
    return orjson.dumps(item)


def messages_to_items(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Agents SDK input items of a replayed message sequence, in order (see the module
    docstring for messages this adapter did not write)."""
    call_types: dict[str, str] = {}
    return [item for message in messages for item in message_items(message, call_types)]


#: One message of a view: its origin (seq, and index in a compaction's replacement history or -1:
#: a MessageRef made only when a retraction names it, :func:`_ref`), and the items it holds.
_Held = tuple[tuple[int, int], list[HeldItem]]


def _ref(origin: tuple[int, int]) -> MessageRef:
    """The MessageRef of a view entry's origin."""
    seq, index = origin
    return MessageRef(seq, index if index >= 0 else None)


@dataclass
class _Tail:
    """The end of the session's view as this object last knew it: per message, its origin and
    the items it holds; ``next_seq`` the session's next seq then; ``message_count`` the messages
    of the whole view (a lower bound unless ``count_exact``). A pop is sent with
    ``expected_next_seq=next_seq``: a stale tail is refused by the writer, never acted on; a read
    asks the reader only for what followed it (RecentMessagesRequest.since_next_seq), and the
    reader, not this object, says whether anything before its end changed."""

    entries: list[_Held]
    next_seq: int
    message_count: int
    count_exact: bool = True
    held_bytes: int = field(default=-1, repr=False)

    def __post_init__(self) -> None:
        if self.held_bytes < 0:
            self.held_bytes = sum(map(_held_size, chain.from_iterable(items for _, items in self.entries)))

    @property
    def whole(self) -> bool:
        """Whether it holds every message of the view."""
        return self.count_exact and len(self.entries) == self.message_count

    def answers(self, items: int | None) -> bool:
        """Whether it holds what a read asks for: every item (None), or the last ``items``."""
        if self.whole:
            return True
        if items is None:
            return False
        held = 0
        for _, kept in reversed(self.entries):
            held += len(kept)
            if held >= items:
                return True
        return False

    def push(self, entries: Sequence[_Held]) -> None:
        """Add messages appended after its end (the caller sets ``next_seq``), then :meth:`trim`."""
        self.entries.extend(entries)
        self.message_count += len(entries)
        self.held_bytes += sum(_held_size(held) for _, items in entries for held in items)
        self.trim()

    def drop_last(self) -> None:
        """Take its last message out (a pop; the caller sets ``next_seq``)."""
        _, items = self.entries.pop()
        self.message_count -= 1
        self.held_bytes -= sum(map(_held_size, items))

    def trim(self) -> _Tail:
        """Keep only its last messages within :data:`VIEW_BYTES` (TAIL_MESSAGES at least); itself."""
        first = 0
        entries = self.entries
        while self.held_bytes > VIEW_BYTES and len(entries) - first > TAIL_MESSAGES:
            self.held_bytes -= sum(map(_held_size, entries[first][1]))
            first += 1
        del entries[:first]
        return self


def _continued(held: _Tail, reply: reader_pb2.RecentMessagesResponse, entries: list[_Held]) -> _Tail | None:
    """The view read when the reader says the kept view ``held`` (unchanged since it was named in
    the request) continues into the reply (``continues_view``): ``held`` itself, grown by the
    reply's messages ``entries`` (:meth:`_Tail.push`), or those alone when they do not start
    where ``held`` ends. None when the counts disagree with ``held``'s (read the view in full)."""
    count, exact = reply.message_count, not reply.message_count_at_least
    if not entries and reply.next_seq == held.next_seq:  # nothing written since
        if held.count_exact and (count > held.message_count or (exact and count != held.message_count)):
            return None
        return held
    start = count - len(entries)
    if held.count_exact and exact and start == held.message_count:
        held.push(entries)
        held.next_seq = reply.next_seq
        return held
    if held.count_exact and start < held.message_count:
        return None
    return _Tail(entries, reply.next_seq, count, exact)


def _items_of(
    view: _Tail | None, parsed: list[list[dict[str, Any]]], limit: int | None
) -> list[dict[str, Any]]:
    """The last ``limit`` items (all for None) of a view read, oldest first: those of its last
    messages from ``parsed`` (the items just parsed for them), of the others fresh copies
    (:func:`fresh_item`). ``view`` None: ``parsed`` holds every message."""
    if view is None or len(parsed) == len(view.entries):
        items = [item for held in parsed for item in held]
    else:
        old = len(view.entries) - len(parsed)
        taken: list[list[dict[str, Any]]] = []
        count = 0
        with collector_paused():
            for position in range(len(view.entries) - 1, -1, -1):
                if limit is not None and count >= limit:
                    break
                if position >= old:
                    held_items = parsed[position - old]
                else:
                    held_items = [fresh_item(held) for held in view.entries[position][1]]
                taken.append(held_items)
                count += len(held_items)
        items = [item for held_items in reversed(taken) for item in held_items]
    return items if limit is None else items[max(0, len(items) - limit) :]


@dataclass
class _Attachment:
    """The ledger session a LedgerSession names, once known to exist."""

    session: AsyncSession
    tail: _Tail | None = None
    locks: PerLoop[asyncio.Lock] = field(default_factory=lambda: PerLoop(asyncio.Lock))

    def lock(self) -> asyncio.Lock:
        """This object's lock for mutations in the running loop (one per loop; a closed loop's is
        dropped, so a later loop at the same address never meets a lock bound to it)."""
        return self.locks.get()


async def _finish(started: Awaitable[T]) -> T:
    """Await a mutation to its outcome: a cancellation of the caller is raised only once the
    mutation has finished (its records written, or not), as SQLiteSession's thread finishes."""
    task = asyncio.ensure_future(started)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled() and task.exception() is not None:
            log.warning("a cancelled session call failed: %s", task.exception())
        raise cancelled
    return task.result()


def _suffix_replacement(
    view: _Tail, first: int, prune_prefix: Callable[[TResponseInputItem], bool] | None
) -> tuple[Retraction, list[dict[str, Any]]]:
    """For a compaction snapshot's replacement: the retraction of the messages that hold the view's
    items from ``first`` on (with ``prune_prefix``, also of the leading messages all of whose items
    it accepts, up to the first that has one it refuses), and the items of the first of those
    messages that come before ``first`` (sent again after the retraction)."""
    retracted: list[MessageRef] = []
    lead: list[dict[str, Any]] = []
    position = 0
    pruning = prune_prefix is not None
    for origin, held in view.entries:
        end = position + len(held)
        if end > first:
            if position < first:
                lead = [fresh_item(item) for item in held[: first - position]]
            retracted.append(_ref(origin))
        elif (
            pruning
            and prune_prefix is not None
            and all(prune_prefix(cast(Any, fresh_item(item))) for item in held)
        ):
            retracted.append(_ref(origin))
        else:
            pruning = False
        position = end
    return Retraction(retracted, _COMPACTION_REASON), lead


class LedgerSession:
    """The Agents SDK ``Session`` protocol over a ledger session (see the module doc).

    ``session_id``: any string naming one session of the caller's tenant (or a ledger
    session's id). ``session_settings``: a SessionSettings or a dict of its fields
    (``limit`` is the default of :meth:`get_items`' limit). ``tenant``: without
    authentication, the tenant the session is kept in. Errors are the client's typed errors
    (e.g. SessionStoppedError when adding to a stopped session); RuntimeError after
    :meth:`close`.
    """

    def __init__(
        self,
        session_id: str,
        *,
        client: RolloutClient | AsyncRolloutClient,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        tenant: str = "",
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self._tenant = tenant
        self._core = client.core if isinstance(client, RolloutClient) else client
        self._attached: _Attachment | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<LedgerSession {self.session_id!r}>"

    # -- running calls ---------------------------------------------------------------

    def _check_open(self) -> None:
        """Raise RuntimeError ("<class> is closed") after :meth:`close`."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def _run(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``call()`` here, on the caller's loop (the asyncio client serves any loop)."""
        self._check_open()
        return await call()

    async def _mutate(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """:meth:`_run` for a mutation: finished before a cancellation is raised (:func:`_finish`)."""
        self._check_open()
        return await _finish(call())

    async def _attach(self, create: bool) -> _Attachment | None:
        """The ledger session this object names (created when ``create``), or None (not yet)."""
        if self._attached is not None:
            return self._attached
        session_id, found = await self._core.resolve_session(self.session_id, tenant=self._tenant)
        session: AsyncSession | None = None
        made = False
        if not found:
            if not create:
                return None
            try:
                session = await self._core.create_session(session_key=self.session_id, tenant=self._tenant)
                made = True
            except AlreadyExistsError as taken:  # another call or process created it meanwhile
                session_id = taken.session_id or session_id
        if session is None:
            session = self._core.session(session_id)
            if create:
                await self._writer_knows(session)
        if self._attached is None:
            session.keep_stream()
            self._attached = _Attachment(session)
            if made and session.next_seq is not None:  # created by this call: its view is empty
                self._attached.tail = _Tail([], session.next_seq, 0)
        return self._attached

    async def _writer_knows(self, session: AsyncSession) -> None:
        """Learn the session's next seq from the writer, waiting (with the client's backoff, within
        its deadline) while the writer answers NOT_FOUND: a session another caller is creating is
        already taken (ALREADY_EXISTS) and its file may be seen by readers before the writer
        accepts appends to it. Raises NotFoundError once the deadline has passed."""
        attempts = Attempts(self._core.retry)
        while True:
            try:
                session.learn_next_seq(await self._core.next_seq(session.id))
                return
            except NotFoundError:
                if not await attempts.wait():
                    raise

    # -- reads -------------------------------------------------------------------------

    async def _read_tail(
        self, attached: _Attachment, items: int | None
    ) -> tuple[_Tail | None, list[list[dict[str, Any]]]]:
        """The last messages of the view, at least ``items`` items (all of the view for None): the
        view read (each message's origin and items, ending at the view's end; the object's kept
        view itself when it continues, so use it before the next await), and the items just
        parsed for its last messages (those the reply carried; :func:`_items_of` copies the
        others). The view read is kept (its end, :meth:`_Tail.trim`) for the next reads and pops.
        When the kept view can answer, the request names it (since_next_seq) and the reader sends
        only what followed it, unless something before it changed; a view too large for one reply
        is read with StreamReplay (no view: every message's items, no origins)."""
        want = TAIL_MESSAGES if items is None else max(items, 1)
        held = attached.tail
        since = held if held is not None and held.answers(items) else None
        while True:
            request = reader_pb2.RecentMessagesRequest(
                session_id=attached.session.id, limit=0 if items is None else want, canonical=True
            )
            named = -1  # the next seq of the view named: every change to a kept view moves it
            if since is not None:
                named = request.since_next_seq = since.next_seq
                if since.count_exact:
                    request.since_message_count = since.message_count
            try:
                reply = await self._core.call(self._core.reader_stub.GetRecentMessages, request)
            except ResourceExhaustedError as error:
                if not is_reply_too_large(error):
                    raise
                return None, await self._stream_items(attached)
            parsed, held_items = canonical_items(reply.canonical_messages)
            entries: list[_Held] = list(
                zip(
                    zip(reply.origin_seqs, reply.origin_history_indexes, strict=True), held_items, strict=True
                )
            )
            read: _Tail | None = None
            if since is not None and reply.continues_view:
                if attached.tail is since and since.next_seq == named:  # not changed meanwhile
                    read = _continued(since, reply, entries)
                if read is None or not read.answers(items):
                    since = None  # ask for the view itself
                    continue
            else:
                read = _Tail(entries, reply.next_seq, reply.message_count, not reply.message_count_at_least)
                if not read.answers(items) and len(entries) < reply.message_count:
                    want *= 2
                    continue
            if read is not since:
                attached.tail = read
                if read.held_bytes > VIEW_BYTES:  # kept trimmed; the whole read is answered from
                    attached.tail = _Tail(
                        list(read.entries),
                        read.next_seq,
                        read.message_count,
                        read.count_exact,
                        read.held_bytes,
                    ).trim()
            if attached.session.next_seq is None:
                attached.session.learn_next_seq(reply.next_seq)
            return read, parsed

    async def _stream_items(self, attached: _Attachment) -> list[list[dict[str, Any]]]:
        """Every message's items read with StreamReplay: for a view too large for one unary reply
        (no origins come with it: the next pop reads the tail again)."""
        call_types: dict[str, str] = {}
        per_message = [
            message_items(message, call_types) async for message in attached.session.stream_replay()
        ]
        attached.tail = None
        return per_message

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, oldest first; with ``limit`` only the latest ``limit`` items (0: none; a
        negative limit: all, as SQLiteSession does). One GetRecentMessages call."""
        if limit is None:
            limit = self.session_settings.limit
        if limit == 0:
            return []

        async def read() -> list[dict[str, Any]]:
            attached = await self._attach(create=False)
            if attached is None:
                return []
            wanted = limit if limit is not None and limit > 0 else None
            try:
                view, parsed = await self._read_tail(attached, wanted)
            except NotFoundError:
                return []
            return _items_of(view, parsed, wanted)

        return cast(list[TResponseInputItem], await self._run(read))

    # -- mutations ---------------------------------------------------------------------

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in order, as one atomic request (exactly once); the session is
        created on the first call."""
        self._check_open()
        if not items:
            return
        messages = [item_to_message(cast(Mapping[str, Any], item)) for item in items]

        async def add() -> None:
            attached = await self._attach(create=True)
            assert attached is not None
            async with attached.lock():
                await self._append_items(attached, list(cast(list[dict[str, Any]], items)), messages)

        await self._mutate(add)

    async def _send_items(
        self,
        attached: _Attachment,
        items: Sequence[Mapping[str, Any]],
        messages: list[dict[str, Any]],
        *,
        before: Sequence[Record] = (),
        expected_next_seq: int | None = None,
    ) -> tuple[AppendResult, list[dict[str, Any]]]:
        """Append ``before`` then ``messages`` (one per item), as one request; the result and the
        messages sent. An output whose call the session does not hold is refused by the writer
        (``tool_call_id``): the items are then sent again carried unpaired, as SQLite keeps it."""
        try:
            result = await attached.session.append(
                *before, *map(encoded_message, messages), expected_next_seq=expected_next_seq
            )
        except InvalidArgumentError as refused:
            if not any(v.field.endswith("tool_call_id") for v in refused.field_violations):
                raise
            messages = [item_to_message(item, paired=False) for item in items]
            result = await attached.session.append(
                *before, *map(encoded_message, messages), expected_next_seq=expected_next_seq
            )
        return result, messages

    async def _append_items(
        self, attached: _Attachment, items: list[dict[str, Any]], messages: list[dict[str, Any]]
    ) -> None:
        result, messages = await self._send_items(attached, items, messages)
        tail = attached.tail
        if tail is None or result.seqs[0] != tail.next_seq or any(m.get("role") == "tool" for m in messages):
            attached.tail = None  # a tool output may have replaced another in place: read it again
            return
        tail.push(
            [
                ((seq, -1), [_held_of_sent(item, message)])
                for seq, item, message in zip(result.seqs, items, messages, strict=True)
            ]
        )
        tail.next_seq = result.next_seq

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (None when empty): a retraction of its message sent
        with expected_next_seq, so it applies to exactly the view it was chosen from."""

        async def pop() -> dict[str, Any] | None:
            attached = await self._attach(create=False)
            if attached is None:
                return None
            async with attached.lock():
                while True:
                    tail = attached.tail
                    if tail is None or (not tail.entries and not tail.whole):
                        await self._read_tail(attached, TAIL_MESSAGES)  # one read for the next pops too
                        tail = attached.tail
                    assert tail is not None
                    # The next seq first, then the item: a pop or add of another loop (its own
                    # thread) changes the entries before the next seq, so an item chosen from
                    # newer entries is sent with an older next seq and refused, never retracted
                    # twice.
                    expected_next_seq = tail.next_seq
                    if not tail.entries:
                        return None
                    origin, held = tail.entries[-1]
                    items = [fresh_item(item) for item in held]
                    rest = items[:-1]
                    records: list[Record] = [Retraction([_ref(origin)], _POP_REASON)]
                    records.extend(encoded_message(item_to_message(item)) for item in rest)
                    try:
                        result = await attached.session.append(*records, expected_next_seq=expected_next_seq)
                    except FailedPreconditionError as moved:
                        if moved.next_seq is None:
                            raise
                        attached.tail = None  # the session moved on: read its tail again
                        continue
                    tail.drop_last()
                    tail.push(
                        [((seq, -1), [item]) for seq, item in zip(result.seqs[1:], held[:-1], strict=True)]
                    )
                    tail.next_seq = result.next_seq
                    return items[-1]

        return cast(TResponseInputItem | None, await self._mutate(pop))

    async def clear_session(self) -> None:
        """Empty the history: appends a compaction with an empty replacement history."""

        async def clear() -> None:
            attached = await self._attach(create=False)
            if attached is None:
                return
            async with attached.lock():
                result = await attached.session.append(Compaction(_CLEAR_SUMMARY, []))
                attached.tail = _Tail([], result.next_seq, 0)

        await self._mutate(clear)

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[TResponseInputItem], bool] | None = None
    ) -> _CompactionSnapshot | None:
        """The SDK's hook for automatic compaction (``OpenAIResponsesCompactionSession`` and
        ``EncryptedSession`` call it on the session they wrap, as on a SQLiteSession): the last
        ``limit`` items, whether they are the whole history, and ``replace_suffix(start, output)``.
        That replaces ``items[start:]`` with ``output`` in one append sent with the next seq of the
        view read (a retraction of their messages, then the output), first taking out the leading
        history items ``prune_prefix`` accepts (whole messages, up to the first it refuses); it
        returns False, writing nothing, when the session changed since the read. None (the SDK then
        compacts a complete history only) for a subclass that overrides an item call, whose own
        handling of items a replacement would bypass (as SQLiteSession does), and for a view too
        large for one reply."""
        if limit < 1 or any(
            getattr(type(self), call) is not getattr(LedgerSession, call) for call in _ITEM_CALLS
        ):
            return None

        async def read() -> _Tail | None:
            attached = await self._attach(create=False)
            if attached is None:
                return _Tail([], 0, 0)
            try:
                view, _ = await self._read_tail(attached, None if prune_prefix is not None else limit)
            except NotFoundError:
                return _Tail([], 0, 0)
            if view is None:
                return None
            # A copy: later pops change the kept view in place, and a replacement applies to this one.
            return _Tail(
                list(view.entries), view.next_seq, view.message_count, view.count_exact, view.held_bytes
            )

        view = await self._run(read)
        if view is None:
            return None
        items = [fresh_item(item) for _, held in view.entries for item in held]
        window = items[-limit:]

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            if not window[start:]:
                return False
            retraction, lead = _suffix_replacement(view, len(items) - len(window) + start, prune_prefix)
            replacement = [*lead, *cast(list[dict[str, Any]], output)]
            messages = [item_to_message(item) for item in replacement]

            async def replace() -> bool:
                attached = self._attached
                if attached is None:
                    return False
                async with attached.lock():
                    try:
                        await self._send_items(
                            attached,
                            replacement,
                            messages,
                            before=[retraction],
                            expected_next_seq=view.next_seq,
                        )
                    except FailedPreconditionError as moved:
                        if moved.next_seq is None:
                            raise
                        return False
                    finally:
                        attached.tail = None  # read it again
                return True

            return await self._mutate(replace)

        complete = view.whole and len(items) <= limit
        return _CompactionSnapshot(cast(list[TResponseInputItem], window), complete, replace_suffix)

    def close(self) -> None:
        """Release this session object: later calls raise RuntimeError (the client stays open;
        it is the caller's). Closing twice is harmless."""
        self._closed = True
        if self._attached is not None:
            self._attached.session.close_stream()
        self._attached = None


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    """SessionSettings from a SessionSettings, a dict of its fields, or None (the defaults), as
    the SDK's own sessions take them (TypeError for unknown keys, a validation error for a bad
    value)."""
    return SessionSettings() if value is None else coerce_session_settings(cast(Any, value))
