"""rollout import's walk and per-file outcome, in process (no writer: nothing here is sent)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from rollout_cli.importers import ImportedFile
from rollout_cli.importers.codex import CodexImporter
from rollout_cli.importers.command import FileReport, import_one, source_files


class _Failing(CodexImporter):
    """A Codex importer whose conversion meets content it did not foresee."""

    def convert(self, lines: Iterable[bytes], source: Path) -> ImportedFile:
        raise ValueError("unforeseen")


def test_a_walk_lists_a_pipe_so_named_to_refuse_it_by_name(tmp_path: Path) -> None:
    """A walked folder's named pipe *.jsonl is listed (then refused by name when read), not skipped
    in silence; a symlink is still skipped, an empty named folder reported."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "a.jsonl").write_text("{}\n")
    os.mkfifo(folder / "b.jsonl")
    (folder / "c.jsonl").symlink_to(folder / "a.jsonl")
    empty = tmp_path / "empty"
    empty.mkdir()
    found: Iterator[Path | FileReport] = source_files(CodexImporter(), (folder, empty))
    walked = list(found)
    assert walked[:2] == [folder / "a.jsonl", folder / "b.jsonl"]
    [report] = walked[2:]
    assert isinstance(report, FileReport)
    assert (report.path, report.status) == (empty, "not_a_source")
    refused = import_one(None, CodexImporter(), folder / "b.jsonl", "", None)  # type: ignore[arg-type]
    assert (refused.status, refused.line) == ("failed", 0)
    assert refused.detail.startswith("a named pipe (FIFO)")


def test_a_file_the_converter_cannot_handle_fails_by_name(tmp_path: Path) -> None:
    """Content the converter did not foresee fails that file with a sentence, never a traceback."""
    source = tmp_path / "a.jsonl"
    source.write_text("{}\n")
    report = import_one(None, _Failing(), source, "", None)  # type: ignore[arg-type]
    assert (report.status, report.detail) == (
        "failed",
        "cannot convert it (ValueError: unforeseen); nothing imported",
    )
