"""The one upload path of every importer: imported sessions -> the writer, through gRPC.

A source file goes in whole or not at all: all its sessions (a Claude Code
transcript with its sub-agent runs is several) travel in one
``RolloutWriter/ImportSessions`` stream, which stages them where no reader sees
them and makes them visible (each stopped and checkpointed) only once every
record and stop of the stream has been written and fsynced. A refusal, a lost
connection or a killed writer leaves nothing of the file behind. A session the
ledger already holds (same id) is skipped, so running the same import again is
harmless and finishes what an earlier, interrupted run left out.

A refusal is reported with the file and the source line of the refused record
(:class:`ImportRefusedError`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import writer_pb2, writer_pb2_grpc
from rollout_cli.importers import ImportedFile, ImportedSession
from shared.session_meta import SessionSpec
from shared.wire import create_request, stop_kind_to_proto

#: Most records in one ImportSessions message, and about the most bytes (a larger record travels alone).
RECORDS_PER_MESSAGE = 256
MESSAGE_BYTES = 4 * 1024 * 1024

_RECORD_FIELD = re.compile(r"sessions\[(\d+)\]\.records\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class UploadOutcome:
    """What happened to one imported session: ``imported`` or ``skipped`` (already in the ledger)."""

    session: ImportedSession
    status: str
    records: int = 0
    messages: int = 0


class ImportRefusedError(Exception):
    """The writer refused a source file; nothing of it was kept. ``line`` is the source line (0: none);
    ``reason`` is the refusal without the file and line ("INVALID_ARGUMENT: ...")."""

    def __init__(self, imported: ImportedFile, line: int, code: grpc.StatusCode, message: str) -> None:
        self.reason = f"{code.name}: {message}"
        where = f"{imported.source}:{line}" if line else str(imported.source)
        super().__init__(f"{where}: {self.reason}")
        self.source = imported.source
        self.line = line
        self.code = code


#: Statuses that refuse the file's content (anything else is the writer's or the network's trouble).
_REFUSALS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.ALREADY_EXISTS,
    }
)


def _requests(
    imported: ImportedFile, tenant: str, on_records: Callable[[int], None] | None
) -> Iterator[writer_pb2.ImportSessionsRequest]:
    for session in imported.sessions:
        spec = SessionSpec(
            session_id=session.session_id,
            agent_name=session.agent_name,
            parent_session_id=session.parent.session_id if session.parent is not None else "",
            delegation_id=session.delegation_id,
            role=session.role,
            tenant=tenant,
            model=session.model,
            cwd=session.cwd,
            originator=session.originator,
            client_version=session.client_version,
            created_at=session.created_at,
        )
        yield writer_pb2.ImportSessionsRequest(create=create_request(spec))
        for batch in _batches(session):
            yield writer_pb2.ImportSessionsRequest(records=writer_pb2.ImportRecords(records=batch))
            if on_records is not None:
                on_records(len(batch))
        yield writer_pb2.ImportSessionsRequest(
            stop=writer_pb2.StopRequest(
                stop_kind=stop_kind_to_proto(session.stop_kind),
                reason=session.stop_reason,
                ts=session.stop_time,
            )
        )


def _batches(session: ImportedSession) -> Iterator[list[writer_pb2.AppendRecord]]:
    """The session's records in messages of at most RECORDS_PER_MESSAGE records and about
    MESSAGE_BYTES bytes (a larger record travels alone)."""
    batch: list[writer_pb2.AppendRecord] = []
    size = 0
    for source_record in session.records:
        record_size = source_record.record.ByteSize()
        if batch and (len(batch) == RECORDS_PER_MESSAGE or size + record_size > MESSAGE_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(source_record.record)
        size += record_size
    if batch:
        yield batch


def _refused_line(imported: ImportedFile, error: grpc.RpcError) -> int:
    """The source line a refusal names: BadRequest ``sessions[k].records[i]`` -> that record's line."""
    status = rpc_status.from_call(error)
    for detail in status.details if status is not None else ():
        if not detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            continue
        bad_request = error_details_pb2.BadRequest()
        detail.Unpack(bad_request)
        for violation in bad_request.field_violations:
            match = _RECORD_FIELD.match(violation.field)
            if match is None:
                continue
            session_index, record_index = int(match[1]), int(match[2])
            if session_index < len(imported.sessions):
                records = imported.sessions[session_index].records
                if record_index < len(records):
                    return records[record_index].line
    return 0


def upload_file(
    stub: writer_pb2_grpc.RolloutWriterStub,
    imported: ImportedFile,
    tenant: str,
    on_records: Callable[[int], None] | None = None,
) -> list[UploadOutcome]:
    """Import every session of one source file, all or nothing (see the module doc).

    ``on_records`` is called with the number of records of each message as it is
    sent (for a progress bar). Raises :class:`ImportRefusedError` (file and source line
    named) when the writer refuses the file's content, and grpc.RpcError when
    the writer cannot be reached or fails.
    """
    try:
        answer = stub.ImportSessions(_requests(imported, tenant, on_records))
    except grpc.RpcError as exc:
        if exc.code() in _REFUSALS:
            raise ImportRefusedError(
                imported, _refused_line(imported, exc), exc.code(), exc.details() or ""
            ) from exc
        raise
    outcomes = []
    for session, result in zip(imported.sessions, answer.sessions, strict=True):
        if result.already_present:
            outcomes.append(UploadOutcome(session, "skipped"))
        else:
            outcomes.append(UploadOutcome(session, "imported", result.records, result.message_count))
    return outcomes
