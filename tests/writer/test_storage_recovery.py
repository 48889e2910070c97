"""The writer's health recovers by itself after a full disk: no Append needs to get through
(a pod out of its Service's endpoints receives none). A 1 MiB tmpfs filled for the test, as in
test_repair_failures (root mounts it; a refused mount fails the test, it is never skipped)."""

from __future__ import annotations

import time

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2
from grpc_status import rpc_status

from rollout.v1 import writer_pb2, writer_pb2_grpc
from tests.writer.test_repair_failures import health_of, small_disk, user, writer_on
from writer_service.storage_probe import probe_storage

#: Generous limit for health to turn (the probe runs every second while storage is unhealthy).
WAIT_SECONDS = 60


def fill_up(disk) -> object:
    """Fill ``disk`` with one file until a write finds no space at all; returns the file."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def wait_for_health(channel: grpc.Channel, status: int) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while health_of(channel) != status:
        assert time.monotonic() < deadline, f"health never became {status}"
        time.sleep(0.1)


def test_health_turns_serving_once_space_is_freed_without_any_append(tmp_path) -> None:
    """A full disk fails an Append (RESOURCE_EXHAUSTED, ErrorInfo ENOSPC) and turns the writer's
    health NOT_SERVING, which a probe of the full disk keeps; once the space is freed, health turns
    SERVING again with no call made but health checks, and appends land."""
    with small_disk(tmp_path / "disk") as disk:
        data_dir = disk / "data"
        data_dir.mkdir()
        writer = writer_on(data_dir, tmp_path)
        try:
            with grpc.insecure_channel(writer.address) as channel:
                stub = writer_pb2_grpc.RolloutWriterStub(channel)
                sid = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
                assert list(
                    stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("a")])).seqs
                ) == [1]
                filler = fill_up(disk)
                with pytest.raises(grpc.RpcError) as caught:
                    stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("x" * 65536)]))
                assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value.details()
                (detail,) = rpc_status.from_call(caught.value).details
                info = error_details_pb2.ErrorInfo()
                assert detail.Unpack(info)
                assert info.reason == "ENOSPC"
                wait_for_health(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
                deadline = time.monotonic() + WAIT_SECONDS
                while "storage still refuses writes" not in writer.log():  # a probe ran on the full disk
                    assert time.monotonic() < deadline, "storage was never probed"
                    time.sleep(0.1)
                assert health_of(channel) == health_pb2.HealthCheckResponse.NOT_SERVING

                filler.unlink()
                wait_for_health(channel, health_pb2.HealthCheckResponse.SERVING)
                ack = stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("x" * 65536)]))
                assert list(ack.seqs) == [2]
        finally:
            writer.stop()
    assert "storage is writable again" in writer.log()


def test_a_probe_needs_room_for_the_round_that_failed_and_a_durable_write(tmp_path) -> None:
    """probe_storage passes on a file system with room for the bytes asked and a durable write, and
    leaves nothing behind; asked for more room than the file system has, it says how much is free."""
    folder = tmp_path / "data"
    assert probe_storage(folder, 4096) is None
    assert list(folder.rglob("*")) == [folder / "writer-state"]
    refusal = probe_storage(folder, 2**62)
    assert refusal is not None
    assert "bytes free" in refusal
