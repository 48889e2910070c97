"""A session file that goes (DeleteSession) takes the reader's derived state with it: its
listing entry, its rendered replay, its rounds and its rows of the content index are dropped
as the folder reports it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reader_service.listing import list_sessions
from reader_service.search_index import INDEX_FILE, SearchFilters
from reader_service.server import ReaderConfig, RolloutReaderServicer, _searched
from shared.rounds import Lineage
from tests.reader.test_listing_index import ids, session_id, user, write


def test_a_removed_file_leaves_the_replay_and_round_caches(data_dir: Path) -> None:
    gone = write(data_dir, 1, "t", user("secret"), user("more"))
    kept = write(data_dir, 2, "t", user("other"))
    reader = RolloutReaderServicer(ReaderConfig(data_dir))
    try:
        assert ids(list_sessions(reader.index)) == [session_id(2), session_id(1)]
        for path in (gone, kept):
            assert reader.replays.rendered(path) is not None
            reader.round_cache.rounds(path, lambda: Lineage(""))
        charged = reader.replays.charged_bytes
        gone.unlink()
        assert ids(list_sessions(reader.index)) == [session_id(2)]
        assert 0 < reader.replays.charged_bytes < charged
        assert str(gone) not in reader.replays._entries
        assert str(gone) not in reader.round_cache._entries
        assert str(kept) in reader.replays._entries
        assert str(kept) in reader.round_cache._entries
    finally:
        reader.close()  # the listing index and the content index (its lock file, its folder)


def _rows(index_file: Path, session: str) -> tuple[int, int]:
    """(``sessions`` rows naming the session, FTS rows holding "quokka"), read from the file."""
    with sqlite3.connect(f"file:{index_file}?mode=ro", uri=True) as connection:
        named = connection.execute("SELECT count(*) FROM sessions WHERE session_id = ?", (session,))
        held = connection.execute("SELECT count(*) FROM records WHERE records MATCH 'quokka'")
        rows = (named.fetchone()[0], held.fetchone()[0])
    connection.close()
    return rows


def test_a_removed_file_leaves_the_content_index_before_the_next_search(
    data_dir: Path, tmp_path: Path
) -> None:
    """No indexing thread runs here, so only the search's own look at the folders (the listing
    index's removal listeners) can take the session out: the search right after the removal finds
    nothing of it, and its rows are deleted from the index's tables, not only left out."""
    gone = write(data_dir, 1, "t", user("a quokka"))
    kept = write(data_dir, 2, "t", user("another quokka"))
    reader = RolloutReaderServicer(ReaderConfig(data_dir, search_index_dir=tmp_path / "search"))
    try:
        assert reader.search_index is not None
        reader.search_index.catch_up()
        index_file = tmp_path / "search" / INDEX_FILE

        def found() -> list[str]:
            page = _searched(reader.index, reader.search_index, "quokka", SearchFilters(), 10, 0)  # type: ignore[arg-type]
            return sorted(hit.session_id for hit in page.hits)

        assert found() == [session_id(1), session_id(2)]
        assert _rows(index_file, session_id(1)) == (1, 2)
        gone.unlink()
        assert found() == [session_id(2)]
        assert _rows(index_file, session_id(1)) == (0, 1)
        assert kept.exists()
    finally:
        reader.close()


def test_a_file_forgotten_while_the_index_is_written_is_left_out_then_its_rows_go(
    data_dir: Path, tmp_path: Path
) -> None:
    """A forget that meets an indexing step writing does not wait for it: searches leave the
    session out at once, and the next write transaction deletes its rows."""
    gone = write(data_dir, 1, "t", user("a quokka"))
    reader = RolloutReaderServicer(ReaderConfig(data_dir, search_index_dir=tmp_path / "search"))
    try:
        index = reader.search_index
        assert index is not None
        index.catch_up()
        with index._writing:  # an indexing step is writing
            index.forget(gone)
            assert index.search("quokka", SearchFilters(), 10, 0).hits == []
        assert _rows(tmp_path / "search" / INDEX_FILE, session_id(1)) == (1, 1)
        index.catch_up()  # the next transaction
        assert _rows(tmp_path / "search" / INDEX_FILE, session_id(1)) == (0, 0)
        assert index._forgotten == set()
    finally:
        reader.close()
