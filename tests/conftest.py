"""Fixtures shared by every test: a private data root and real service processes.

Every test gets its own data root under pytest's tmp_path and services bound to
free ports (port 0, the bound port read back from the service's first line), so
tests run in parallel safely and nothing is written to $HOME. No process a test
starts outlives it (:func:`_no_process_outlives_its_test`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, settings

from rollout.v1 import reader_pb2_grpc, writer_pb2_grpc
from tests.processes import ServiceProcess, reap_started_since, started_count
from tests.processes import start_service as start_service_process

# Property tests check rules, not speed: on a loaded machine an example may take seconds, which
# Hypothesis's default deadline (200 ms) and slow-data health check would report as failures.
settings.register_profile("ledger", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ledger")

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"


def run_rollout(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the ``rollout`` command line (``python -m rollout_cli.main ARGS``) from the repository.

    Returns the finished process (stdout, stderr as text) whatever its exit status.
    """
    command = [sys.executable, "-m", "rollout_cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=timeout, check=False)


def start_service(kind: str, data_dir: Path, *extra: str) -> ServiceProcess:
    """Start ``rollout serve-<kind>`` on a free port, logging to a file beside the data root."""
    log_path = data_dir.parent / f"{kind}-{os.urandom(4).hex()}.log"
    return start_service_process(kind, data_dir, log_path, *extra)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Keep each phase's report on the test (``item.phase_<when>``) for the fixtures' teardown."""
    report: pytest.TestReport = yield
    setattr(item, f"phase_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test and its fixtures (this fixture is set up first, so torn down last): kill
    and reap every process it started (tests/processes.py :func:`launch`) that is still running,
    so that a failed or timed-out test leaves nothing behind. A test that passed with a process
    still running fails here, naming it. Processes of wider fixtures (a module's pair) are
    theirs to stop."""
    mark = started_count()
    yield
    passed = all(
        getattr(request.node, f"phase_{when}", None) is None or getattr(request.node, f"phase_{when}").passed
        for when in ("setup", "call")
    )
    # After a pass, a process has 10 s to finish exiting on its own (one whose last line the
    # test read may not have exited yet); after a failure, everything is killed at once.
    left = reap_started_since(mark, grace=10.0 if passed else 0.0)
    if left and passed:
        pytest.fail(f"the test left {len(left)} process(es) running (now killed): {left}", pytrace=False)


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
