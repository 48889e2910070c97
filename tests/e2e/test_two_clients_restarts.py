"""Two SDK clients on one session while the writer and the reader go down and come back: no
acknowledgement is ever inferred from counts, and no acknowledged record is missing (docs/spec.md §2.4)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from rollout_client import RetryPolicy, RolloutClient, user
from tests.conftest import start_service
from tests.data_roots import session_files
from tests.processes import ServiceProcess

ROUNDS = 20
#: Generous: the writer is restarted within each round; a loaded machine may take seconds.
PATIENT = RetryPolicy(deadline=240.0, initial_backoff=0.02, max_backoff=0.25, attempt_timeout=30.0)


def _restart(kind: str, data_dir: Path, address: str) -> ServiceProcess:
    log = data_dir.parent / f"{kind}-restarts.log"
    from tests.processes import start_service as start_at

    return start_at(kind, data_dir, log, address=address)


class _UnderWay:
    """Watches a client's appends: records each attempt's status and signals once an append has
    started after the writer answered (the test starts one while the writer is down: its attempt
    fails, or it waits for the writer to accept connections again, nothing sent)."""

    def __init__(self, client: RolloutClient) -> None:
        self.under_way = threading.Event()
        self.codes: list[grpc.StatusCode] = []
        core = client.core

        async def writer_stub() -> Any:
            return core.writer_stub  # the stub of the client's own loop

        stub = client.run(writer_stub())
        real_append = stub.Append
        real_reached = core.writer_connection.reached

        async def append(request: Any, **kwargs: Any) -> Any:
            try:
                answer = await real_append(request, **kwargs)
            except grpc.aio.AioRpcError as error:
                self.codes.append(error.code())
                self.under_way.set()
                raise
            self.codes.append(grpc.StatusCode.OK)
            return answer

        async def reached(seconds: float) -> None:
            if core.writer_connection.answered:
                self.under_way.set()
            await real_reached(seconds)

        stub.Append = append
        core.writer_connection.reached = reached  # type: ignore[method-assign]


# 40 service starts and 20 rounds of retries: over 300 s (the suite's per-test limit, meant for a
# test of ordinary size) measured while other jobs loaded both cores.
@pytest.mark.timeout(1200)
def test_an_append_retried_across_restarts_is_acknowledged_only_for_its_own_record(data_dir) -> None:
    """20 rounds: writer and reader killed; client 2's append is under way (an attempt failed, or
    it waits for the writer), the writer returns, client 1's record lands, client 2's lands too: each acknowledged record is in the file once, at the
    seq its acknowledgement named, and nothing else was written."""
    writer = start_service("writer", data_dir)
    reader = start_service("reader", data_dir)
    acknowledged: dict[str, tuple[int, ...]] = {}
    try:
        with (
            RolloutClient(writer.address, reader.address, retry=PATIENT) as first,
            RolloutClient(writer.address, reader.address, retry=PATIENT) as second,
        ):
            one = first.create_session()
            two = second.session(one.id)
            acknowledged["start"] = two.append(user("start")).seqs
            watch = _UnderWay(second)
            for round_no in range(ROUNDS):
                writer.stop(signal.SIGKILL)
                reader.stop(signal.SIGKILL)
                watch.under_way.clear()
                outcome: dict[str, Any] = {}

                def second_appends(text: str, outcome: dict[str, Any]) -> None:
                    try:
                        outcome[text] = two.append(user(text)).seqs
                    except Exception as error:  # reported by the assertion below
                        outcome["error"] = error

                worker = threading.Thread(target=second_appends, args=(f"second {round_no}", outcome))
                worker.start()
                assert watch.under_way.wait(120), "the second client's append never started"
                writer = _restart("writer", data_dir, writer.address)
                acknowledged[f"first {round_no}"] = one.append(user(f"first {round_no}")).seqs
                worker.join(240)
                assert not worker.is_alive()
                assert "error" not in outcome, outcome.get("error")
                acknowledged.update(outcome)
                reader = _restart("reader", data_dir, reader.address)
            replayed = [message.get("content") for message in one.replay().messages]
    finally:
        writer.stop()
        reader.stop()

    (path,) = session_files(data_dir)
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [record["seq"] for record in records] == list(range(len(records)))
    texts = {record["seq"]: record["payload"].get("content") for record in records}
    assert len(acknowledged) == 2 * ROUNDS + 1
    for text, seqs in acknowledged.items():
        assert texts[seqs[0]] == text, (
            f"{text!r} was acknowledged at seq {seqs[0]}, which holds {texts[seqs[0]]!r}"
        )
    assert len(records) == 1 + len(acknowledged), "a record was written twice or one not acknowledged"
    assert sorted(replayed) == sorted(acknowledged)
