"""ConversationMemory: an agent's in-process message list, reached only through methods
(seed rule 3).

The list itself is private. Reads return deep copies (:meth:`snapshot`,
:meth:`last_message`), so nobody holding a result can change the memory behind its
lock; writes go through :meth:`append` and the typed ``add_*`` methods (which trim
to ``max_size``, oldest first) or :meth:`replace` (loads as-is, never trimmed). A
lock guards every method, so planner and tool threads may append concurrently.
There is no second way to read the list.

The JSON wire shape is kept exactly: ``{"messages":[...],"max_size":n}`` (compact,
keys in that order, messages as the ledger's message dicts; ``n`` is 0 when there is
no limit). ``from_json(m.to_json())`` gives an equal memory, and ``to_json`` of a
memory read from compact JSON gives the same bytes back.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, Self

import orjson

from rollout_client._records import assistant, check_message, tool_result, user
from rollout_client._results import Replay


class _Replayable(Protocol):
    def replay(self) -> Replay: ...


class ConversationMemory:
    """A thread-safe message list with copies out and methods in; ``max_size`` (messages, None:
    no limit) bounds what :meth:`append` keeps."""

    __slots__ = ("_lock", "_max_size", "_messages")

    def __init__(self, max_size: int | None = None) -> None:
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be at least 1 (or None for no limit), not {max_size}")
        self._lock = threading.Lock()
        self._max_size = max_size
        self._messages: list[dict[str, Any]] = []

    @property
    def max_size(self) -> int | None:
        return self._max_size

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)

    def __repr__(self) -> str:
        return f"<ConversationMemory {len(self)} messages, max_size={self._max_size}>"

    def snapshot(self) -> list[dict[str, Any]]:
        """A deep copy of every message, in order."""
        with self._lock:
            return copy.deepcopy(self._messages)

    def last_message(self) -> dict[str, Any] | None:
        """A deep copy of the last message, or None when empty."""
        with self._lock:
            return copy.deepcopy(self._messages[-1]) if self._messages else None

    def append(self, message: Mapping[str, Any]) -> None:
        """Add a copy of ``message`` (a ledger message dict), then drop the oldest messages
        beyond ``max_size``. Raises TypeError / ValueError for a dict of the wrong shape."""
        kept = copy.deepcopy(dict(check_message(message, "message")))
        with self._lock:
            self._messages.append(kept)
            if self._max_size is not None and len(self._messages) > self._max_size:
                del self._messages[: len(self._messages) - self._max_size]

    def add_user(self, content: str | list[Any]) -> None:
        """Append a user message."""
        self.append(user(content))

    def add_assistant(
        self,
        content: str | list[Any] | None = None,
        *,
        tool_calls: Sequence[Mapping[str, Any]] = (),
        reasoning: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Append an assistant message (see :func:`rollout_client.assistant`)."""
        self.append(assistant(content, tool_calls=tool_calls, reasoning=reasoning))

    def add_tool_result(self, call_id: str, content: str | list[Any], *, is_error: bool = False) -> None:
        """Append a tool message answering ``call_id``."""
        self.append(tool_result(call_id, content, is_error=is_error))

    def replace(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Load copies of ``messages`` as the whole list, as-is: ``max_size`` is not applied."""
        kept = [copy.deepcopy(dict(check_message(m, f"messages[{i}]"))) for i, m in enumerate(messages)]
        with self._lock:
            self._messages = kept

    def to_json(self) -> str:
        """``{"messages":[...],"max_size":n}``, compact (n = 0: no limit)."""
        with self._lock:
            return orjson.dumps({"messages": self._messages, "max_size": self._max_size or 0}).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """The memory of a ``{"messages": [...], "max_size": n}`` document. Raises ValueError for
        another shape (missing or extra keys, a max_size that is not a non-negative integer)."""
        document = orjson.loads(text)
        if not isinstance(document, dict) or set(document) != {"messages", "max_size"}:
            raise ValueError('a ConversationMemory is {"messages": [...], "max_size": n}')
        max_size, messages = document["max_size"], document["messages"]
        if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 0:
            raise ValueError(f"max_size must be a non-negative integer (0: no limit), not {max_size!r}")
        if not isinstance(messages, list):
            raise ValueError("messages must be a list of message objects")
        memory = cls(max_size or None)
        memory.replace(messages)
        return memory

    @classmethod
    def from_replay(cls, source: Replay | _Replayable, max_size: int | None = None) -> Self:
        """A memory holding a replay's messages (a :class:`Replay`, or a blocking Session, which
        is replayed; for an AsyncSession pass ``await session.replay()``), loaded as-is."""
        replay = source if isinstance(source, Replay) else source.replay()
        memory = cls(max_size)
        memory.replace(replay.messages)
        return memory
