"""``rollout loadtest``: simulated agents against a live writer; figures as JSON; nothing outside its sessions."""

from __future__ import annotations

import orjson

from rollout.v1 import records_pb2, writer_pb2
from shared.rebuild import rebuild
from tests.conftest import run_rollout
from tests.data_roots import session_file, session_files


def test_loadtest_reports_figures_and_writes_only_its_own_stopped_sessions(
    writer, writer_process, data_dir
) -> None:
    """A 1 s run with 3 agents prints throughput, ack percentiles and no errors as JSON; every session it
    created is a loadtest session (children carry delegation coordinates) and is stopped; a session
    that existed before is untouched."""
    bystander = writer.CreateSession(writer_pb2.CreateSessionRequest(tenant="people")).session_id
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=bystander,
            records=[writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="hi"))],
        )
    )
    bystander_path = session_file(data_dir, bystander)
    before = bystander_path.read_bytes()
    result = run_rollout(
        "loadtest",
        "--writer",
        writer_process.address,
        "--sessions",
        "3",
        "--duration",
        "1",
        "--records-per-append",
        "3",
        "--delegate-every",
        "1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    figures = orjson.loads(result.stdout)
    assert figures["errors"] == {}
    assert figures["appends"] > 10
    assert figures["records"] >= figures["appends"]
    assert (
        0
        < figures["ack_ms"]["p50"]
        <= figures["ack_ms"]["p95"]
        <= figures["ack_ms"]["p99"]
        <= figures["ack_ms"]["max"]
    )
    assert bystander_path.read_bytes() == before
    created = [path for path in session_files(data_dir) if path != bystander_path]
    assert len(created) == figures["sessions_created"]
    children = 0
    for path in created:
        records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        meta = records[0]["payload"]
        assert meta["tenant"] == "loadtest"
        if meta.get("parent_session_id"):
            children += 1
            assert meta["delegation_id"]
        assert records[-1]["type"] == "stop", path.name
        assert rebuild(path.read_bytes()).damage is None
    assert children > 0


class _RecordingWriter:
    """A stand-in writer stub that records the sessions created and stopped."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.stopped: dict[str, int] = {}

    def CreateSession(self, request):
        session_id = f"s{len(self.created)}"
        self.created.append(session_id)
        return writer_pb2.CreateSessionResponse(session_id=session_id)

    def Append(self, request):
        return writer_pb2.AppendResponse(session_id=request.session_id)

    def Stop(self, request):
        self.stopped[request.session_id] = request.stop_kind
        return writer_pb2.StopResponse()


def test_a_child_cut_short_by_the_end_of_the_run_is_still_stopped() -> None:
    """When the run ends while a child's turn is under way, the child is stopped (interrupted), never left open."""
    import random
    import threading

    from rollout_cli.loadtest import LoadtestConfig, LoadtestReport, _Agent

    stub = _RecordingWriter()
    config = LoadtestConfig("unused", sessions=1, think_ms=50, delegate_every=1)
    agent = _Agent(0, stub, config, LoadtestReport(), threading.Lock())  # type: ignore[arg-type]
    agent.rng = random.Random(1)

    class EndsOnceTheChildExists:
        """The run's end, reached while the child's turn is under way."""

        def wait(self, _timeout: float) -> bool:
            return bool(stub.created)

        def is_set(self) -> bool:
            return bool(stub.created)

    agent._turn("parent", 1, EndsOnceTheChildExists(), delegate=True)  # type: ignore[arg-type]
    [child] = stub.created
    assert stub.stopped[child] == records_pb2.STOP_KIND_INTERRUPTED
