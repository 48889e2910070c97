"""The complete lines of a session file, read in bounded chunks (every whole-file pass).

A session file is a sequence of lines, each ended by ``\\n`` (docs/spec.md §1); bytes after
the last ``\\n`` are not committed yet (a write in progress, or a torn one).
:class:`CommittedLines` reads a byte range of an open file descriptor with
``os.pread`` (the descriptor's own offset is neither used nor moved), at most
``chunk_bytes`` at a time, and yields the complete lines of each chunk together, as
one list of ``bytes`` without their ``\\n``: a caller that applies lines in batches
(the rebuild pass, the replay cache) takes the lists, one that wants lines takes
:meth:`CommittedLines.lines`. A line longer than a chunk is carried over as its pieces and
joined once, with the chunk that ends it: reading it costs time in proportion to its
length, and memory is about one chunk plus twice the longest line.

After the iteration, ``tail`` holds the bytes after the last ``\\n`` (``b""`` when the
range ends on a line boundary). A file cut shorter while it is read ends the
iteration where its bytes end. Reading errors propagate as OSError (``os.pread``'s,
naming no file). Used by the index rebuild, the replay cache, the writer's reopen of
a session after its saved state, and the fork-point search.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import chain

#: Bytes read at a time unless a caller chooses otherwise.
CHUNK_BYTES = 4 * 1024 * 1024

#: ``os.pread``, looked up through the module so a test can count what a pass reads.
pread = os.pread


class CommittedLines:
    """Iterate lists of complete lines of ``fd`` from ``start`` to ``stop`` (end of file when None)."""

    def __init__(
        self, fd: int, start: int = 0, stop: int | None = None, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        self.fd = fd
        self.start = start
        self.stop = stop
        self.chunk_bytes = chunk_bytes
        #: The bytes after the last ``\\n`` read (set once the iteration ends).
        self.tail = b""

    def __iter__(self) -> Iterator[list[bytes]]:
        fd, stop, chunk_bytes = self.fd, self.stop, self.chunk_bytes
        position = self.start
        pending: list[bytes] = []  # the pieces of an unended line, joined once it ends
        while True:
            size = chunk_bytes if stop is None else min(chunk_bytes, stop - position)
            if size <= 0:
                break
            chunk = pread(fd, size, position)
            if not chunk:
                break  # end of file, or the file was cut while being read
            position += len(chunk)  # a read may be short
            end = chunk.find(b"\n")
            if end < 0:
                pending.append(chunk)
                continue
            if pending:  # a carried line ends in this chunk: join its pieces once
                pending.append(chunk[:end])
                lines = [b"".join(pending), *chunk[end + 1 :].split(b"\n")]
                pending.clear()
            else:
                lines = chunk.split(b"\n")
            last = lines.pop()  # the bytes after the chunk's last newline
            if last:
                pending.append(last)
            yield lines
        self.tail = b"".join(pending)

    def lines(self) -> Iterator[bytes]:
        """The complete lines one by one (``tail`` is set once it is exhausted)."""
        return chain.from_iterable(self)


def lines_before(fd: int, offset: int, chunk_bytes: int = 64 * 1024) -> Iterator[bytes]:
    """The complete lines of ``fd`` that end before ``offset`` (a line boundary), last first,
    without their ``\\n``: what a search back from a file's end reads (a request id, the line
    of a seq). Bytes are read ``chunk_bytes`` at a time from ``offset`` back; a line longer than
    a chunk is joined before it is yielded. The caller stops the iteration when it has read far
    enough. Raises OSError as ``os.pread`` does.
    """
    return chain.from_iterable(line_blocks_before(fd, offset, chunk_bytes))


def line_blocks_before(fd: int, offset: int, chunk_bytes: int = 64 * 1024) -> Iterator[list[bytes]]:
    """:func:`lines_before` one read at a time: per read of ``chunk_bytes`` (or less, at the
    file's start), the lines it completed, last first (an empty list when a line longer than a
    chunk is still open). For a caller that decides after each read whether to read on (the
    tail rebuild, shared.rebuild_tail). Given ``offset`` = the file's size, the first line of
    the first list is the bytes after the last ``\\n`` (``b""`` when the file ends with one).
    Raises OSError as ``os.pread`` does.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    position = offset
    pending = b""  # the end of a line that began before the bytes read so far
    while position > 0:
        size = min(chunk_bytes, position)
        position -= size
        lines = (pread(fd, size, position) + pending).split(b"\n")
        if position:
            pending = lines[0]
            del lines[0]
        else:
            pending = b""
        lines.reverse()
        yield lines
