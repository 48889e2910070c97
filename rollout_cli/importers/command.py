"""``rollout import codex|claude PATH...``: import files or whole folders, with progress and a summary.

Each PATH is a source file or a folder walked for them (``~/.codex/sessions``,
``~/.claude/projects``; the importer's own folder when no PATH is given), whatever
its name: a folder named ``x.jsonl`` is walked too. A folder named as a PATH that
holds no file of the tool is reported by name, as a file that is not one is;
the importer's own folder may hold none (nothing to do). Files are read through
:mod:`rollout_cli.importers.source_lines`: a named pipe, a device or a line
longer than ``--max-line-bytes`` fails its file by name. Every file goes in all
or nothing (:mod:`rollout_cli.importers.upload`); a file that fails is named
with its line and the others go on. A file of the tool with no conversation in
it (a Claude Code file of titles only) is reported as ``empty``, never as
skipped. A progress bar (files, records, bytes) runs on stderr while it works;
the summary table (imported, skipped, failed, empty, records kept as events)
goes to stdout, or one JSON object per file with ``--json``. Exit status: 0
when every file was imported, skipped or empty, 1 when any failed or was not a
file of that tool (a named folder holding none included), or when the writer
cannot be reached (the file being sent is then not kept, and the files after
it are not tried).
"""

from __future__ import annotations

import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import grpc
import orjson
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rollout.v1 import writer_pb2_grpc
from rollout_cli.importers import ImportedFile, Importer
from rollout_cli.importers.claude import ClaudeImporter
from rollout_cli.importers.codex import CodexImporter
from rollout_cli.importers.source_lines import SourceFileError, SourceLines
from rollout_cli.importers.upload import ImportRefusedError, UploadOutcome, upload_file
from rollout_cli.reachability import cleartext_token_message, unreachable_message
from rollout_client import blocking_channel
from shared.records import DEFAULT_MAX_RECORD_BYTES

IMPORTERS: dict[str, Importer] = {"codex": CodexImporter(), "claude": ClaudeImporter()}


@dataclass
class FileReport:
    """The outcome of one source file, as the summary shows it."""

    path: Path
    status: str  # imported, skipped, failed, not_a_source, empty
    sessions: list[UploadOutcome] = field(default_factory=list)
    kept_as_event: Counter[str] = field(default_factory=Counter)
    detail: str = ""
    line: int = 0  # the source line a failure is about (0: the file as a whole)

    @property
    def where(self) -> str:
        """``path:line`` of a failure at a line, else the path (as compilers name places)."""
        return f"{self.path}:{self.line}" if self.line else str(self.path)

    def as_json(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "status": self.status,
            "detail": self.detail,
            "line": self.line,
            "kept_as_event": dict(self.kept_as_event),
            "sessions": [
                {
                    "session_id": outcome.session.session_id,
                    "status": outcome.status,
                    "role": str(outcome.session.role),
                    "agent_name": outcome.session.agent_name,
                    "parent_session_id": outcome.session.parent.session_id if outcome.session.parent else "",
                    "delegation_id": outcome.session.delegation_id,
                    "records": outcome.records,
                    "messages": outcome.messages,
                    "stop_kind": str(outcome.session.stop_kind),
                    "notes": outcome.session.notes,
                }
                for outcome in self.sessions
            ],
        }


def source_files(importer: Importer, paths: tuple[Path, ...]) -> Iterator[Path | FileReport]:
    """The files named, and the files under the folders named, each once, in the order given;
    a ``not_a_source`` report for each folder named that holds none (the importer's own
    folder, walked when no path is named, may hold none, or not exist: nothing is yielded)."""
    seen: set[Path] = set()
    for path in paths or (Path(importer.default_folder).expanduser(),):
        if not path.is_dir():
            found: Iterator[Path] = iter((path,) if paths else ())
        else:
            walked = list(importer.source_files(path))
            if not walked and paths:
                yield FileReport(
                    path,
                    "not_a_source",
                    detail=f"a folder with no {importer.label} (*.jsonl) under it; nothing imported",
                )
            found = iter(walked)
        for file in found:
            resolved = file.resolve()
            if resolved not in seen:
                seen.add(resolved)
                yield file


def import_one(
    stub: writer_pb2_grpc.RolloutWriterStub,
    importer: Importer,
    path: Path,
    tenant: str,
    progress: Any,
    max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> FileReport:
    """Convert and upload one source file, read through
    :class:`~rollout_cli.importers.source_lines.SourceLines` (``max_line_bytes``: its longest
    line); raises grpc.RpcError when the writer is not reachable."""
    try:
        with SourceLines(path, max_line_bytes) as lines:
            imported: ImportedFile = importer.convert(lines, path)
    except SourceFileError as exc:
        return FileReport(path, "failed", detail=exc.reason, line=exc.line)
    except OSError as exc:
        return FileReport(path, "failed", detail=f"cannot read it: {exc.strerror or exc}")
    except Exception as exc:  # content the converter did not foresee: this file fails, the others go on
        return FileReport(
            path, "failed", detail=f"cannot convert it ({type(exc).__name__}: {exc}); nothing imported"
        )
    if not imported.recognized:
        return FileReport(
            path, "not_a_source", detail=f"not a {importer.label} (no line parsed as one); nothing imported"
        )
    if not imported.sessions:
        return FileReport(
            path, "empty", detail="; ".join(imported.notes) or "no session in it; nothing imported"
        )
    report = FileReport(path, "imported")
    for session in imported.sessions:
        report.kept_as_event.update(session.kept_as_event)
    try:
        report.sessions = upload_file(stub, imported, tenant, on_records=progress)
    except ImportRefusedError as exc:
        return FileReport(path, "failed", detail=exc.reason, line=exc.line)
    if all(outcome.status == "skipped" for outcome in report.sessions):
        report.status = "skipped"
        report.kept_as_event.clear()  # nothing of this file was written now
    notes = [*imported.notes, *(note for session in imported.sessions for note in session.notes)]
    report.detail = "; ".join(notes)
    return report


def _file_bytes(path: Path) -> int:
    """The size of a regular file (0 for anything else, or a file gone meanwhile), for the progress bar."""
    try:
        status = path.stat()
    except OSError:
        return 0
    return status.st_size if stat.S_ISREG(status.st_mode) else 0


def _summary_table(reports: list[FileReport]) -> Table:
    table = Table(title="import summary", show_lines=False)
    for column in ("file", "status", "sessions", "records", "kept as events", "detail"):
        table.add_column(column, overflow="fold")
    for report in reports:
        kept = ", ".join(f"{kind}×{count}" for kind, count in sorted(report.kept_as_event.items()))
        table.add_row(
            report.path.name,
            report.status,
            str(len(report.sessions)),
            str(sum(outcome.records for outcome in report.sessions)),
            kept or "-",
            f"line {report.line}: {report.detail}" if report.line else report.detail,
        )
    return table


def _channel(writer: str, token: str | None, tls_ca: Path | None) -> grpc.Channel:
    try:
        return blocking_channel(writer, token=token, tls_ca=tls_ca)
    except ValueError as exc:  # a token in clear text to a remote address
        raise click.ClickException(cleartext_token_message(exc)) from exc


def run_import(
    tool: str,
    paths: tuple[Path, ...],
    writer: str,
    tenant: str,
    as_json: bool,
    token: str | None = None,
    tls_ca: Path | None = None,
    max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> int:
    """Import ``paths`` with the ``tool`` importer; returns the exit status (see the module doc).

    ``token`` / ``tls_ca``: the caller's credentials (rollout_client.blocking_channel); with
    authentication on, the token must be marked as an importer to keep source times.
    ``max_line_bytes``: the longest source line read (a longer one fails its file).
    """
    importer = IMPORTERS[tool]
    sources = list(source_files(importer, paths))
    if not sources:
        where = Path(importer.default_folder).expanduser()
        click.echo(f"no {importer.label} files found under {where}; nothing imported", err=True)
        return 0
    total_bytes = sum(_file_bytes(source) for source in sources if isinstance(source, Path))
    reports: list[FileReport] = []
    console = Console(stderr=True)
    with (
        _channel(writer, token, tls_ca) as channel,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[files]} files, {task.fields[records]} records"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=as_json or not console.is_terminal,
        ) as progress,
    ):
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        task = progress.add_task(f"import {tool}", total=total_bytes, files=f"0/{len(sources)}", records=0)
        records = 0

        def on_records(count: int) -> None:
            nonlocal records
            records += count
            progress.update(task, records=records)

        for done, source in enumerate(sources, 1):
            try:
                report = (
                    source
                    if isinstance(source, FileReport)
                    else import_one(stub, importer, source, tenant, on_records, max_line_bytes)
                )
            except grpc.RpcError as exc:
                details = exc.details() or ""
                if exc.code() == grpc.StatusCode.UNAVAILABLE and "connect" in details:
                    message = unreachable_message("writer", writer, details, tls_ca_given=tls_ca is not None)
                else:
                    message = f"the writer at {writer} failed: {exc.code().name}: {details}"
                click.echo(f"Error: {message}", err=True)
                click.echo(
                    f"{source}: not imported (nothing of it kept); the files after it were not tried",
                    err=True,
                )
                return 1
            reports.append(report)
            progress.update(task, advance=_file_bytes(report.path), files=f"{done}/{len(sources)}")
            if as_json:
                click.echo(orjson.dumps(report.as_json()).decode())
            elif report.status in ("failed", "not_a_source"):
                click.echo(f"{report.where}: {report.detail}", err=True)
    if not as_json:
        Console().print(_summary_table(reports))
        counts = Counter(report.status for report in reports)
        kept = sum(sum(report.kept_as_event.values()) for report in reports if report.status == "imported")
        empty = f", {counts['empty']} empty (no conversation in it)" if counts["empty"] else ""
        click.echo(
            f"{counts['imported']} imported, {counts['skipped']} skipped (already in the ledger),"
            f" {counts['failed'] + counts['not_a_source']} failed{empty};"
            f" {kept} source record{'' if kept == 1 else 's'} kept as events"
        )
    return 1 if any(report.status in ("failed", "not_a_source") for report in reports) else 0
