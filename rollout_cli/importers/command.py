"""``rollout import codex|claude PATH...``: import files or whole folders, with progress and a summary.

Each PATH is a source file or a folder walked for them (``~/.codex/sessions``,
``~/.claude/projects``; the importer's own folder when no PATH is given). Every
file goes in all or nothing (:mod:`rollout_cli.importers.upload`); a file that
fails is named with its line and the others go on. A progress bar (files,
records, bytes) runs on stderr while it works; the summary table (imported,
skipped, failed, records kept as events) goes to stdout, or one JSON object per
file with ``--json``. Exit status: 0 when every file was imported or skipped, 1
when any failed or was not a file of that tool, or when the writer cannot be reached (the
file being sent is then not kept, and the files after it are not tried).
"""

from __future__ import annotations

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
from rollout_cli.importers.upload import ImportRefusedError, UploadOutcome, upload_file
from rollout_cli.reachability import cleartext_token_message, unreachable_message
from rollout_client import blocking_channel

IMPORTERS: dict[str, Importer] = {"codex": CodexImporter(), "claude": ClaudeImporter()}


@dataclass
class FileReport:
    """The outcome of one source file, as the summary shows it."""

    path: Path
    status: str  # imported, skipped, failed, not_a_source
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


def source_files(importer: Importer, paths: tuple[Path, ...]) -> Iterator[Path]:
    """The files named, and the files under the folders named, each once, in the order given."""
    seen: set[Path] = set()
    for path in paths or (Path(importer.default_folder).expanduser(),):
        found = importer.source_files(path) if path.is_dir() else iter((path,))
        for file in found:
            resolved = file.resolve()
            if resolved not in seen:
                seen.add(resolved)
                yield file


def import_one(
    stub: writer_pb2_grpc.RolloutWriterStub, importer: Importer, path: Path, tenant: str, progress: Any
) -> FileReport:
    """Convert and upload one source file; raises grpc.RpcError when the writer is not reachable."""
    try:
        with path.open("rb") as handle:
            imported: ImportedFile = importer.convert(handle, path)
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
) -> int:
    """Import ``paths`` with the ``tool`` importer; returns the exit status (see the module doc).

    ``token`` / ``tls_ca``: the caller's credentials (rollout_client.blocking_channel); with
    authentication on, the token must be marked as an importer to keep source times.
    """
    importer = IMPORTERS[tool]
    files = list(source_files(importer, paths))
    if not files:
        where = ", ".join(
            dict.fromkeys(str(path) for path in paths or (Path(importer.default_folder).expanduser(),))
        )
        click.echo(f"no {importer.label} files found under {where}; nothing imported", err=True)
        return 0
    total_bytes = sum(path.stat().st_size for path in files if path.is_file())
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
        task = progress.add_task(f"import {tool}", total=total_bytes, files=f"0/{len(files)}", records=0)
        records = 0

        def on_records(count: int) -> None:
            nonlocal records
            records += count
            progress.update(task, records=records)

        for done, path in enumerate(files, 1):
            try:
                report = import_one(stub, importer, path, tenant, on_records)
            except grpc.RpcError as exc:
                details = exc.details() or ""
                if exc.code() == grpc.StatusCode.UNAVAILABLE and "connect" in details:
                    message = unreachable_message("writer", writer, details, tls_ca_given=tls_ca is not None)
                else:
                    message = f"the writer at {writer} failed: {exc.code().name}: {details}"
                click.echo(f"Error: {message}", err=True)
                click.echo(
                    f"{path}: not imported (nothing of it kept); the files after it were not tried", err=True
                )
                return 1
            reports.append(report)
            progress.update(
                task, advance=path.stat().st_size if path.is_file() else 0, files=f"{done}/{len(files)}"
            )
            if as_json:
                click.echo(orjson.dumps(report.as_json()).decode())
            elif report.status in ("failed", "not_a_source"):
                click.echo(f"{report.where}: {report.detail}", err=True)
    if not as_json:
        Console().print(_summary_table(reports))
        counts = Counter(report.status for report in reports)
        kept = sum(sum(report.kept_as_event.values()) for report in reports if report.status == "imported")
        click.echo(
            f"{counts['imported']} imported, {counts['skipped']} skipped (already in the ledger),"
            f" {counts['failed'] + counts['not_a_source']} failed;"
            f" {kept} source record{'' if kept == 1 else 's'} kept as events"
        )
    return 1 if any(report.status in ("failed", "not_a_source") for report in reports) else 0
