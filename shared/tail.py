"""Reading the last records of a session file from its tail (bounded bytes, any file size).

Both services read tails: the reader for stop facts and listings (SPEC §5), the
writer for its session index at start-up (SPEC §2.10: the next seq and stop state
of every session, never a whole-file read). :func:`read_tail` reads a window of
``window`` bytes from the end (64 KiB by default) and doubles it only while it
does not yet hold ``want`` complete records, so the bytes read depend on the size
of the last records, not of the file. A last line without ``\\n`` is not
committed and is never returned; unparseable lines and NUL padding are skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import orjson

DEFAULT_TAIL_WINDOW = 64 * 1024


@dataclass(frozen=True, slots=True)
class Tail:
    """The last records of a file, newest first, and what reading them cost.

    ``bytes_read`` counts every byte read (the cost); ``clean_end`` is true when the
    file ends with ``\\n`` and its last line parses as a record object (nothing for
    the writer's start-up repair to do); ``size`` is the file size in bytes.
    """

    records: list[dict[str, Any]]
    bytes_read: int
    clean_end: bool
    size: int


def last_records(tail: bytes, partial_first: bool, want: int) -> list[dict[str, Any]]:
    """Up to ``want`` last parseable records (objects with an object ``payload``) of ``tail``, newest first.

    ``partial_first``: the first line of ``tail`` may be cut (the window starts
    inside it) and is skipped. Bytes after the last ``\\n`` are ignored.
    """
    end = tail.rfind(b"\n")
    if end < 0:
        return []
    lines = tail[:end].split(b"\n")
    if partial_first:
        lines = lines[1:]
    found: list[dict[str, Any]] = []
    for raw in reversed(lines):
        try:
            record = orjson.loads(raw.lstrip(b"\x00"))
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("payload"), dict):
            found.append(record)
            if len(found) == want:
                break
    return found


def _ends_clean(tail: bytes) -> bool:
    if not tail.endswith(b"\n"):
        return False
    start = tail.rfind(b"\n", 0, len(tail) - 1) + 1
    try:
        record = orjson.loads(tail[start:-1])
    except orjson.JSONDecodeError:
        return False
    return isinstance(record, dict)


def read_tail(fd: int, want: int, window: int = DEFAULT_TAIL_WINDOW) -> Tail:
    """Read the last ``want`` complete records of the open file ``fd`` (positional reads only).

    Bytes read: ``window`` (at most the file size), doubled only while the window
    holds fewer than ``want`` records. Raises OSError when the file cannot be read.
    """
    size = os.fstat(fd).st_size
    window = min(window, size)
    total = 0
    while True:
        tail = os.pread(fd, window, size - window)
        total += len(tail)
        records = last_records(tail, partial_first=window < size, want=want)
        if len(records) >= want or window >= size:
            return Tail(records, total, _ends_clean(tail), size)
        window = min(size, window * 2)
