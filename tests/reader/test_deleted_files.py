"""A session file that goes (DeleteSession) takes the reader's derived state with it: its
listing entry, its rendered replay and its rounds are dropped as the folder reports it."""

from __future__ import annotations

from pathlib import Path

from reader_service.listing import list_sessions
from reader_service.server import ReaderConfig, RolloutReaderServicer
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
