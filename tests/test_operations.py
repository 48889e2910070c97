"""What operators rely on: standard health checking, server reflection and the metrics endpoint."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from tests.conftest import REPO, run_rollout, start_service
from tests.ports import free_port
from tests.processes import launch, prefixed, reap


def test_both_services_answer_health_checks_and_reflection(writer_process, reader_process) -> None:
    """Each service reports SERVING for its own name and lists itself through reflection."""
    for process, service in (
        (writer_process, "rollout.v1.RolloutWriter"),
        (reader_process, "rollout.v1.RolloutReader"),
    ):
        with grpc.insecure_channel(process.address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service))
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            (answer,) = stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
            names = {entry.name for entry in answer.list_services_response.service}
            assert {service, "grpc.health.v1.Health"} <= names


def _scrape_until(port: int, line: str, attempts: int = 600) -> str:
    """The metrics page once it holds ``line``, or the last page read after ``attempts`` scrapes
    50 ms apart (the caller's assertion then shows what was there)."""
    text = ""
    for _ in range(attempts):
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        if line in text:
            break
        time.sleep(0.05)
    return text


def test_metrics_endpoint_counts_appended_records(data_dir) -> None:
    """serve-writer --metrics-port exports Prometheus metrics that count appended records and batches."""
    port = free_port()
    writer = start_service("writer", data_dir, "--metrics-port", str(port))
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            sid = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
            record = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="x"))
            stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[record] * 3))
        # A round's metrics are recorded just after its acknowledgement is handed over (they are
        # kept off the way to it), so the scrape waits for them rather than racing the writer.
        text = _scrape_until(port, "rollout_appended_records_total 3.0")
    finally:
        writer.stop()
    assert "rollout_appended_records_total 3.0" in text
    assert "rollout_batch_records_count 1.0" in text
    assert "rollout_storage_healthy 1.0" in text


def test_a_metrics_port_in_use_is_a_plain_error_not_a_traceback(data_dir) -> None:
    """serve-writer --metrics-port on a taken port exits 1 with a sentence naming the port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_rollout(
            "serve-writer",
            "--data-dir",
            str(data_dir),
            "--address",
            "127.0.0.1:0",
            "--metrics-port",
            str(port),
        )
    assert result.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@contextlib.contextmanager
def _serve(
    data_dir: Path, *extra: str, sigint: signal.Handlers = signal.SIG_DFL
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Run ``rollout serve`` on free ports in its own process group; yields it and its stderr log.

    ``sigint``: SIGINT's disposition at its start, whatever this test run inherited (SIG_DFL: a
    terminal's foreground command, which Ctrl-C reaches). On exit the whole group (serve and both
    services) is killed if anything is left.
    """
    command = [sys.executable, "-m", "rollout_cli.main", "serve", "--data-dir", str(data_dir)]
    addresses = ["--writer-address", "127.0.0.1:0", "--reader-address", "127.0.0.1:0"]
    log_path = data_dir.parent / f"serve-{os.urandom(4).hex()}.log"
    with log_path.open("w") as log:
        process = launch(
            [*command, *addresses, *extra],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=REPO,
            start_new_session=True,  # its own process group: a failed test can end the whole pair
            sigint=sigint,
        )
    try:
        yield process, log_path
    finally:
        reap(process)


def _wait_for_pair(process: subprocess.Popen[str]) -> dict[str, str]:
    """Read ``rollout serve``'s first three lines: its data root, then both services listening;
    returns their addresses by kind (writer, reader)."""
    assert process.stdout is not None
    lines = [process.stdout.readline() for _ in range(3)]
    assert lines[0].startswith("data root: "), lines
    addresses = {line.split()[1]: line.split()[-1] for line in lines[1:] if "listening on" in line}
    assert sorted(addresses) == ["reader", "writer"], lines
    return addresses


def test_serve_runs_the_pair_passes_writer_options_and_stops_cleanly_on_ctrl_c(data_dir) -> None:
    """`rollout serve` starts a writer and a reader (both print their address), hands
    --metrics-port to the writer, and on SIGINT both drain and the command exits 0."""
    metrics_port = free_port()
    with _serve(data_dir, "--metrics-port", str(metrics_port)) as (process, _log):
        _wait_for_pair(process)
        deadline = time.monotonic() + 30
        while True:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the writer's metrics endpoint never answered"
                time.sleep(0.1)
        assert b"rollout_storage_healthy 1.0" in text
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0


_STOP_WHILE_STARTING = """
import asyncio, os, signal
from rollout_cli.supervision import serve_until_signal

class Running:
    address = "127.0.0.1:1"
    async def stop(self):
        print("drained", flush=True)

async def start():
    os.kill(os.getpid(), signal.SIGTERM)  # a stop request while the service starts
    await asyncio.sleep(0)
    return Running()

asyncio.run(serve_until_signal(start(), "writer"))
"""


def test_a_stop_request_while_a_service_starts_drains_it_instead_of_killing_it() -> None:
    """A SIGTERM that arrives before a service announces it listens still drains it and exits 0:
    the handlers are in place before the service starts (the default action would end it -15)."""
    done = subprocess.run(
        [sys.executable, "-c", _STOP_WHILE_STARTING], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["rollout writer listening on 127.0.0.1:1", "drained"]


def _launched_services(pid: int) -> list[int]:
    """The ids of the two services ``rollout serve`` (process ``pid``) launched, once both run
    their own command line (past exec; a forked copy of ``serve`` does not count). Linux /proc."""
    deadline = time.monotonic() + 10
    while True:
        services = []
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if b"serve-writer" in argv or b"serve-reader" in argv:
                services.append(int(child))
        if len(services) == 2:
            return services
        assert time.monotonic() < deadline, f"serve {pid} launched {services} within 10 s"
        time.sleep(0.005)


def _ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` has SIGINT set to be ignored (its SigIgn mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    (mask,) = (line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_while_serve_starts_its_services_is_a_clean_quiet_stop(data_dir) -> None:
    """A terminal's Ctrl-C (SIGINT to the whole process group) just after `rollout serve`
    launched its services, before they can install handlers, stops both and exits 0 with no
    traceback: the services ignore SIGINT until ready, `serve` forwards the stop as SIGTERM, and
    a service that never started serving lost nothing."""
    with _serve(data_dir) as (process, log_path):
        assert process.stdout is not None
        assert process.stdout.readline().startswith("data root: ")  # printed just before the launch
        services = _launched_services(process.pid)
        # Still loading (interpreter and imports take far longer than this): SIGINT is ignored.
        assert all(_ignores_sigint(pid) for pid in services)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(30) == 0
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


_CTRL_C_WHILE_LOADING = """
import builtins, os, signal, sys
from rollout_cli import console_script

class Finalizer:
    def __del__(self):
        # The handler runs inside os.kill, in a finalizer: an exception there is only printed.
        os.kill(os.getpid(), signal.SIGINT)

where = sys.argv[1]
real_import = builtins.__import__

def interrupting_import(name, *args, **kwargs):
    if name == "rollout_cli.main":
        if where == "in-a-finalizer":
            Finalizer()
        else:
            os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)

builtins.__import__ = interrupting_import
sys.argv = ["rollout", "--help"]
console_script.main()
"""


@pytest.mark.parametrize("where", ["in-an-import", "in-a-finalizer"])
def test_ctrl_c_while_the_command_line_loads_exits_130_without_a_traceback(where: str) -> None:
    """The `rollout` console script turns a Ctrl-C during its imports into exit status 130 and
    prints nothing, where Python would print a KeyboardInterrupt traceback from inside an import,
    or (landing in a finalizer or an import-lock callback) print "Exception ignored" and go on."""
    done = subprocess.run(
        # As in a terminal, whatever this test run inherited.
        prefixed([sys.executable, "-c", _CTRL_C_WHILE_LOADING, where], sigint=signal.SIG_DFL),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "")


def test_a_command_started_with_sigint_ignored_ignores_a_ctrl_c_while_it_loads() -> None:
    """A `rollout` command whose parent ignores SIGINT (a shell script's background job) keeps it
    ignored: the Ctrl-C during its imports is lost, and the command runs."""
    done = subprocess.run(
        prefixed([sys.executable, "-c", _CTRL_C_WHILE_LOADING, "in-an-import"], sigint=signal.SIG_IGN),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert "Usage: rollout" in done.stdout


def test_the_rollout_console_script_runs_the_command_line() -> None:
    """The installed `rollout` script (pyproject's entry point) reaches the click group."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "rollout"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "The rollout ledger" in done.stdout


def _has_ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie its new parent has not reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def test_serve_started_with_sigint_ignored_keeps_serving_through_ctrl_c_and_stops_on_sigterm(
    data_dir,
) -> None:
    """`rollout serve &` in a shell script starts with SIGINT ignored: the pair keeps it ignored
    (a Ctrl-C meant for the script's foreground command reaches the whole group and must not stop
    it), serves on, and SIGTERM stops it cleanly (exit 0)."""
    with _serve(data_dir, sigint=signal.SIG_IGN) as (process, log_path):
        addresses = _wait_for_pair(process)
        services = _launched_services(process.pid)
        # Ignored, not merely caught: the kernel discards a SIGINT sent to any of them.
        assert all(_ignores_sigint(pid) for pid in [process.pid, *services])
        os.killpg(process.pid, signal.SIGINT)
        with grpc.insecure_channel(addresses["writer"]) as channel:
            writer_pb2_grpc.RolloutWriterStub(channel).CreateSession(
                writer_pb2.CreateSessionRequest(), timeout=60
            )
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


def test_services_stop_when_serve_is_killed_and_release_the_data_root(data_dir) -> None:
    """`rollout serve` killed by SIGKILL (no chance to forward anything) does not leave its
    services running unsupervised: the kernel sends each SIGTERM, they drain and exit, and the
    data root's writer lock is free for the next writer."""
    with _serve(data_dir) as (process, _log):
        _wait_for_pair(process)
        services = _launched_services(process.pid)
        process.kill()
        process.wait()
        deadline = time.monotonic() + 30
        while not all(_has_ended(pid) for pid in services):
            assert time.monotonic() < deadline, f"services {services} outlived serve by 30 s"
            time.sleep(0.05)
        writer = start_service("writer", data_dir)
        writer.stop()


def test_a_held_down_ctrl_c_still_stops_the_pair_with_exit_0_and_no_traceback(data_dir) -> None:
    """Ctrl-C pressed again and again (SIGINT to the group every 20 ms) while the pair drains and
    shuts down: every extra one is a no-op, `serve` exits 0, and no process prints a traceback."""
    with _serve(data_dir) as (process, log_path):
        _wait_for_pair(process)
        deadline = time.monotonic() + 30
        while process.poll() is None:
            assert time.monotonic() < deadline, "serve did not stop within 30 s of Ctrl-C"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
            time.sleep(0.02)
        assert process.returncode == 0
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


def test_a_service_stopped_from_outside_ends_the_pair_with_exit_1(data_dir) -> None:
    """A service that ends without `serve` asking, even cleanly (SIGTERM to the writer alone: it
    drains and exits 0), stops the other and makes `serve` exit 1, so a supervisor notices."""
    with _serve(data_dir) as (process, log_path):
        _wait_for_pair(process)
        services = _launched_services(process.pid)
        (writer,) = (pid for pid in services if b"serve-writer" in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(writer, signal.SIGTERM)
        assert process.wait(30) == 1
        assert all(_has_ended(pid) for pid in services)
    assert "a service exited on its own; stopping the other" in log_path.read_text()
