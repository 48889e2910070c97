"""Start-up never dies on one bad session: a repair that cannot be done refuses that session only.

The full-disk case runs on a real file system that fills up: a 1 MiB tmpfs mounted
for the test (root is available on the machines that run the suite; a machine where
the mount is refused fails the test with the reason, it is never skipped).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from shared.records import encode_line
from tests.data_roots import session_file, session_files
from tests.ports import free_port
from tests.processes import ServiceProcess, start_service

TS = "2026-11-30T10:00:00.000000Z"
WRITER = "rollout.v1.RolloutWriter"


@contextlib.contextmanager
def small_disk(where: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the block, unmounted after."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.fail(
            f"this test needs a small tmpfs to fill (mount -t tmpfs, as root) and the mount failed:"
            f" {mounted.stderr.strip() or mounted.returncode}"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    """Fill ``disk`` with one file until fewer than ``leave_bytes`` bytes are free; returns it."""
    filler = disk / "filler"
    with filler.open("wb") as handle:
        while True:
            stats = os.statvfs(disk)
            free = stats.f_bavail * stats.f_frsize
            if free <= leave_bytes:
                break
            try:
                handle.write(b"\0" * min(64 * 1024, free - leave_bytes + 4096))
                handle.flush()
            except OSError:
                break
    return filler


def writer_on(data_dir: Path, log_dir: Path, *extra: str) -> ServiceProcess:
    """``rollout serve-writer`` on ``data_dir``, logging outside the small disk."""
    return start_service("writer", data_dir, log_dir / f"writer-{os.urandom(4).hex()}.log", *extra)


def user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def health_of(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=WRITER)).status


def test_a_repair_without_space_refuses_that_session_only_and_succeeds_once_space_returns(tmp_path) -> None:
    """On a full disk a torn tail cannot be set aside: the writer starts, refuses that session
    (UNAVAILABLE naming the reason, ErrorInfo ENOSPC), serves the others, leaves no sidecar, reports
    it in health and metrics, and repairs it in the background once space returns."""
    with small_disk(tmp_path / "disk") as disk:
        data_dir = disk / "data"
        data_dir.mkdir()
        writer = writer_on(data_dir, tmp_path)
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            torn = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
            healthy = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
            stub.Append(writer_pb2.AppendRequest(session_id=torn, records=[user("kept")]))
        assert writer.stop() == 0
        torn_file = session_file(data_dir, torn)
        good = torn_file.read_bytes()
        torn_bytes = encode_line(2, TS, "message", {"role": "user", "content": "x" * 300_000})[:250_000]
        torn_file.write_bytes(good + torn_bytes)
        filler = fill(disk, leave_bytes=64 * 1024)

        metrics_port = free_port()
        writer = writer_on(
            data_dir, tmp_path, "--metrics-port", str(metrics_port), "--repair-retry-seconds", "0.2"
        )
        try:
            with grpc.insecure_channel(writer.address) as channel:
                stub = writer_pb2_grpc.RolloutWriterStub(channel)
                with pytest.raises(grpc.RpcError) as caught:
                    stub.Append(writer_pb2.AppendRequest(session_id=torn, records=[user("more")]))
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "could not be repaired" in caught.value.details()
                assert "No space left on device" in caught.value.details()
                (detail,) = rpc_status.from_call(caught.value).details
                info = error_details_pb2.ErrorInfo()
                assert detail.Unpack(info)
                assert (info.reason, info.metadata["operation"]) == ("ENOSPC", "repair")

                ack = stub.Append(writer_pb2.AppendRequest(session_id=healthy, records=[user("fine")]))
                assert list(ack.seqs) == [1], "every other session serves"
                assert list(session_files(data_dir, "*.torn-*")) == [], "no empty set-aside file"
                assert torn_file.read_bytes() == good + torn_bytes, "nothing of the session was changed"
                assert health_of(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
                metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
                text = metrics.read().decode()
                assert "rollout_sessions_awaiting_repair 1.0" in text
                assert "rollout_repair_failures_total" in text

                filler.unlink()
                deadline = time.monotonic() + 30
                while health_of(channel) != health_pb2.HealthCheckResponse.SERVING:
                    assert time.monotonic() < deadline, "the background retry never repaired the session"
                    time.sleep(0.1)
                (sidecar,) = session_files(data_dir, "*.torn-*")
                assert sidecar.read_bytes() == torn_bytes
                assert torn_file.read_bytes() == good
                ack = stub.Append(writer_pb2.AppendRequest(session_id=torn, records=[user("more")]))
                assert list(ack.seqs) == [2]
        finally:
            writer.stop()
    assert "could not be repaired" in writer.log()


def test_a_link_or_an_unreadable_file_is_refused_at_start_up_and_never_followed(data_dir, tmp_path) -> None:
    """A session file that is a symbolic link (never followed, its target untouched) or cannot be read
    (a directory in its place) is refused UNAVAILABLE with the reason; the writer starts and serves the rest."""
    writer = writer_on(data_dir, tmp_path)
    with grpc.insecure_channel(writer.address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        linked, unreadable, healthy = (
            stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id for _ in range(3)
        )
    assert writer.stop() == 0
    linked_file = session_file(data_dir, linked)
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(linked_file.read_bytes() + b'{"torn')  # a torn tail a repair would cut
    linked_file.unlink()
    linked_file.symlink_to(target)
    unreadable_file = session_file(data_dir, unreadable)
    unreadable_file.unlink()
    unreadable_file.mkdir()
    before = target.read_bytes()

    writer = writer_on(data_dir, tmp_path)
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            for session_id, reason in ((linked, "symbolic link"), (unreadable, "Is a directory")):
                with pytest.raises(grpc.RpcError) as caught:
                    stub.Append(writer_pb2.AppendRequest(session_id=session_id, records=[user("x")]))
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
                assert reason in caught.value.details()
            assert list(
                stub.Append(writer_pb2.AppendRequest(session_id=healthy, records=[user("ok")])).seqs
            ) == [1]
    finally:
        writer.stop()
    assert target.read_bytes() == before, "a link's target is never read for repair, nor written"
    assert list(tmp_path.glob("elsewhere.jsonl.torn-*")) == []
