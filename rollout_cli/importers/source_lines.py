"""The one reader of source files every importer is fed by: regular files only, lines bounded.

:class:`SourceLines` opens a source file and yields its lines as bytes, each with
its ``\\n`` (the last line may have none), exactly as iterating a file opened in
binary mode does: an importer may hash them (Codex files without an id are named
by their content). Its limits protect the person importing:

* **Regular files only.** A named pipe (FIFO), a device (a link to ``/dev/zero``),
  a socket or a folder is refused by name (:class:`SourceFileError`), before a
  byte is read: a FIFO would block the import until some process writes to it,
  and a device can be endless. The type is checked before opening (a device is
  never opened), and again on the opened descriptor (opened without blocking),
  so a file swapped in between is caught too.
* **No line past the limit.** A line whose bytes (its ``\\n`` not counted) exceed
  ``max_line_bytes`` fails the file, naming the line (:class:`SourceLineTooLongError`),
  after at most ``max_line_bytes`` plus one chunk of it was read. The default is
  the writer's default record limit (:data:`shared.records.DEFAULT_MAX_RECORD_BYTES`):
  a longer source line would almost always become a refused record, after
  the whole file had been read and converted.
* **One copy of a long line.** Lines are read in chunks of :data:`CHUNK_BYTES`;
  a line longer than what is left of its chunk is scanned to its end without
  keeping the chunks, then read whole with one ``pread`` of its exact length, so
  reading a line costs about its length in memory (plus two chunks), not twice
  its length as ``readline`` (which joins the pieces it gathered) does.

Reading errors propagate as OSError.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from shared.records import DEFAULT_MAX_RECORD_BYTES

#: Bytes read at a time.
CHUNK_BYTES = 1024 * 1024

#: ``os.pread``, looked up through the module so a test can count what a read takes.
pread = os.pread


class SourceFileError(Exception):
    """A source file that is not imported: ``reason`` says why; ``line`` is the 1-based line it
    is about (0: the file as a whole)."""

    def __init__(self, path: Path, reason: str, line: int = 0) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.line = line


class SourceLineTooLongError(SourceFileError):
    """A line longer than the limit; nothing of the file is imported."""


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refusal(path: Path, mode: int) -> SourceFileError:
    target = f" ({path.resolve()})" if path.is_symlink() else ""
    return SourceFileError(path, f"{_kind(mode)}{target}: only regular files are read; nothing imported")


def _read_at(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes of ``fd`` from ``offset`` (fewer when the file ends first): one pread
    unless it returns short (Linux returns at most about 2 GiB per call)."""
    first = pread(fd, size, offset)
    if len(first) == size or not first:
        return first
    pieces = [first]
    done = len(first)
    while done < size:
        piece = pread(fd, size - done, offset + done)
        if not piece:
            break
        pieces.append(piece)
        done += len(piece)
    return b"".join(pieces)


class SourceLines:
    """The lines of one source file (see the module doc); a context manager that closes it.

    Raises :class:`SourceFileError` when the file is not a regular file and OSError
    when it cannot be opened; iterating raises :class:`SourceLineTooLongError`
    at the first line over ``max_line_bytes``.
    """

    def __init__(self, path: Path, max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> None:
        if max_line_bytes <= 0:
            raise ValueError(f"max_line_bytes must be > 0, got {max_line_bytes}")
        self.path = path
        self.max_line_bytes = max_line_bytes
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(path, mode)
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            mode = os.fstat(self.fd).st_mode
            if not stat.S_ISREG(mode):
                raise _refusal(path, mode)
            os.set_blocking(self.fd, True)
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (once; later calls do nothing)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _too_long(self, number: int) -> SourceLineTooLongError:
        return SourceLineTooLongError(
            self.path,
            f"the line is longer than {self.max_line_bytes} bytes (--max-line-bytes, by default the"
            " writer's record limit; raise both to import it); nothing imported",
            number,
        )

    def __iter__(self) -> Iterator[bytes]:
        fd, limit = self.fd, self.max_line_bytes
        chunk, offset, start, number = b"", 0, 0, 0  # chunk: the file's bytes from offset; start: in chunk
        while True:
            end = chunk.find(b"\n", start)
            number += 1
            if end >= 0:  # the line ends in this chunk
                if end - start > limit:
                    raise self._too_long(number)
                yield chunk[start : end + 1]
                start = end + 1
                continue
            # The line goes past this chunk: scan on to its end, keeping only the chunk that ends it.
            line_offset, seen = offset + start, len(chunk) - start
            rest, rest_offset, newline = b"", offset + len(chunk), -1
            while True:
                if seen > limit:
                    raise self._too_long(number)
                rest = pread(fd, CHUNK_BYTES, rest_offset)
                if not rest:
                    break  # end of file
                newline = rest.find(b"\n")
                if newline >= 0:
                    break
                seen += len(rest)
                rest_offset += len(rest)
            if newline < 0:  # the last line, without a newline
                if seen:
                    yield chunk[start:] if seen == len(chunk) - start else _read_at(fd, seen, line_offset)
                return
            if seen + newline > limit:
                raise self._too_long(number)
            if rest_offset == offset + len(chunk):  # the line spans this chunk and the next only
                yield chunk[start:] + rest[: newline + 1]
            else:  # one read of its exact length: one copy of a long line
                yield _read_at(fd, seen + newline + 1, line_offset)
            chunk, offset, start = rest, rest_offset, newline + 1
