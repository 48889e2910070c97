"""Source records read through the reader: what provenance is stamped from and checked against."""

from __future__ import annotations

from collections.abc import Callable

from rollout_client import NotFoundError, RolloutClient
from shared.memory import SourceRecord, holds_tenants_session, source_record_of_line


def read_source_records(
    client: RolloutClient, session_id: str, upto_seq: int, *, tenant: str
) -> list[SourceRecord]:
    """The records of ``session_id`` with seq <= ``upto_seq`` as stored, read with WatchSession
    from seq 0 (the stream is closed once ``upto_seq`` is read, so an open session is read
    too); damaged lines (no record) are left out, so they can never be cited.

    Raises NotFoundError (the reader's, with the caller's credentials; or here, when the
    session_meta names another tenant than ``tenant``), and the client's other errors.
    """
    records: list[SourceRecord] = []
    watch = client.session(session_id).watch(0)
    try:
        for watched in watch:
            record = source_record_of_line(watched.line) if watched.seq >= 0 else None
            if record is not None:
                records.append(record)
            if watched.seq >= upto_seq:
                break
    finally:
        watch.close()
    if not holds_tenants_session(records, tenant):
        raise NotFoundError(f"session {session_id} is not a session of tenant {tenant!r}")
    return records


def client_source_reader(client: RolloutClient) -> Callable[[str, int, str], list[SourceRecord]]:
    """How :func:`memory_store.reading.resolve_provenance` reads sources through ``client``
    (:func:`read_source_records`, with the client's credentials)."""

    def read(session_id: str, upto_seq: int, tenant: str) -> list[SourceRecord]:
        return read_source_records(client, session_id, upto_seq, tenant=tenant)

    return read
