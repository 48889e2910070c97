"""Real sessions (the corpus's Codex and Claude Code files, imported through ``rollout import``): the
tail rebuild (shared.rebuild_tail) gives the whole-file rebuild's last messages for every limit."""

from __future__ import annotations

from tests.conftest import CORPUS, run_rollout
from tests.data_roots import session_files
from tests.shared.test_rebuild_tail import check_equal


def test_every_imported_corpus_session_reads_the_same_from_its_tail(writer_process, data_dir) -> None:
    """Windows of 512 bytes and of 64 KiB over each imported session: equal, or left to the whole
    file; some answers come from a window short of the file's start."""
    for tool in ("codex", "claude"):
        result = run_rollout(
            "import", tool, "--json", "--writer", writer_process.address, str(CORPUS / tool), timeout=120
        )
        assert result.returncode == 0, result.stderr
    paths = session_files(data_dir)
    assert len(paths) >= 8
    from_tail = sum(check_equal(path, block) for path in paths for block in (512, 64 * 1024))
    assert from_tail > 0
