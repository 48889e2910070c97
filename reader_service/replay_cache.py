"""The replay cache: rendered replays kept per session file, extended as the file grows.

docs/spec.md §5 lets the reader keep derived state "keyed by file identity and committed
length, always rebuildable from the files, never the source of truth, never
serving a replaced or truncated file". An entry holds, for one session file:

* its identity: device and inode, the committed length it has applied (bytes up
  to its last newline), the size and modification time it last saw, and the
  start of its last committed line (up to :data:`LINE_CHECK_BYTES` of it, which
  hold that record's seq and time);
* an open rebuild pass (:class:`shared.rebuild.Rebuilder`: the one rule set,
  here with rendering hooks) whose sequence holds :data:`RenderedMessage` items:
  each message's serialized reply entry (:func:`reader_service.wire.message_entry`)
  and its framed canonical bytes (the digest's input), made as the message is
  kept; the payload itself is not kept;
* the facts of its last answer, for a repeated replay of an unchanged file.

A replay opens the file once and looks at it (``fstat`` plus two small reads):

* same device and inode, not shorter than the committed length, the same last
  committed line, and not rewritten at the same size (size unchanged but another
  modification time): the entry is used. Bytes after the committed length, and
  only those, are read and run through the same pass, so a session that grew by
  one record costs that record;
* anything else (the file was replaced: another inode; truncated below the
  committed length; its last committed line differs; rewritten in place): the
  entry is dropped and the file is rebuilt from its first byte.

Committed bytes are trusted not to change in place while the file grows: the
writer only appends, and its start-up repair only cuts bytes after the last
newline. The answer is byte for byte the one a rebuild from scratch gives (a
property test drives random append, compaction and damage histories through both).

Memory: each entry is charged its rendered bytes plus a per-message overhead;
beyond ``budget_bytes`` the least recently used entries are dropped. Files over
``max_file_bytes`` are not cached (:meth:`ReplayCache.rendered` answers None and
the caller replays them in bounded memory).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, TypeVar

import orjson

from reader_service.replay import ReplayFacts, checkpoint_verification, digest_status_of
from reader_service.wire import ViewHeld, canonical_entry, canonical_message_entry, message_entry
from shared.committed_lines import CommittedLines
from shared.digest import digest_of_framed, framed_canonical
from shared.layout import session_fd
from shared.rebuild import PendingReasoning, Rebuilder, collector_paused, view_continues
from shared.rebuild_tail import recent_from_tail
from shared.tail import next_seq_of_tail, read_tail

_T = TypeVar("_T")

#: Bytes read from a session file at a time (a longer line is carried over whole).
READ_BYTES = 4 * 1024 * 1024
#: Bytes of the last committed line compared to tell the same file from another (its seq and ts).
LINE_CHECK_BYTES = 4096
#: Bytes an entry is charged per message besides its rendered bytes (objects and list slots).
MESSAGE_OVERHEAD_BYTES = 160
#: Rendered bytes the tail reads' answers kept for a repeat may hold together (each answer
#: at most a sixteenth of it).
TAIL_MEMO_BYTES = 8 * 1024 * 1024
#: Bytes read back first to find a file's last record (doubled while it holds none).
LAST_RECORD_BYTES = 4096


#: One message of a cached sequence: its reply entry (:func:`reader_service.wire.message_entry`)
#: and its framed canonical bytes (:func:`shared.digest.framed_canonical`, the digest's input).
RenderedMessage = tuple[bytes, bytes]


def render(payload: dict[str, Any]) -> RenderedMessage:
    """A message payload as its reply entry and framed canonical bytes, each made once.

    The canonical form comes first: orjson leaves each string's UTF-8 form cached on
    the str, so the entry copies it instead of encoding the text a second time.
    """
    framed = framed_canonical(payload)
    return message_entry(payload), framed


class _RenderingRebuilder(Rebuilder):
    """The shared rebuilder whose sequence holds RenderedMessage items, rendered as they are kept
    (a message a compaction or a later output drops was rendered for nothing: the rules decide
    that only later, and such messages are rare next to those a replay returns)."""

    keeps_payloads = False

    def keep(
        self, payload: dict[str, Any], offset: int, index: int, reasoning: PendingReasoning
    ) -> RenderedMessage:
        if reasoning:
            payload = super().keep(payload, offset, index, reasoning)
        return render(payload)

    def keep_summary(self, summary: str, offset: int) -> RenderedMessage:
        return render(super().keep_summary(summary, offset))


@dataclass(frozen=True, slots=True)
class RecentMessages:
    """The tail of a rebuilt sequence: reply entries of its last messages, their origins
    (shared.records.message_origin), how many messages the whole sequence has (at least, with
    ``count_at_least``), and the seq after the last record read."""

    entries: list[bytes]
    origins: list[int]
    message_count: int
    next_seq: int
    #: ``message_count`` counts only the messages a tail read held (a lower bound).
    count_at_least: bool = False
    #: The caller's view continues into this one: ``entries`` are only messages after it.
    continues: bool = False

    def since(self, view: ViewHeld | None) -> RecentMessages:
        """This answer for a caller holding ``view``, from a pass that does not hold the whole
        sequence (a tail read): no messages when nothing was written since the view
        (shared.rebuild.view_continues), else this answer."""
        if view is None or not view_continues(view.next_seq, view.message_count, self.next_seq):
            return self
        return RecentMessages([], [], self.message_count, self.next_seq, self.count_at_least, True)


@dataclass(frozen=True, slots=True)
class RenderedReplay:
    """A replay ready to send: the reply entries of the returned messages, and the facts."""

    entries: list[bytes]
    facts: ReplayFacts


def _digest_of(items: list[Any]) -> str:
    return digest_of_framed((framed for _, framed in items), len(items))


def _payloads_of(items: list[Any]) -> Iterable[Mapping[str, Any]]:
    """The digest's view of each message (its canonical fields), parsed back from the bytes."""
    return (orjson.loads(framed[8:]) for _, framed in items)


class _Entry:
    """One cached session file (see the module doc); used under its ``lock``."""

    def __init__(self, device: int, inode: int) -> None:
        self.lock = threading.Lock()
        self.device = device
        self.inode = inode
        self.state = _RenderingRebuilder()
        self.line_no = 0
        self.committed = 0
        self.last_line_start = 0
        self.last_line = b""
        self.seen_size = 0
        self.seen_mtime_ns = 0
        self.answer: tuple[tuple[int, int, int], RenderedReplay] | None = None

    def matches(self, fd: int, stat: os.stat_result) -> bool:
        """Whether the open file is the one this entry applied, unchanged in its committed bytes."""
        if (stat.st_dev, stat.st_ino) != (self.device, self.inode) or stat.st_size < self.committed:
            return False
        if stat.st_size == self.seen_size and stat.st_mtime_ns != self.seen_mtime_ns:
            return False  # rewritten in place at the same size
        if not self.committed:
            return True
        end = os.pread(fd, 1, self.committed - 1)
        return end == b"\n" and os.pread(fd, len(self.last_line), self.last_line_start) == self.last_line

    def extend(self, fd: int, stat: os.stat_result) -> bytes:
        """Run the complete lines after the committed length; returns the uncommitted tail."""
        reader = CommittedLines(fd, self.committed, stat.st_size, READ_BYTES)
        with collector_paused():
            for lines in reader:
                self.line_no, self.committed = self.state.run(lines, self.line_no, self.committed)
                last = lines[-1]
                self.last_line_start = self.committed - len(last) - 1
                self.last_line = (last + b"\n")[:LINE_CHECK_BYTES]
        self.seen_size, self.seen_mtime_ns = stat.st_size, stat.st_mtime_ns
        return reader.tail

    def replay(self, tail: bytes, max_messages: int) -> RenderedReplay:
        """The rendered replay of the lines applied plus ``tail`` (uncommitted), capped at ``max_messages``."""
        key = (self.committed, len(tail), max_messages)
        if self.answer is not None and self.answer[0] == key:
            return self.answer[1]
        finished = self.state.finished_copy(tail, self.line_no, self.committed, max_messages)
        messages: list[RenderedMessage] = finished.messages
        separate = checkpoint_verification(finished, _digest_of)
        entries = [entry for entry, _ in messages]
        framed = [framed for _, framed in messages]
        # Canonical bytes / 4, rounded up, per message (as shared.digest counts them); the
        # framing adds 8 bytes.
        tokens = sum([(len(item) - 5) // 4 for item in framed])
        # Unless the checkpoint's own pass decides the status.
        returned = digest_of_framed(framed, len(framed)) if separate is None else ""
        status, computed = digest_status_of(finished, separate, returned, _payloads_of)
        facts = ReplayFacts(finished, status, computed, tokens, len(messages))
        rendered = RenderedReplay(entries, facts)
        self.answer = (key, rendered)
        return rendered

    def recent(self, limit: int, canonical: bool, view: ViewHeld | None = None) -> RecentMessages:
        """The last ``limit`` messages of the applied lines (0: all), as :meth:`ReplayCache.recent`;
        only those after ``view`` when it continues into them."""
        state = self.state
        messages: list[RenderedMessage] = state.messages
        next_seq = state.result.last_seq + 1
        continues = view is not None and view_continues(
            view.next_seq, view.message_count, next_seq, state.origins, state.rewritten_seq
        )
        first = max(0, len(messages) - limit) if limit else 0
        if continues:
            assert view is not None
            # view_continues with an unknown count means the same lines: nothing after the view.
            first = max(first, len(messages) if view.message_count is None else view.message_count)
        return RecentMessages(
            [canonical_entry(framed) if canonical else entry for entry, framed in messages[first:]],
            state.origins[first:].tolist(),
            len(messages),
            next_seq,
            continues=continues,
        )

    def charge(self) -> int:
        """What this entry costs (bytes): every message it still holds, counted once."""
        result = self.state.result
        held = {id(item): item for item in chain(result.messages, result.checkpoint_messages or ())}
        return sum(len(entry) + len(framed) for entry, framed in held.values()) + len(held) * (
            MESSAGE_OVERHEAD_BYTES
        )


class ReplayCache:
    """Rendered replays of recently read session files, within a memory budget (thread-safe).

    ``budget_bytes`` bounds what all entries are charged together; files over
    ``max_file_bytes`` (default: a quarter of the budget) are never cached, and an
    entry charged more than half the budget is not kept. A budget of 0 turns the
    cache off: :meth:`rendered` answers None for every file.
    """

    def __init__(self, budget_bytes: int, max_file_bytes: int | None = None) -> None:
        self.budget_bytes = budget_bytes
        self.max_file_bytes = budget_bytes // 4 if max_file_bytes is None else max_file_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._charges: dict[str, int] = {}
        self._charged = 0
        #: Answers by how they were made: from an unchanged entry, an extended one, or a new one.
        #: Limited reads of files it did not hold: answered from the tail, or not settled by it.
        self.counts = {
            "unchanged": 0,
            "extended": 0,
            "rebuilt": 0,
            "evicted": 0,
            "tail": 0,
            "tail_unsettled": 0,
            "tail_repeated": 0,
        }
        #: Tail reads' answers by (path, limit, canonical): the file's identity when read, the answer.
        self._tails: OrderedDict[tuple[str, int, bool], tuple[tuple[int, ...], RecentMessages]] = (
            OrderedDict()
        )
        self._tails_charges: dict[tuple[str, int, bool], int] = {}
        self._tails_charged = 0

    @property
    def charged_bytes(self) -> int:
        """What the entries held now are charged (bytes)."""
        return self._charged

    def rendered(self, path: Path, max_messages: int = 0) -> RenderedReplay | None:
        """The rendered replay of the session file at ``path``, or None when it is over ``max_file_bytes``.

        Raises OSError (FileNotFoundError when gone) naming the file when it cannot be read.
        """
        return self._use(path, lambda entry, tail: entry.replay(tail, max_messages))

    def recent(
        self, path: Path, limit: int, canonical: bool = False, view: ViewHeld | None = None
    ) -> RecentMessages | None:
        """The last ``limit`` messages (0: all) of the session file at ``path`` with their origins,
        the sequence's length and the next seq as read; None when the file is over
        ``max_file_bytes``. Entries are reply entries of ChatMessages, or with ``canonical`` of
        canonical JSON (:func:`reader_service.wire.canonical_entry`). No digest is computed.
        With ``view`` (what the caller holds), only the messages after it when it continues into
        the sequence (shared.rebuild.view_continues; ``continues`` set). Raises OSError as
        :meth:`rendered` does."""
        return self._use(path, lambda entry, tail: entry.recent(limit, canonical, view))

    def recent_from_tail(
        self, path: Path, limit: int, canonical: bool = False, view: ViewHeld | None = None
    ) -> RecentMessages | None:
        """The last ``limit`` (> 0) messages of a session file this cache holds no entry for, rebuilt
        from the file's tail (shared.rebuild_tail, the same answer as :meth:`recent`); None when
        the cache holds the file (its entry answers for less) or the tail cannot settle the
        answer (the caller then calls :meth:`recent`). With ``view``, no messages when nothing was
        written since it (:meth:`RecentMessages.since`). A repeated read of the same file
        (device, inode, size, modification and change times) with the same limit and form is
        answered from the last one's answer, kept within :data:`TAIL_MEMO_BYTES`. Counted in
        ``counts`` as ``tail``, ``tail_repeated`` or ``tail_unsettled``. Raises OSError as
        :meth:`rendered` does."""
        key = (str(path), limit, canonical)
        with self._lock:
            if key[0] in self._entries:
                return None
        with session_fd(path) as fd:
            stat = os.fstat(fd)
            identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
            with self._lock:
                kept = self._tails.get(key)
                if kept is not None and kept[0] == identity:
                    self._tails.move_to_end(key)
                    self.counts["tail_repeated"] += 1
                    return kept[1].since(view)
            found = recent_from_tail(fd, limit)
        self._count("tail" if found is not None else "tail_unsettled")
        if found is None:
            return None
        render = canonical_message_entry if canonical else message_entry
        recent = RecentMessages(
            [render(message) for message in found.messages],
            found.origins,
            found.message_count,
            found.next_seq,
            not found.count_exact,
        )
        self._keep_tail(key, identity, recent)
        return recent.since(view)

    def unchanged_since(self, path: Path, view: ViewHeld) -> RecentMessages | None:
        """For a caller holding ``view`` of a session file this cache holds no entry for: an answer
        with no messages (``continues``; the view's own count, flagged a lower bound when it gave
        none) when nothing was written since it, read from the file's last record alone
        (shared.tail); None otherwise, or when the cache holds the file or the last record's line
        check fails (the caller answers in full). Raises OSError as :meth:`rendered` does."""
        with self._lock:
            if str(path) in self._entries:
                return None
        with session_fd(path) as fd:
            tail = read_tail(fd, 1, LAST_RECORD_BYTES)
        if tail.damage or not tail.records:
            return None
        next_seq = next_seq_of_tail(tail.records)
        if not view_continues(view.next_seq, view.message_count, next_seq):
            return None
        count = view.message_count
        return RecentMessages([], [], count or 0, next_seq, count is None, True)

    def _keep_tail(
        self, key: tuple[str, int, bool], identity: tuple[int, ...], recent: RecentMessages
    ) -> None:
        """Keep a tail read's answer for a repeat, dropping the least recently used beyond
        :data:`TAIL_MEMO_BYTES` (an answer over a sixteenth of it is not kept)."""
        charge = sum(map(len, recent.entries)) + len(recent.entries) * MESSAGE_OVERHEAD_BYTES
        with self._lock:
            if key in self._tails:
                del self._tails[key]
                self._tails_charged -= self._tails_charges.pop(key)
            if charge > TAIL_MEMO_BYTES // 16:
                return
            self._tails[key] = (identity, recent)
            self._tails_charges[key] = charge
            self._tails_charged += charge
            while self._tails_charged > TAIL_MEMO_BYTES:
                oldest, _ = self._tails.popitem(last=False)
                self._tails_charged -= self._tails_charges.pop(oldest)

    def _use(self, path: Path, use: Callable[[_Entry, bytes], _T]) -> _T | None:
        """``use(entry, uncommitted tail)`` on the current entry of ``path`` (under its lock), or None."""
        with session_fd(path) as fd:
            return self._rendered(str(path), fd, use)

    def _rendered(self, key: str, fd: int, use: Callable[[_Entry, bytes], _T]) -> _T | None:
        """:meth:`_use` of the open file ``fd``; ``key`` names it in the cache."""
        stat = os.fstat(fd)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None:
            with entry.lock:
                if entry.matches(fd, stat):
                    before = entry.committed
                    tail = entry.extend(fd, stat)
                    grown = entry.committed != before
                    rendered = use(entry, tail)
                    self._count("extended" if grown else "unchanged")
                    if grown:
                        self._settle(key, entry, entry.charge())
                    return rendered
            self._drop(key, entry)
        if stat.st_size > self.max_file_bytes:
            return None
        entry = _Entry(stat.st_dev, stat.st_ino)
        with entry.lock:
            tail = entry.extend(fd, stat)
            rendered = use(entry, tail)
            self._count("rebuilt")
            if self.budget_bytes:
                self._settle(key, entry, entry.charge())
            return rendered

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def forget(self, path: Path) -> None:
        """Drop the entry of a session file that went (deleted: none of its rendered messages is kept)."""
        key = str(path)
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._charged -= self._charges.pop(key)
            for tail_key in [tail_key for tail_key in self._tails if tail_key[0] == key]:
                del self._tails[tail_key]
                self._tails_charged -= self._tails_charges.pop(tail_key)

    def _drop(self, key: str, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]
                self._charged -= self._charges.pop(key)

    def _settle(self, key: str, entry: _Entry, charge: int) -> None:
        """Keep ``entry`` under ``key``, charged ``charge`` bytes, dropping the least recently used
        entries beyond the budget; an entry over half the budget alone is not kept."""
        with self._lock:
            if key in self._entries:
                del self._entries[key]
                self._charged -= self._charges.pop(key)
            if charge > self.budget_bytes // 2:
                return
            self._entries[key] = entry
            self._charges[key] = charge
            self._charged += charge
            while self._charged > self.budget_bytes and len(self._entries) > 1:
                oldest, _ = self._entries.popitem(last=False)
                self._charged -= self._charges.pop(oldest)
                self.counts["evicted"] += 1
