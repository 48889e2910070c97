"""A LangGraph checkpointer over the ledger: ``LedgerSaver`` (``pip install rollout-ledger[langgraph]``).

``graph.compile(checkpointer=LedgerSaver(client))`` keeps every thread's checkpoints in the
ledger: durable, shared by every process that opens the same thread, replayable with
``rollout replay`` and forkable like any session. ``client`` is a
:class:`rollout_client.RolloutClient` (sync and async methods both work, from any thread or
event loop) or an :class:`rollout_client.AsyncRolloutClient` (async methods on one event loop;
the sync methods from other threads while that loop runs, as LangGraph's async savers do).

* **threads**: a thread is the session its id names as a session key in the saver's tenant
  (``create_session(session_key=thread_id)``; the id is derived from tenant and key, so the
  lookup needs no table and is unique per tenant; after a deletion, the key's next id). The first write creates it; two savers
  racing on a new thread both end up on the one session (the loser's ALREADY_EXISTS names
  it). Reads of a thread never written find nothing and create nothing.
* **records** (``shared.records``, "LangGraph checkpoints"): ``put`` appends one
  ``langgraph.checkpoint`` event, ``put_writes`` one ``langgraph.writes`` event; namespaces
  (subgraphs) are a field of each, listed apart as LangGraph expects (a config without
  ``checkpoint_ns`` lists them all). Values are serialized by ``self.serde`` (the serializer
  LangGraph gives the saver), bytes kept exactly.
* **appends** go over an AppendStream kept open per thread's session and event loop
  (:mod:`rollout_client._kept_stream`: a request on an open stream costs less than a unary
  call). ``put`` and ``put_writes`` still return only once their record is durable, each written
  exactly once as over a unary Append (an answer the stream loses is settled by the unary path
  with the same request id). A stream ends when its loop shuts down or the thread's state goes.
  One request at a time per thread: the calls made while one is in flight (LangGraph's loop
  sends a step's ``put_writes`` and ``put`` in the background, and with ``durability="async"``
  the next step's before those are done) go together in the next request, one round trip for
  all, each returning once it is durable (a request refused whole is sent again call by call).
* **only what changed is written**: a channel value is stored once per new version; a list
  value whose items start with the items of the version this saver last stored or read for
  that channel (compared by identity: LangGraph's reducers, ``add_messages`` among them, build
  the new list from the same item objects) is stored as a delta, its new items only. So the
  bytes per step do not grow with the history, and any checkpoint is restored exactly from
  its chain. An item changed in place (the same object, mutated) is not seen as a change:
  ``add_messages`` replaces a message by id with a new object, which is.
* **reads** (``get_tuple``, ``list``: ``filter``, ``before``, ``limit``, newest first) are
  served from a per-thread state in the saver, extended from the records it appends and
  from the session's new records only: each read asks the writer for the session's next seq
  (one small call, nothing written) and, when another process appended meanwhile, reads
  the records from the last one known on (``WatchSession`` from that seq). A thread is read
  whole once per saver, on its first use; no read re-reads the file. Values are
  deserialized when first asked for. The state lives in the saver rather than in a reader
  index because it is LangGraph's: channel versions, delta chains and values only the
  saver's serializer (with its allowlist) can read; a reader index would hold every
  session's, while a saver holds the threads it serves, and its own appends extend it
  without a read.
* **messages**: the ``messages`` channel of the root namespace (``messages_channel``) is also
  written as ledger ``message`` records (user, assistant with its tool calls, tool, system),
  new messages only; a list that does not extend the one shown (a message removed or
  replaced, time travel) is written as a ``compacted`` record whose replacement history is
  the whole list. ``rollout replay`` shows a LangGraph thread as any session. A tool message
  whose call the view does not hold, or another kind of item, is left out of the view (it
  stays in the checkpoint).
* ``copy_thread`` is a Fork of the source's session named by the target thread id
  (``ForkRequest.session_key``); ``prune`` and ``delete_for_runs`` append
  ``langgraph.removed`` records (the latter in every thread of the tenant: the ``langgraph``
  sessions the reader lists);
  ``delete_thread`` deletes the thread's session (DeleteSession). As with LangGraph's own
  savers, a thread written again after it starts over: the deletion releases the thread id
  as a session key, which then names a new session (docs/deletion.md §2.2; the deleted
  session's id is never used again). A saver of another process that had the thread
  attached finds it gone at its next read, and its next write goes to the new session.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import operator
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import orjson
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from rollout_client._aio import AsyncRolloutClient
from rollout_client._appends import Attempts
from rollout_client._errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from rollout_client._records import Compaction, EncodedMessage, Event, Record, message_json
from rollout_client._session import AsyncSession
from rollout_client._sync import RolloutClient
from shared.errors import RecordValidationError
from shared.records import (
    LANGGRAPH_CHECKPOINT_EVENT,
    LANGGRAPH_REMOVED_EVENT,
    LANGGRAPH_WRITES_EVENT,
    RecordType,
    typed_value,
    value_of_typed,
)
from shared.session_meta import recorded_tenant

T = TypeVar("T")

#: The channel whose messages are also written as ledger messages (LangGraph's MessagesState).
DEFAULT_MESSAGES_CHANNEL = "messages"

#: The agent name of the sessions threads are kept in (what delete_for_runs lists).
THREAD_AGENT = "langgraph"

#: A value not materialized yet.
_UNSET: Any = object()


def version_key(version: Any) -> str:
    """A LangGraph channel version as records keep it: its JSON text (types survive)."""
    return orjson.dumps(version).decode()


@dataclass(slots=True)
class _Blob:
    """One stored channel version: whole (``typed``), empty, or a delta over ``base``."""

    typed: tuple[str, bytes] | None = None
    empty: bool = False
    base: str | None = None
    keep: int = 0
    items: list[tuple[str, bytes]] = field(default_factory=list)
    value: Any = _UNSET  # the materialized list (lists only), shared by no caller


@dataclass(slots=True)
class _Stored:
    """One checkpoint of a namespace, as its record holds it."""

    checkpoint: tuple[str, bytes]
    metadata: tuple[str, bytes]
    parent: str | None
    versions: dict[str, str]
    loaded_metadata: Any = _UNSET


@dataclass(slots=True)
class _Write:
    task_id: str
    channel: str
    typed: tuple[str, bytes]
    task_path: str
    idx: int


#: A stored channel version as a record's ``blobs`` entry names it: (channel, version, blob, whether
#: it is the version the ledger view shows).
_NamedBlob = tuple[str, str, _Blob, bool]

#: What a record of the thread's session does to the saver's state: a parsed line (a record dict)
#: or, for a record this saver appended, the change itself, made from the values it serialized
#: (not decoded again from the record it sent).
_Pending = Mapping[str, Any] | Callable[[], None] | None


#: The most calls one request of a thread carries (the rest wait for the next one).
REQUEST_CALLS = 32


@dataclass(slots=True)
class _Outgoing:
    """The records of one ``put``, ``put_writes`` or removal, waiting for its thread's next
    request; ``change`` is what they do to the saver's state, taken once they are durable."""

    records: tuple[Record, ...]
    change: _Pending
    done: asyncio.Future[None]


@dataclass
class _Thread:
    """The saver's state of one thread's session: what its records up to ``next_seq`` say."""

    session: AsyncSession
    next_seq: int = 0
    pending: dict[int, _Pending] = field(default_factory=dict)
    checkpoints: dict[str, dict[str, _Stored]] = field(default_factory=dict)  # ns -> id -> stored
    order: dict[str, list[str]] = field(default_factory=dict)  # ns -> ids ascending
    blobs: dict[tuple[str, str, str], _Blob] = field(default_factory=dict)  # (ns, channel, version)
    writes: dict[tuple[str, str], dict[tuple[str, int], _Write]] = field(default_factory=dict)
    #: (ns, channel) -> (version, its list): the version of a list channel last stored or read,
    #: the base a new version of it may be a delta of.
    recent: dict[tuple[str, str], tuple[str, list[Any]]] = field(default_factory=dict)
    view_version: str | None = None  # the messages version the ledger view shows
    key: str = ""  # the thread id (its session_meta's session_key), once read
    lock: asyncio.Lock | None = None
    sending: bool = False  # a request of this thread is in flight
    outgoing: list[_Outgoing] = field(default_factory=list)  # calls waiting for the next request
    sender: asyncio.Task[None] | None = None  # sends the waiting calls once the request ends

    async def append(self, change: _Pending, *records: Record) -> None:
        """Append ``records`` (the first an event: one line) to the thread's session and take
        ``change`` at their seq; return once they are durable, with the append's errors.

        One request at a time per thread, sent by a task of the thread's own (no caller's
        cancellation stops a request in flight, whose records may land: their change is taken
        either way): a call made while one is in flight waits, and all the calls that waited go
        together in the next request (atomic: one round trip, one group commit), each returning
        once that request is durable. LangGraph's loop sends a step's ``put_writes`` and ``put``
        in the background, and with ``durability="async"`` the next step's before those are
        done: such calls share a round trip instead of queuing one by one. A call cancelled
        before its request is sent is not sent. A request the writer refuses as a whole
        (InvalidArgumentError, ResourceExhaustedError: nothing written) is sent again call by
        call, so that each call gets its own outcome."""
        outgoing = _Outgoing(records, change, asyncio.get_running_loop().create_future())
        self.outgoing.append(outgoing)
        if not self.sending:
            self.sending = True
            self.sender = asyncio.get_running_loop().create_task(self._send_waiting())
        await outgoing.done

    def _take(self) -> list[_Outgoing]:
        """The waiting calls the next request carries (those whose caller stopped waiting: none)."""
        taken = [outgoing for outgoing in self.outgoing[:REQUEST_CALLS] if not outgoing.done.done()]
        del self.outgoing[:REQUEST_CALLS]
        return taken

    async def _send_waiting(self) -> None:
        """Send the calls that waited, a request at a time, until none waits."""
        try:
            while self.outgoing:
                await self._send(self._take())
        finally:
            left, self.outgoing = self.outgoing, []  # only when this task was cancelled
            for call in left:
                _settle(call, asyncio.CancelledError())
            self.sending = False
            self.sender = None

    async def _send(self, calls: list[_Outgoing]) -> None:
        """Send ``calls`` as one request; settle each call's ``done`` with the outcome."""
        if not calls:
            return
        try:
            result = await self.session.append(*(record for call in calls for record in call.records))
        except (InvalidArgumentError, ResourceExhaustedError, TypeError, ValueError) as refused:
            if len(calls) == 1:
                _settle(calls[0], refused)
                return
            for call in calls:  # nothing was written: each on its own, for its own outcome
                await self._send([call])
            return
        except BaseException as failed:
            for call in calls:
                _settle(call, failed)
            if not isinstance(failed, Exception):
                raise
            return
        position = 0
        for call in calls:
            first = result.seqs[position]
            position += len(call.records)
            end = result.seqs[position] if position < len(result.seqs) else result.next_seq
            self.landed((first,), end, call.change)
            _settle(call, None)

    def landed(self, seqs: Sequence[int], next_seq: int, event: _Pending) -> None:
        """Take an append of ours: ``event`` (a record dict, or its change to the state) at
        ``seqs[0]``, the rest ours too."""
        self.pending[seqs[0]] = event
        for seq in range(seqs[0] + 1, next_seq):
            self.pending.setdefault(seq, None)
        self.drain()

    def drain(self) -> None:
        """Apply the pending records that continue the applied ones, in seq order."""
        while self.next_seq in self.pending:
            record = self.pending.pop(self.next_seq)
            if callable(record):
                record()
            elif record is not None:
                self.apply(record)
            self.next_seq += 1

    def apply(self, record: Mapping[str, Any]) -> None:
        """Apply one record (a parsed line or our own); records of other kinds change nothing."""
        if record.get("type") == RecordType.SESSION_META:
            self.key = str((record.get("payload") or {}).get("session_key", ""))
        if record.get("type") != RecordType.EVENT:
            return
        payload = record.get("payload") or {}
        kind, body = payload.get("kind"), payload.get("body")
        if not isinstance(body, dict):
            return
        if kind == LANGGRAPH_CHECKPOINT_EVENT:
            self._apply_checkpoint(body)
        elif kind == LANGGRAPH_WRITES_EVENT:
            self._apply_writes(body)
        elif kind == LANGGRAPH_REMOVED_EVENT:
            for ns, checkpoint_id in body.get("checkpoints", ()):
                if self.checkpoints.get(ns, {}).pop(checkpoint_id, None) is not None:
                    self.order[ns].remove(checkpoint_id)
                self.writes.pop((ns, checkpoint_id), None)

    def _apply_checkpoint(self, body: Mapping[str, Any]) -> None:
        blobs: list[_NamedBlob] = []
        for blob in body.get("blobs", ()):
            if blob.get("empty"):
                stored_blob = _Blob(empty=True)
            elif "base" in blob:
                items = [value_of_typed(item) for item in blob["items"]]
                stored_blob = _Blob(base=str(blob["base"]), keep=int(blob["keep"]), items=items)
            else:
                stored_blob = _Blob(typed=value_of_typed(blob))
            blobs.append((str(blob["channel"]), str(blob["version"]), stored_blob, bool(blob.get("view"))))
        stored = _Stored(
            value_of_typed(body["checkpoint"]),
            value_of_typed(body["metadata"]),
            body.get("parent") or None,
            {str(channel): str(version) for channel, version in body.get("versions", {}).items()},
        )
        self.take_checkpoint(str(body["ns"]), str(body["id"]), stored, blobs)

    def take_checkpoint(
        self, ns: str, checkpoint_id: str, stored: _Stored, blobs: Sequence[_NamedBlob]
    ) -> None:
        """Hold a checkpoint of namespace ``ns`` and the channel versions its record stored."""
        for channel, version, blob, view in blobs:
            key = (ns, channel, version)
            if key not in self.blobs:  # stored once per version
                self.blobs[key] = blob
                if view:
                    self.view_version = version
        checkpoints = self.checkpoints.setdefault(ns, {})
        if checkpoint_id not in checkpoints:
            bisect.insort(self.order.setdefault(ns, []), checkpoint_id)
        checkpoints[checkpoint_id] = stored

    def _apply_writes(self, body: Mapping[str, Any]) -> None:
        task_id, task_path = str(body["task_id"]), str(body.get("task_path", ""))
        writes = [
            _Write(task_id, str(write["channel"]), value_of_typed(write), task_path, int(write["idx"]))
            for write in body.get("writes", ())
        ]
        self.take_writes(str(body["ns"]), str(body["checkpoint_id"]), writes)

    def take_writes(self, ns: str, checkpoint_id: str, writes: Sequence[_Write]) -> None:
        """Hold a task's pending writes for checkpoint ``checkpoint_id`` of namespace ``ns`` (a
        special write, negative ``idx``, replaces the task's one before it; another does not)."""
        held = self.writes.setdefault((ns, checkpoint_id), {})
        for write in writes:
            if write.idx >= 0 and (write.task_id, write.idx) in held:
                continue
            held[(write.task_id, write.idx)] = write


def _settle(call: _Outgoing, failed: BaseException | None) -> None:
    """End a call's wait: its request was durable (``failed`` None) or failed (cancelled: the
    call is cancelled too). Nothing for a call whose caller stopped waiting."""
    if call.done.done():
        return
    if failed is None:
        call.done.set_result(None)
    elif isinstance(failed, asyncio.CancelledError):
        call.done.cancel()
    else:
        call.done.set_exception(failed)


def _kept(session: AsyncSession, next_seq: int = 0) -> _Thread:
    """The state of a thread whose session's appends go over a kept AppendStream (one per session
    and event loop, :mod:`rollout_client._kept_stream`: each durable when answered, exactly once
    as over a unary Append); it ends when its loop shuts down or the thread's state goes."""
    session.keep_stream()
    return _Thread(session, next_seq=next_seq)


def _text_parts(content: Any) -> str | list[dict[str, Any]]:
    """A LangChain message content in the ledger's shape: text, or a list of object parts."""
    if isinstance(content, str):
        return content
    return [part if isinstance(part, dict) else {"type": "text", "text": str(part)} for part in content]


def ledger_message(message: Any, known_calls: set[str]) -> dict[str, Any] | None:
    """A LangChain message as a ledger message dict (shared/records.py ``message``), or None for
    what the view leaves out (another kind of item; a tool message answering no call in
    ``known_calls``, which this adds the assistant's call ids to)."""
    payload: dict[str, Any]
    if isinstance(message, HumanMessage):
        payload = {"role": "user", "content": _text_parts(message.content)}
    elif isinstance(message, SystemMessage):
        payload = {"role": "system", "content": _text_parts(message.content)}
    elif isinstance(message, AIMessage):
        payload = {"role": "assistant", "content": _text_parts(message.content)}
        calls = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": orjson.dumps(call["args"]).decode()},
            }
            for call in message.tool_calls
            if call.get("id") and call.get("name")
        ]
        if calls:
            payload["tool_calls"] = calls
            known_calls.update(str(call["id"]) for call in calls)
    elif isinstance(message, ToolMessage):
        if message.tool_call_id not in known_calls:
            return None
        payload = {
            "role": "tool",
            "content": _text_parts(message.content),
            "tool_call_id": message.tool_call_id,
        }
        if message.status == "error":
            payload["is_error"] = True
    else:
        return None
    if isinstance(message, BaseMessage) and message.name:
        payload["name"] = message.name
    if not isinstance(payload["content"], str):
        try:
            message_json(payload, 0)
        except (TypeError, ValueError, RecordValidationError):  # parts JSON cannot hold: their text instead
            payload["content"] = str(message.content)
    return payload


def _shown(message: Any, known_calls: set[str]) -> EncodedMessage | dict[str, Any] | None:
    """:func:`ledger_message` encoded once, as the append sends it (the dict when it cannot be
    encoded: the append then refuses it as it refuses any bad message)."""
    payload = ledger_message(message, known_calls)
    if payload is None:
        return None
    try:
        return EncodedMessage(message_json(payload, 0))
    except (TypeError, ValueError, RecordValidationError):
        return payload


def _known_calls(messages: Sequence[Any]) -> set[str]:
    """The tool call ids of the assistant messages of ``messages``."""
    return {
        str(call["id"])
        for message in messages
        if isinstance(message, AIMessage)
        for call in message.tool_calls
        if call.get("id")
    }


class LedgerSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver whose threads are ledger sessions (see the module doc).

    ``client``: a RolloutClient or an AsyncRolloutClient; ``tenant``: the tenant threads are
    created and looked up in (empty: the caller's); ``messages_channel``: the channel mirrored
    as ledger messages (None: none); ``serde``: LangGraph's serializer (its default when None).
    Errors are the client's (rollout_client errors: UnavailableError, PermissionDeniedError, ...).
    """

    def __init__(
        self,
        client: RolloutClient | AsyncRolloutClient,
        *,
        tenant: str = "",
        messages_channel: str | None = DEFAULT_MESSAGES_CHANNEL,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._blocking = client if isinstance(client, RolloutClient) else None
        self._core = client.core if isinstance(client, RolloutClient) else client
        self._tenant = tenant
        self._messages_channel = messages_channel
        self._threads: dict[str, _Thread] = {}
        self._home: asyncio.AbstractEventLoop | None = None
        self._attaching: asyncio.Lock | None = None  # made on the loop the state lives on
        if self._blocking is None:
            try:
                self._home = asyncio.get_running_loop()
            except RuntimeError:
                self._home = None

    # -- running on the right loop ---------------------------------------------------------

    def _sync(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of the saver from blocking code and wait for it."""
        if self._blocking is not None:
            return self._blocking.run(coroutine)
        home = self._home
        if home is None or not home.is_running():
            coroutine.close()
            raise RuntimeError(
                "the sync methods of a LedgerSaver over an AsyncRolloutClient need the event loop it was"
                " first used on to be running in another thread; call the a* methods, or give a RolloutClient"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is home:
            coroutine.close()
            raise RuntimeError(
                "a sync method of a LedgerSaver over an AsyncRolloutClient was called on its event loop;"
                " call the a* method (await saver.aget_tuple(...), ...)"
            )
        return asyncio.run_coroutine_threadsafe(coroutine, home).result()

    async def _async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await a coroutine of the saver on the loop that owns the saver's state."""
        if self._blocking is not None:
            return await asyncio.wrap_future(self._blocking.submit(coroutine))
        running = asyncio.get_running_loop()
        if self._home is None:
            self._home = running
        if running is not self._home:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._home))
        return await coroutine

    # -- threads ---------------------------------------------------------------------------

    async def _attach(self, thread_id: str, create: bool) -> tuple[_Thread | None, bool | None]:
        """The state of thread ``thread_id`` (its session created when ``create``), or None; and
        whether this call read it whole and found the session there (None: it read nothing, the
        state was held already or is new). One attach at a time per saver (LangGraph sends a
        step's writes and its checkpoint at once): a new thread is created once."""
        thread = self._threads.get(thread_id)
        if thread is not None:
            return thread, None
        if self._attaching is None:
            self._attaching = asyncio.Lock()
        async with self._attaching:
            thread = self._threads.get(thread_id)
            if thread is not None:
                return thread, None
            session_id, found = await self._core.resolve_session(thread_id, tenant=self._tenant)
            if not found:
                if not create:
                    return None, None
                try:
                    created = await self._core.create_session(
                        THREAD_AGENT, root=True, session_key=thread_id, tenant=self._tenant
                    )
                except AlreadyExistsError as taken:  # another process created it meanwhile
                    session_id = taken.session_id or session_id
                    await self._writer_knows(session_id)
                else:  # new: nothing to read but its session_meta (seq 0)
                    thread = self._threads[thread_id] = _kept(created, created.next_seq or 1)
                    return thread, None
            thread = _kept(self._core.session(session_id))
            there = await self._refresh(thread)  # read whole, once
            self._threads[thread_id] = thread
            return thread, there

    async def _writer_knows(self, session_id: str) -> None:
        """Wait (the client's backoff, within its deadline) while the writer answers NOT_FOUND for
        a session another process is creating: its id is taken before the writer accepts
        appends to it. NotFoundError once the deadline has passed."""
        attempts = Attempts(self._core.retry)
        while True:
            try:
                await self._core.next_seq(session_id)
                return
            except NotFoundError:
                if not await attempts.wait():
                    raise

    async def _current(self, thread_id: str, create: bool = False) -> _Thread | None:
        """:meth:`_attach`, then extended with the records other writers appended since (unless
        the attach has just read it whole: one next-seq probe per read)."""
        thread, there = await self._attach(thread_id, create)
        if thread is None:
            return None
        if there is None:
            there = await self._refresh(thread)
        if not there:
            if self._threads.get(thread_id) is thread:
                del self._threads[thread_id]
            return None  # deleted (by another saver) since this one read it
        return thread

    async def _refresh(self, thread: _Thread) -> bool:
        """Apply the records appended to the thread's session since those applied: asks the
        writer for its next seq (nothing written), reads the records below it not seen yet.
        False when the session is gone (deleted)."""
        if thread.lock is None:
            thread.lock = asyncio.Lock()
        async with thread.lock:
            try:
                target = await self._core.next_seq(thread.session.id)
            except NotFoundError:
                # Being created by another caller (nothing written yet), or deleted.
                return thread.next_seq == 0
            if target > thread.next_seq:
                await self._catch_up(thread, target)
        return True

    async def _catch_up(self, thread: _Thread, target: int) -> None:
        """Apply the session's records from ``thread.next_seq`` up to ``target`` (exclusive)."""
        watch = thread.session.watch_batches(thread.next_seq)
        try:
            async for batch in watch:
                for watched in batch:
                    if watched.seq >= thread.next_seq and watched.seq not in thread.pending:
                        thread.pending[watched.seq] = orjson.loads(watched.line) if watched.seq >= 0 else None
                thread.drain()
                if thread.next_seq >= target:
                    return
        finally:
            await watch.aclose()

    # -- writes ----------------------------------------------------------------------------

    def _blob(
        self, thread: _Thread, ns: str, channel: str, version: str, values: Mapping[str, Any]
    ) -> tuple[dict[str, Any], _Blob, list[Any] | None]:
        """The record of a new channel version, the version as the state holds it, and the list
        it holds (None for other values)."""
        if channel not in values:
            return {"channel": channel, "version": version, "empty": True}, _Blob(empty=True), None
        value = values[channel]
        if not isinstance(value, list):
            typed = self.serde.dumps_typed(value)
            return {"channel": channel, "version": version, **typed_value(*typed)}, _Blob(typed=typed), None
        base_version, kept = thread.recent.get((ns, channel), (None, []))
        if (
            base_version is not None
            and 0 < len(kept) <= len(value)
            and all(map(operator.is_, kept, value))  # identity, item by item (in C: the history is long)
        ):
            items = [self.serde.dumps_typed(item) for item in value[len(kept) :]]
            record = {"channel": channel, "version": version, "base": base_version, "keep": len(kept)}
            delta = _Blob(base=base_version, keep=len(kept), items=items)
            return {**record, "items": [typed_value(*item) for item in items]}, delta, list(value)
        typed = self.serde.dumps_typed(value)
        record = {"channel": channel, "version": version, **typed_value(*typed)}
        return record, _Blob(typed=typed), list(value)

    def _view_records(self, thread: _Thread, blob: dict[str, Any], value: list[Any]) -> list[Record]:
        """The ledger messages that show the new messages list ``value`` (see the module doc)."""
        if "base" in blob and blob["base"] == thread.view_version:
            keep = int(blob["keep"])
            answers = any(isinstance(item, ToolMessage) for item in value[keep:])
            known = (
                _known_calls(value[:keep]) if answers else set()
            )  # the history is read only for tool outputs
            return [message for item in value[keep:] if (message := _shown(item, known)) is not None]
        known = set()
        if thread.view_version is None:
            return [message for item in value if (message := _shown(item, known)) is not None]
        shown: list[dict[str, Any]] = [
            message for item in value if (message := ledger_message(item, known)) is not None
        ]
        return [Compaction("LangGraph state replaced", replacement_history=shown)]

    async def _anew(self, thread_id: str, write: Callable[[], Awaitable[T]]) -> T:
        """Run ``write`` (a write to thread ``thread_id``); when the session it went to is gone
        (deleted by another saver since this one attached it: NotFoundError), forget that
        session and run it once more, to the session the thread id names now (a new one)."""
        attached = self._threads.get(thread_id)
        try:
            return await write()
        except NotFoundError:
            if attached is None or self._threads.get(thread_id) is not attached:
                raise
            del self._threads[thread_id]
        return await write()

    async def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = str(config["configurable"]["thread_id"])
        return await self._anew(thread_id, lambda: self._put_once(config, checkpoint, metadata, new_versions))

    async def _put_once(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        thread, _ = await self._attach(thread_id, create=True)
        assert thread is not None
        saved: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = saved.pop("channel_values", {})
        blobs: list[dict[str, Any]] = []
        held_blobs: list[_NamedBlob] = []
        lists: dict[str, tuple[str, list[Any]]] = {}  # channel -> (version, its list)
        view: list[Record] = []
        for channel, raw_version in new_versions.items():
            version = version_key(raw_version)
            blob, held_blob, held = self._blob(thread, ns, channel, version, values)
            shows = False
            if held is not None:
                lists[channel] = (version, held)
                if ns == "" and channel == self._messages_channel:
                    view = self._view_records(thread, blob, held)
                    blob["view"] = shows = True
            blobs.append(blob)
            held_blobs.append((channel, version, held_blob, shows))
        typed_checkpoint = self.serde.dumps_typed(saved)
        typed_metadata = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        versions = {
            channel: version_key(version) for channel, version in checkpoint["channel_versions"].items()
        }
        body: dict[str, Any] = {
            "ns": ns,
            "id": checkpoint["id"],
            "checkpoint": typed_value(*typed_checkpoint),
            "metadata": typed_value(*typed_metadata),
            "versions": versions,
            "blobs": blobs,
        }
        parent = configurable.get("checkpoint_id")
        if parent:
            body["parent"] = parent
        stored = _Stored(typed_checkpoint, typed_metadata, parent or None, versions)
        await thread.append(
            functools.partial(thread.take_checkpoint, ns, str(checkpoint["id"]), stored, held_blobs),
            Event(LANGGRAPH_CHECKPOINT_EVENT, body),
            *view,
        )
        for channel, (version, held) in lists.items():
            kept = thread.blobs.get((ns, channel, version))
            if kept is not None and kept.value is _UNSET:
                kept.value = held
            thread.recent[(ns, channel)] = (version, held)
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    async def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> None:
        thread_id = str(config["configurable"]["thread_id"])
        await self._anew(thread_id, lambda: self._put_writes_once(config, writes, task_id, task_path))

    async def _put_writes_once(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        checkpoint_id = str(configurable["checkpoint_id"])
        thread, _ = await self._attach(thread_id, create=True)
        assert thread is not None
        held = thread.writes.get((ns, checkpoint_id), {})
        records = []
        taken = []
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            if idx >= 0 and (task_id, idx) in held:
                continue
            typed = self.serde.dumps_typed(value)
            records.append({"idx": idx, "channel": channel, **typed_value(*typed)})
            taken.append(_Write(task_id, channel, typed, task_path, idx))
        if not records:
            return
        body = {
            "ns": ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "writes": records,
        }
        await thread.append(
            functools.partial(thread.take_writes, ns, checkpoint_id, taken),
            Event(LANGGRAPH_WRITES_EVENT, body),
        )

    # -- reads -----------------------------------------------------------------------------

    def _value(self, thread: _Thread, ns: str, channel: str, version: str) -> Any:
        """The value of a channel version (_UNSET when it has none): lists rebuilt along their
        delta chain and kept (a copy is returned), other values deserialized."""
        blob = thread.blobs.get((ns, channel, version))
        if blob is None or blob.empty:
            return _UNSET
        if blob.value is not _UNSET:
            return list(blob.value)
        if blob.typed is not None:
            value = self.serde.loads_typed(blob.typed)
            if not isinstance(value, list):
                return value
            blob.value = value
            return list(value)
        chain = [blob]
        base = thread.blobs.get((ns, channel, str(blob.base)))
        while base is not None and base.value is _UNSET and base.typed is None and not base.empty:
            chain.append(base)
            base = thread.blobs.get((ns, channel, str(base.base)))
        if base is None or base.empty:
            built: list[Any] = []
        elif base.value is not _UNSET:
            built = base.value
        else:
            loaded = self.serde.loads_typed(base.typed) if base.typed is not None else []
            built = base.value = loaded if isinstance(loaded, list) else [loaded]
        for link in reversed(chain):
            built = built[: link.keep] + [self.serde.loads_typed(item) for item in link.items]
            link.value = built
        return list(built)

    def _tuple(self, thread_id: str, thread: _Thread, ns: str, checkpoint_id: str) -> CheckpointTuple:
        stored = thread.checkpoints[ns][checkpoint_id]
        checkpoint = self.serde.loads_typed(stored.checkpoint)
        values = {}
        for channel, version in stored.versions.items():
            value = self._value(thread, ns, channel, version)
            if value is not _UNSET:
                values[channel] = value
                if isinstance(value, list):
                    thread.recent[(ns, channel)] = (version, list(value))
        checkpoint["channel_values"] = values
        if stored.loaded_metadata is _UNSET:
            stored.loaded_metadata = self.serde.loads_typed(stored.metadata)
        writes = sorted(thread.writes.get((ns, checkpoint_id), {}).values(), key=_write_order)
        parent = (
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": stored.parent}}
            if stored.parent
            else None
        )
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
            },
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, dict(stored.loaded_metadata)),
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=[
                (write.task_id, write.channel, self.serde.loads_typed(write.typed)) for write in writes
            ],
        )

    async def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        thread = await self._current(thread_id)
        if thread is None or not thread.order.get(ns):
            return None
        checkpoint_id = get_checkpoint_id(config) or thread.order[ns][-1]
        if checkpoint_id not in thread.checkpoints[ns]:
            return None
        return self._tuple(thread_id, thread, ns, checkpoint_id)

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> list[CheckpointTuple]:
        if config is None:
            raise ValueError(
                "LedgerSaver.list needs a config with a thread_id (threads are listed as sessions)"
            )
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        thread = await self._current(thread_id)
        if thread is None:
            return []
        wanted_ns = configurable.get("checkpoint_ns")
        only = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        candidates = sorted(
            (
                (checkpoint_id, ns)
                for ns, ids in thread.order.items()
                if wanted_ns is None or ns == wanted_ns
                for checkpoint_id in ids
                if (only is None or checkpoint_id == only)
                and (before_id is None or checkpoint_id < before_id)
            ),
            reverse=True,
        )
        found: list[CheckpointTuple] = []
        for checkpoint_id, ns in candidates:
            if limit is not None and len(found) >= limit:
                break
            if filter:
                stored = thread.checkpoints[ns][checkpoint_id]
                if stored.loaded_metadata is _UNSET:
                    stored.loaded_metadata = self.serde.loads_typed(stored.metadata)
                if not all(stored.loaded_metadata.get(key) == value for key, value in filter.items()):
                    continue
            found.append(self._tuple(thread_id, thread, ns, checkpoint_id))
        return found

    # -- threads as a whole ----------------------------------------------------------------

    async def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source = await self._current(source_thread_id)
        if source is None or source.next_seq < 1:
            raise NotFoundError(f"thread {source_thread_id!r} has no checkpoints to copy")
        await source.session.fork(at_seq=source.next_seq - 1, session_key=target_thread_id)

    async def _delete_thread(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)
        session_id, found = await self._core.resolve_session(thread_id, tenant=self._tenant)
        if found:
            await self._core.delete_session(session_id)
        self._threads.pop(thread_id, None)  # attached meanwhile (a read of another task)

    async def _remove(self, thread: _Thread, removed: list[list[str]]) -> None:
        """Append a ``langgraph.removed`` record taking ``removed`` ([ns, id] pairs) out."""
        if not removed:
            return
        body = {"checkpoints": removed}
        event = {"type": RecordType.EVENT, "payload": {"kind": LANGGRAPH_REMOVED_EVENT, "body": body}}
        await thread.append(event, Event(LANGGRAPH_REMOVED_EVENT, body))

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            thread = await self._current(thread_id)
            if thread is not None:
                await self._remove(
                    thread,
                    [
                        [ns, checkpoint_id]
                        for ns, ids in thread.order.items()
                        for checkpoint_id in (ids[:-1] if strategy == "keep_latest" else ids)
                    ],
                )

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = set(run_ids)
        if not wanted:
            return
        tenant = recorded_tenant(self._tenant)
        attached = {thread.session.id for thread in self._threads.values()}
        read_now: set[str] = set()  # threads read whole just now: no second probe
        async for page in self._core.list_sessions(agent_name=THREAD_AGENT, tenant=self._tenant):
            for summary in page.sessions:
                if summary.session_id in attached or summary.tenant != tenant:
                    continue
                listed = _kept(self._core.session(summary.session_id))
                if (
                    await self._refresh(listed)
                    and listed.key
                    and self._threads.setdefault(listed.key, listed) is listed
                ):
                    read_now.add(listed.key)
        for thread_id in list(self._threads):
            thread = self._threads.get(thread_id) if thread_id in read_now else await self._current(thread_id)
            if thread is None:
                continue
            removed = []
            for ns, ids in thread.order.items():
                for checkpoint_id in ids:
                    stored = thread.checkpoints[ns][checkpoint_id]
                    if stored.loaded_metadata is _UNSET:
                        stored.loaded_metadata = self.serde.loads_typed(stored.metadata)
                    if stored.loaded_metadata.get("run_id") in wanted:
                        removed.append([ns, checkpoint_id])
            await self._remove(thread, removed)

    # -- LangGraph's interface -------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the newest of its
        namespace) with its pending writes and parent, or None."""
        return self._sync(self._get_tuple(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """See :meth:`get_tuple`."""
        return await self._async(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The thread's checkpoints newest first (all namespaces when the config names none),
        with metadata equal to ``filter``'s values, before ``before``, at most ``limit``.
        ValueError without a config (threads are sessions: list them with ``rollout ls``)."""
        yield from self._sync(self._list(config, filter, before, limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """See :meth:`list`."""
        for found in await self._async(self._list(config, filter, before, limit)):
            yield found

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint (one ``langgraph.checkpoint`` record, its new channel versions
        only, plus the new messages as ledger messages); returns its config."""
        return self._sync(self._put(config, checkpoint, metadata, new_versions))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """See :meth:`put`."""
        return await self._async(self._put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Append a task's pending writes (one ``langgraph.writes`` record; writes the checkpoint
        already holds for the task are not sent again)."""
        self._sync(self._put_writes(config, writes, task_id, task_path))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """See :meth:`put_writes`."""
        await self._async(self._put_writes(config, writes, task_id, task_path))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork the source thread's session whole into a new session keyed by the target id.
        NotFoundError for a source never written; AlreadyExistsError when the target exists."""
        self._sync(self._copy_thread(source_thread_id, target_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """See :meth:`copy_thread`."""
        await self._async(self._copy_thread(source_thread_id, target_thread_id))

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session (DeleteSession): its checkpoints, writes and messages are
        gone from the ledger, and an audit record says who deleted it and when. Nothing for a
        thread never written. Writing the thread again starts it over, in a new session (the
        deleted session's id is never used again). Copies (copy_thread) stay."""
        self._sync(self._delete_thread(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        """See :meth:`delete_thread`."""
        await self._async(self._delete_thread(thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Take checkpoints out of the threads' listings: all but the newest of each namespace
        (``keep_latest``) or all (``delete``), with their pending writes; ValueError for
        another strategy. The bytes stay in the session until it is deleted."""
        self._sync(self._prune(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """See :meth:`prune`."""
        await self._async(self._prune(thread_ids, strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Take the checkpoints whose metadata ``run_id`` is one of ``run_ids`` (and their pending
        writes) out of every thread of the saver's tenant (a ``langgraph.removed`` record per
        thread): the threads this saver holds and every ``langgraph`` session the reader lists,
        each read whole once; a cost that grows with the tenant's threads."""
        self._sync(self._delete_for_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """See :meth:`delete_for_runs`."""
        await self._async(self._delete_for_runs(run_ids))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The version after ``current``: a counter, then a random tail (as LangGraph's own savers)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"


def _write_order(write: _Write) -> tuple[str, str, int]:
    """The order LangGraph gives pending writes (its ``writes_sort_key``)."""
    return writes_sort_key(write.task_path, write.task_id, write.idx)


__all__ = ["DEFAULT_MESSAGES_CHANNEL", "LedgerSaver", "ledger_message", "version_key"]
