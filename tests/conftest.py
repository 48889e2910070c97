"""Fixtures shared by every test: a private data root and real service processes.

Every test gets its own data root under pytest's tmp_path and services bound to
free ports (port 0, the bound port read back from the service's first line), so
tests run in parallel safely and nothing is written to $HOME.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from rollout.v1 import reader_pb2_grpc, writer_pb2_grpc

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"
_LISTENING = re.compile(r"listening on (\S+:\d+)")


@dataclass
class ServiceProcess:
    """A writer or reader running as its own process."""

    process: subprocess.Popen[str]
    address: str
    log_path: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        """Signal the process, wait for it and close its pipe; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code

    def log(self) -> str:
        """What the service wrote to stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def start_service(kind: str, data_dir: Path, *extra: str) -> ServiceProcess:
    """Start ``rollout serve-<kind>`` on a free port and wait until it listens."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HOME": str(data_dir.parent)}
    log_path = data_dir.parent / f"{kind}-{os.urandom(4).hex()}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rollout_cli.main",
                f"serve-{kind}",
                "--data-dir",
                str(data_dir),
                "--address",
                "127.0.0.1:0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=REPO,
        )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = _LISTENING.search(line)
    if match is None:
        process.kill()
        process.wait(10)
        process.stdout.close()
        raise RuntimeError(f"{kind} did not start: {line!r} {log_path.read_text()}")
    return ServiceProcess(process, match.group(1), log_path)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A private, empty data root."""
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def writer_process(data_dir: Path) -> Iterator[ServiceProcess]:
    service = start_service("writer", data_dir)
    yield service
    service.stop()


@pytest.fixture
def reader_process(data_dir: Path) -> Iterator[ServiceProcess]:
    service = start_service("reader", data_dir)
    yield service
    service.stop()


@pytest.fixture
def writer(writer_process: ServiceProcess) -> Iterator[writer_pb2_grpc.RolloutWriterStub]:
    with grpc.insecure_channel(writer_process.address) as channel:
        yield writer_pb2_grpc.RolloutWriterStub(channel)


@pytest.fixture
def reader(reader_process: ServiceProcess) -> Iterator[reader_pb2_grpc.RolloutReaderStub]:
    options = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
    with grpc.insecure_channel(reader_process.address, options=options) as channel:
        yield reader_pb2_grpc.RolloutReaderStub(channel)
