"""A symbolic link planted in the sessions folder is reported, never read (O_NOFOLLOW)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rollout.v1 import reader_pb2
from shared.naming import build_file_name, new_session_id
from shared.records import encode_line
from tests.data_roots import session_path

TS = "2026-11-30T10:00:00.000000Z"
SECRET = "the target's private line"


def plant_link(data_dir: Path, tmp_path: Path) -> str:
    """A session name in the sessions folder that is a link to a file outside the data root."""
    target = tmp_path / "outside.jsonl"
    session_id = new_session_id()
    target.write_bytes(
        encode_line(0, TS, "session_meta", {"session_id": session_id, "tenant": "t"})
        + encode_line(1, TS, "message", {"role": "user", "content": SECRET})
        + b"not json "
        + SECRET.encode()
        + b"\n"
    )
    os.symlink(target, session_path(data_dir, session_id, build_file_name(datetime.now(UTC), session_id)))
    return session_id


def test_every_reader_call_refuses_a_linked_session_file_without_reading_it(
    reader, data_dir, tmp_path
) -> None:
    """Replay, stream, memory view, verify and stop facts answer UNAVAILABLE (ErrorInfo ELOOP) naming the
    link, and nothing of the target appears in any answer."""
    session_id = plant_link(data_dir, tmp_path)
    calls = {
        "GetReplay": lambda: reader.GetReplay(reader_pb2.ReplayRequest(session_id=session_id)),
        "StreamReplay": lambda: list(reader.StreamReplay(reader_pb2.ReplayRequest(session_id=session_id))),
        "GetMemoryView": lambda: reader.GetMemoryView(reader_pb2.MemoryViewRequest(session_id=session_id)),
        "VerifySession": lambda: reader.VerifySession(reader_pb2.VerifyRequest(session_id=session_id)),
        "GetStopFacts": lambda: reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=session_id)),
    }
    for name, call in calls.items():
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, name
        assert "symbolic link" in caught.value.details(), name
        assert SECRET not in caught.value.details(), name
        (detail,) = rpc_status.from_call(caught.value).details
        info = error_details_pb2.ErrorInfo()
        assert detail.Unpack(info)
        assert info.reason == "ELOOP", name


def test_a_listing_shows_a_linked_session_as_unknown_without_reading_it(reader, data_dir, tmp_path) -> None:
    """ListSessions lists the link's name (never hidden) with nothing read from its target."""
    session_id = plant_link(data_dir, tmp_path)
    page = reader.ListSessions(reader_pb2.ListSessionsRequest())
    (summary,) = page.sessions
    assert summary.session_id == session_id
    assert not summary.stop_facts.found
    assert SECRET not in str(summary)
    assert summary.preview == ""
    assert summary.tenant == "", "its session_meta is never read"
