"""Refused large requests give their memory back (docs/spec.md §2.10, bounded memory per request): the
writer's resident memory returns near idle after 20 MB fields refused by their limits in
CreateSession, Stop and Append (a real writer process, its RSS read from /proc)."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from tests.conftest import start_service

#: How far above idle the writer may stay once its refusals are done (MiB): gRPC's and Python's
#: caches settle within a few MiB; before large blocks got mappings of their own, 60-130 MiB stayed.
MARGIN_MIB = 24
#: Generous limit for RSS to come back (the heap is trimmed within about a second).
WAIT_SECONDS = 60
BIG = "x" * 20_000_000


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def _tool_output(call_id: str) -> writer_pb2.AppendRecord:
    """A tool output answering no call (refused)."""
    return writer_pb2.AppendRecord(
        message=records_pb2.ChatMessage(role="tool", text="t", tool_call_id=call_id)
    )


def test_rss_returns_near_idle_after_20_mb_fields_are_refused(data_dir) -> None:
    """Three rounds of 20 MB fields refused by their limits (CreateSession's model, Stop's reason,
    Append's request id, tool call id and session id) leave the writer within a few MiB of its idle
    resident memory once it has settled, as the README says."""
    writer = start_service("writer", data_dir)
    pid = writer.process.pid
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            sid = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
            paused = records_pb2.STOP_KIND_PAUSED
            refusals: dict[str, Callable[[str], object]] = {
                "CreateSession": lambda text: stub.CreateSession(writer_pb2.CreateSessionRequest(model=text)),
                "Stop": lambda text: stub.Stop(
                    writer_pb2.StopRequest(session_id=sid, stop_kind=paused, reason=text)
                ),
                "Append request_id": lambda text: stub.Append(
                    writer_pb2.AppendRequest(session_id=sid, request_id=text, records=[_user("a")])
                ),
                "Append tool_call_id": lambda text: stub.Append(
                    writer_pb2.AppendRequest(session_id=sid, records=[_tool_output(text)])
                ),
                "Append session_id": lambda text: stub.Append(
                    writer_pb2.AppendRequest(session_id=text, records=[_user("a")])
                ),
            }
            # Warm every path with a refusal of the same kind, small: what stays after it is idle.
            for call in refusals.values():
                with pytest.raises(grpc.RpcError):
                    call("y" * 20_000)
            idle = rss_mib(pid)
            for _ in range(3):
                for name, call in refusals.items():
                    with pytest.raises(grpc.RpcError) as caught:
                        call(BIG)
                    assert caught.value.code() in (
                        grpc.StatusCode.INVALID_ARGUMENT,
                        grpc.StatusCode.NOT_FOUND,
                    ), (name, caught.value.code())
            deadline = time.monotonic() + WAIT_SECONDS
            while (above := rss_mib(pid) - idle) > MARGIN_MIB:
                assert time.monotonic() < deadline, f"the writer stays {above:.0f} MiB above idle"
                time.sleep(0.2)
    finally:
        writer.stop()
