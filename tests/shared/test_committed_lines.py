"""shared.committed_lines: every whole-file pass reads the same complete lines, whatever the chunk size."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shared.committed_lines as committed_lines
from shared.committed_lines import CommittedLines


@contextmanager
def open_bytes(data: bytes) -> Iterator[int]:
    """A read-only descriptor of a temporary file holding ``data``."""
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        yield handle.fileno()


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\xff", b"x" * 9]), max_size=40).map(b"".join),
    chunk_bytes=st.integers(min_value=1, max_value=12),
    start_fraction=st.floats(min_value=0, max_value=1),
    stop_fraction=st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
    read_limit=st.one_of(st.none(), st.integers(min_value=1, max_value=5)),
)
def test_the_lines_tail_and_end_are_those_of_a_split_of_the_range(
    data: bytes, chunk_bytes: int, start_fraction: float, stop_fraction: float | None, read_limit: int | None
) -> None:
    """Any range read in any chunk size, whole reads or short ones (at most ``read_limit`` bytes
    each, as ``pread`` may return): the lists joined are the range's complete lines, in order;
    ``tail`` is what follows its last newline; no list is empty; the descriptor's own offset is not moved."""
    start = int(len(data) * start_fraction)
    stop = None if stop_fraction is None else start + int((len(data) - start) * stop_fraction)
    expected = data[start:stop].split(b"\n")
    expected_tail = expected.pop()

    def short_pread(fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size if read_limit is None else min(size, read_limit), offset)

    with open_bytes(data) as fd, patch.object(committed_lines, "pread", short_pread):
        os.lseek(fd, 3, os.SEEK_SET)
        reader = CommittedLines(fd, start, stop, chunk_bytes)
        batches = list(reader)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 3
    assert all(batches)
    assert [line for batch in batches for line in batch] == expected
    assert reader.tail == expected_tail


def test_a_line_longer_than_a_chunk_comes_whole_with_the_chunk_that_ends_it() -> None:
    data = b"short\n" + b"L" * 50 + b"\nnext\npartial"
    with open_bytes(data) as fd:
        reader = CommittedLines(fd, chunk_bytes=8)
        batches = list(reader)
    assert [line for batch in batches for line in batch] == [b"short", b"L" * 50, b"next"]
    assert b"L" * 50 in batches[1]
    assert reader.tail == b"partial"


def test_a_file_cut_while_it_is_read_ends_where_its_bytes_end() -> None:
    """The range asked for is longer than what pread returns (the file was cut): the pass ends at
    the bytes there are, the unended last bytes are the tail, and nothing is made up."""
    data = b"one\ntwo\nthr"
    with open_bytes(data) as fd:
        reader = CommittedLines(fd, 0, 1000, chunk_bytes=4)
        assert list(reader.lines()) == [b"one", b"two"]
    assert reader.tail == b"thr"


def test_reads_go_through_the_module_pread_in_bounded_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read is one ``pread`` of at most ``chunk_bytes`` (what a caller's memory bound rests on)."""
    sizes: list[int] = []
    real = committed_lines.pread

    def counting(fd: int, size: int, offset: int) -> bytes:
        sizes.append(size)
        return real(fd, size, offset)

    monkeypatch.setattr(committed_lines, "pread", counting)
    with open_bytes(b"ab\n" * 100) as fd:
        assert len(list(CommittedLines(fd, chunk_bytes=16).lines())) == 100
    assert max(sizes) <= 16
    assert sum(sizes) >= 300


def test_a_chunk_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_bytes must be > 0"):
        CommittedLines(0, chunk_bytes=0)
