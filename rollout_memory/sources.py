"""Source records read through the reader: what provenance is stamped from and checked against."""

from __future__ import annotations

from rollout_client import NotFoundError, RolloutClient
from shared.memory import SourceRecord


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
        for record in watch:
            if record.seq >= 0 and record.payload is not None:
                records.append(SourceRecord(record.seq, record.type, record.ts, record.payload, record.line))
            if record.seq >= upto_seq:
                break
    finally:
        watch.close()
    if not records or records[0].payload.get("tenant") != tenant:
        raise NotFoundError(f"session {session_id} is not a session of tenant {tenant!r}")
    return records
