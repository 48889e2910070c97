"""The one reader of source files: the lines of a binary file iteration, regular files only, no line
read past the limit."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rollout_cli.importers.source_lines as source_lines
from rollout_cli.importers.source_lines import SourceFileError, SourceLines, SourceLineTooLongError


def as_iterated(data: bytes) -> list[bytes]:
    """The lines ``for raw in open(path, "rb")`` gives: split after each newline, ends kept."""
    return [line for line in re.split(rb"(?<=\n)", data) if line]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"\xff", b"x" * 9]), max_size=40).map(
        b"".join
    ),
    chunk_bytes=st.integers(min_value=1, max_value=12),
    limit=st.integers(min_value=1, max_value=30),
    read_limit=st.one_of(st.none(), st.integers(min_value=1, max_value=5)),
)
def test_the_lines_are_a_file_iterations_until_one_is_over_the_limit(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    data: bytes,
    chunk_bytes: int,
    limit: int,
    read_limit: int | None,
) -> None:
    """In any chunk size, with whole or short reads: the lines are those of a binary file iteration
    (newlines kept, the last line without one); the first line over ``limit`` bytes (its newline not
    counted) ends the iteration with SourceLineTooLongError naming it, after every line before it."""

    def short_pread(fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size if read_limit is None else min(size, read_limit), offset)

    monkeypatch.setattr(source_lines, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(source_lines, "pread", short_pread)
    path = tmp_path / "source.jsonl"
    path.write_bytes(data)
    expected = as_iterated(data)
    over = [number for number, line in enumerate(expected, 1) if len(line.removesuffix(b"\n")) > limit]
    got: list[bytes] = []
    with SourceLines(path, limit) as lines:
        if over:
            with pytest.raises(SourceLineTooLongError) as caught:
                got.extend(lines)
            assert caught.value.line == over[0]
            assert f"longer than {limit} bytes" in caught.value.reason
        else:
            got.extend(lines)
    assert got == expected[: over[0] - 1] if over else got == expected


def test_no_line_is_read_past_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first line of 64 MiB under a limit of 1 MiB: it fails after at most the limit and one chunk
    were read, whatever follows it."""
    read: list[int] = []

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        data = os.pread(fd, size, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(source_lines, "pread", counting_pread)
    path = tmp_path / "long.jsonl"
    with path.open("wb") as handle:  # sparse: 64 MiB of zero bytes, then a newline and more
        handle.truncate(64 << 20)
        handle.seek(0, os.SEEK_END)
        handle.write(b'\n{"after": 1}\n')
    with SourceLines(path, 1 << 20) as lines, pytest.raises(SourceLineTooLongError) as caught:
        next(iter(lines))
    assert caught.value.line == 1
    assert sum(read) <= (1 << 20) + source_lines.CHUNK_BYTES


def test_a_long_line_comes_from_one_read_of_its_exact_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line of many chunks is scanned without keeping them, then read once, whole: one copy of it."""
    sizes: list[int] = []

    def recording_pread(fd: int, size: int, offset: int) -> bytes:
        sizes.append(size)
        return os.pread(fd, size, offset)

    monkeypatch.setattr(source_lines, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(source_lines, "pread", recording_pread)
    long_line = b"{" + b"x" * 10_000 + b"}\n"
    path = tmp_path / "source.jsonl"
    path.write_bytes(b"{}\n" + long_line + b"{}\n")
    with SourceLines(path) as lines:
        assert list(lines) == [b"{}\n", long_line, b"{}\n"]
    assert len(long_line) in sizes
    assert max(sizes) == len(long_line)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_what_is_not_a_regular_file_is_refused_by_name_before_a_byte_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A named pipe (no writer: opening it to read would block), a link to /dev/zero (endless), a
    folder: SourceFileError saying what it is, with no read at all."""
    monkeypatch.setattr(source_lines, "pread", lambda *_: pytest.fail("read"))
    path = tmp_path / f"{kind}.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
        expected = "a named pipe (FIFO)"
    elif kind == "device":
        path.symlink_to("/dev/zero")
        expected = "a character device (/dev/zero)"
    else:
        path.mkdir()
        expected = "a folder"
    with pytest.raises(SourceFileError) as caught:
        SourceLines(path)
    assert caught.value.reason.startswith(expected)
    assert "only regular files are read" in caught.value.reason
    assert (caught.value.path, caught.value.line) == (path, 0)


def test_a_device_is_never_opened_and_a_pipe_swapped_in_after_the_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The type is checked before opening (a link to /dev/zero is never opened) and again on the
    opened descriptor: a named pipe that a stale check took for a file is refused, not blocked on."""
    opened: list[str] = []
    real_open, real_stat = os.open, os.stat

    def recording_open(path: os.PathLike[str] | str, flags: int, *args: int) -> int:
        opened.append(os.fspath(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", recording_open)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    with pytest.raises(SourceFileError):
        SourceLines(zero)
    assert opened == []

    regular = tmp_path / "regular.jsonl"
    regular.write_text("{}\n")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    monkeypatch.setattr(
        os, "stat", lambda path, *a, **k: real_stat(regular if path == fifo else path, *a, **k)
    )
    with pytest.raises(SourceFileError) as caught:
        SourceLines(fifo)
    assert opened == [str(fifo)]
    assert caught.value.reason.startswith("a named pipe (FIFO)")
