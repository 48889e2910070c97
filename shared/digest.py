"""The checkpoint digest over a rebuilt message sequence (docs/spec.md §4).

``digest(messages) -> "sha256:v1:<64 hex>"``. Per message the canonical form is
the JSON object of exactly :data:`DIGEST_FIELDS` that are present, with sorted
keys (at every depth), compact, UTF-8 (orjson). ``is_anchored`` and
``truncation_marker`` are deliberately left out; ``reasoning`` is deliberately in
(it is fed back to the provider): the block object when a message has one (the
form every older checkpoint was computed over), the list of blocks when it has
several. The byte stream hashed is::

    b"rollout-ledger/digest/v1\\x00" + count (8 bytes, big endian)
    + for each message: len(canonical) (8 bytes, big endian) + canonical

The domain tag and the length framing make the stream prefix-free: no two
different sequences hash the same bytes. The ``v1`` tag lets a later digest live
beside old checkpoints. Throughput is sha256's (~1.5 GB/s) plus one orjson dump
per message.

Versions that attached only the last of several reasoning blocks wrote checkpoints
over that reading; :func:`single_reasoning_digest` recomputes it so that a reader can
recognize such a checkpoint instead of calling a sound file damaged.

The lines digest (a checkpoint's ``lines_digest``, an addition to docs/spec.md §1 beside the
digest above, which stays as it is) pins the lines a checkpoint covers:
``"sha256:lines:v1:<64 hex>"`` over::

    b"rollout-ledger/lines-digest/v1\x00" + for each line after the first and before the
    checkpoint, in file order: its check as 4 bytes, little endian

The first line, the ``session_meta``, is left out: a fork copies its source's other
lines byte for byte under a ``session_meta`` of its own, so the checkpoints it copies
keep verifying (a fork of a fork too); the ``session_meta`` has its line check.

where a line's check is its ``crc32c`` value when it has one (shared.records: the
value itself is verified against the line's bytes separately) and the CRC32C of its
whole bytes (without ``\n``) when it has none. Hashing the checks instead of the bytes
costs ~4 bytes per line instead of the line (a 100 MB file: ~0.5 MB of sha256), so
every reader verifies it while rebuilding; every byte stays pinned, through the line
check of its line.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

DIGEST_VERSION = "v1"
DIGEST_PREFIX = f"sha256:{DIGEST_VERSION}:"
DIGEST_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning")
_DOMAIN_TAG = b"rollout-ledger/digest/v1\x00"
LINES_DIGEST_PREFIX = "sha256:lines:v1:"
_LINES_DOMAIN_TAG = b"rollout-ledger/lines-digest/v1\x00"
#: The array type of line checks (unsigned, 4 bytes on every platform CPython supports).
LINE_CHECKS_TYPECODE = "I"
if array(LINE_CHECKS_TYPECODE).itemsize != 4:  # pragma: no cover - no such platform in use
    raise ImportError("the lines digest needs a 4-byte unsigned array type")


_DIGEST_FIELD_SET = frozenset(DIGEST_FIELDS)


def canonical_message(message: Mapping[str, Any]) -> bytes:
    """The canonical bytes of one rebuilt message (the fields of :data:`DIGEST_FIELDS`).

    The bytes object orjson returns holds its whole output buffer (16 KiB for a 1 KiB
    message): copy it (as :func:`framed_canonical` does) before keeping it for long.
    """
    if type(message) is dict and message.keys() <= _DIGEST_FIELD_SET:
        return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)  # nothing to leave out: no copy
    return orjson.dumps(
        {field: message[field] for field in DIGEST_FIELDS if field in message},
        option=orjson.OPT_SORT_KEYS,
    )


def framed_canonical(message: Mapping[str, Any]) -> bytes:
    """One message's part of the hashed stream: len(canonical) (8 bytes, big endian) + canonical."""
    item = canonical_message(message)
    return len(item).to_bytes(8, "big") + item


def digest_of_framed(framed: Iterable[bytes], count: int) -> str:
    """The digest of ``count`` messages given as :func:`framed_canonical` bytes, in order.

    Lets a reader that keeps each message's framed bytes (the replay cache) digest a
    sequence again without re-encoding it. Raises ValueError if ``framed`` does not
    hold exactly ``count`` items.
    """
    hasher = hashlib.sha256(_DOMAIN_TAG)
    hasher.update(count.to_bytes(8, "big"))
    added = 0
    for item in framed:
        hasher.update(item)
        added += 1
    if added != count:
        raise ValueError(f"digest framed for {count} messages but {added} were given")
    return DIGEST_PREFIX + hasher.hexdigest()


class DigestBuilder:
    """The digest of a sequence fed one message at a time (bounded memory).

    ``count`` must be the number of messages that will be added: it is framed
    first. :meth:`add` returns the canonical length in bytes (readers estimate
    tokens from it); :meth:`result` raises ValueError if fewer or more were added.
    """

    __slots__ = ("_added", "_count", "_hasher")

    def __init__(self, count: int) -> None:
        self._count = count
        self._added = 0
        self._hasher = hashlib.sha256(_DOMAIN_TAG)
        self._hasher.update(count.to_bytes(8, "big"))

    def add(self, message: Mapping[str, Any]) -> int:
        item = canonical_message(message)
        self._hasher.update(len(item).to_bytes(8, "big"))
        self._hasher.update(item)
        self._added += 1
        return len(item)

    def result(self) -> str:
        if self._added != self._count:
            raise ValueError(f"digest framed for {self._count} messages but {self._added} were added")
        return DIGEST_PREFIX + self._hasher.hexdigest()


def digest(messages: Sequence[Mapping[str, Any]]) -> str:
    """Digest a rebuilt message sequence: ``"sha256:v1:"`` + 64 lowercase hex digits.

    ``messages`` are rebuilt message payloads (shared.rebuild), reasoning attached
    under ``"reasoning"``. Raises TypeError when a message holds a value JSON
    cannot encode.
    """
    return digest_of_payloads(messages, len(messages))


def digest_of_payloads(messages: Iterable[Mapping[str, Any]], count: int) -> str:
    """:func:`digest` of ``count`` messages fed one at a time, e.g. read back from a file
    (memory does not grow with the sequence). Raises ValueError when the iterable does not
    give exactly ``count`` messages, TypeError as :func:`digest` does."""
    builder = DigestBuilder(count)
    for message in messages:
        builder.add(message)
    return builder.result()


def single_reasoning_digest(messages: Iterable[Mapping[str, Any]], count: int) -> str | None:
    """The digest of ``messages`` as versions before several-reasoning support rebuilt them, or None.

    Those versions attached only the last of several ``reasoning`` records to an
    assistant message (the earlier ones were reported dangling), so a message
    whose ``"reasoning"`` is a list is digested with its last block only.
    ``count`` is the number of messages (framed first). Returns None when no
    message holds a list: both readings are then the same sequence. Streams:
    memory does not grow with the number of messages.
    """
    builder = DigestBuilder(count)
    changed = False
    for message in messages:
        reasoning = message.get("reasoning")
        if isinstance(reasoning, list) and reasoning:
            message = {**message, "reasoning": reasoning[-1]}
            changed = True
        builder.add(message)
    return builder.result() if changed else None


class LinesDigest:
    """The ``lines_digest`` of the lines read so far (see the module doc), fed in file order.

    :meth:`add` takes line checks as an ``array("I")`` (4-byte unsigned, as the
    rebuild collects them) and hashes them; :meth:`result` is the digest of what was
    added, leaving this object unchanged.
    """

    __slots__ = ("_hasher",)

    def __init__(self) -> None:
        self._hasher = hashlib.sha256(_LINES_DOMAIN_TAG)

    def add(self, checks: array[int]) -> None:
        if sys.byteorder == "big":  # pragma: no cover - the machines in use are little endian
            checks = array(LINE_CHECKS_TYPECODE, checks)
            checks.byteswap()
        self._hasher.update(checks)

    def result(self) -> str:
        """The digest of the checks added so far (the digest itself goes on taking more)."""
        return LINES_DIGEST_PREFIX + self._hasher.hexdigest()
