"""Crash harness: kill -9 the writer at random moments and prove no acknowledged record is lost.

Usage (the long run; CI runs 30 kill points through tests/writer/test_crash_harness.py):

    .venv/bin/python scripts/crash_harness.py --kills 200 [--clients 4] [--seed 1]

Each cycle starts the writer (which repairs torn tails at start-up), lets several
clients append to their own sessions (one of them also stops and resumes its
session over and over, so that kills land during Stop too), then kills the
writer with SIGKILL after a random 0.1-0.6 s. Clients remember every record the
writer acknowledged. At the end every session file is checked:

* every acknowledged record is present exactly once, at its acknowledged seq, in order;
* every file parses after recovery (no torn line, no seq gap or repeat) and every
  line passes its check (crc32c), every checkpoint its lines digest;
* every checkpoint covers exactly the records before it and its digest matches
  the shared rebuild of the file up to it;
* every stop record directly follows its checkpoint.

A deleting client also runs: it creates small sessions, appends to them and deletes them
(DeleteSession), so that kills land in the middle of deletes too. Each of its sessions must
be whole (all of the above) or gone (no file, marker, state or trash copy under any name), and
gone if its delete was acknowledged; no trash folder holds anything after the last start-up.

Exit status 0 when all hold; 1 with the violations printed otherwise.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from shared.digest import digest
from shared.errors import SessionNotFoundError
from shared.layout import DataRoot
from shared.rebuild import DAMAGE_KINDS, DegradedKind, rebuild

# The service-process harness lives in the test suite (tests/processes.py), imported from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.processes import ServiceProcess, start_service

REPO = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(r"listening on (\S+:\d+)")
#: Every kind of damage (line checks and checkpoints' lines digests included), and a torn tail.
_DAMAGE = DAMAGE_KINDS | {DegradedKind.UNCOMMITTED_TAIL}


@dataclass
class ClientLog:
    """What one client's writer acknowledged: (seq, text) in acknowledgement order."""

    session_id: str = ""
    acked: list[tuple[int, str]] = field(default_factory=list)
    stops: int = 0


@dataclass
class HarnessReport:
    kills: int
    acked_records: int
    stops: int
    violations: list[str]
    deletes: int = 0
    #: Deletes a kill interrupted after their record was durable, finished by a start-up.
    finished_deletes: int = 0


@dataclass
class DeletedLog:
    """The deleting client's sessions: each one's log, and whether its delete was acknowledged."""

    sessions: list[ClientLog] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)


class _Writer:
    """The writer process of the current cycle and its address."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.address = ""
        self.cycle = 0
        self.up = threading.Event()
        self.service: ServiceProcess | None = None
        self.log = data_dir.parent / "harness-writer.log"

    def start(self) -> None:
        self.service = start_service("writer", self.data_dir, self.log)
        self.address = self.service.address
        self.cycle += 1
        self.up.set()

    def kill(self, sig: int = signal.SIGKILL) -> int:
        self.up.clear()
        assert self.service is not None
        return self.service.stop(sig, timeout=30)


def _client(number: int, writer: _Writer, log: ClientLog, done: threading.Event, rng: random.Random) -> None:
    counter = 0
    while not done.is_set():
        if not writer.up.wait(0.2):
            continue
        cycle = writer.cycle
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            while not done.is_set() and writer.cycle == cycle and writer.up.is_set():
                try:
                    if not log.session_id:
                        log.session_id = stub.CreateSession(
                            writer_pb2.CreateSessionRequest(tenant=f"client-{number}"), timeout=5
                        ).session_id
                        continue
                    if number == 0 and counter and counter % 12 == 0 and rng.random() < 0.5:
                        stub.Stop(
                            writer_pb2.StopRequest(
                                session_id=log.session_id,
                                stop_kind=records_pb2.STOP_KIND_PAUSED,
                                reason="harness",
                            ),
                            timeout=5,
                        )
                        log.stops += 1
                        stub.Resume(writer_pb2.ResumeRequest(session_id=log.session_id), timeout=5)
                    texts = [f"c{number}-{counter + i}" for i in range(rng.randint(1, 8))]
                    counter += len(texts)  # never reused, acknowledged or not
                    records = [
                        writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))
                        for text in texts
                    ]
                    ack = stub.Append(
                        writer_pb2.AppendRequest(session_id=log.session_id, records=records), timeout=5
                    )
                    log.acked.extend(zip(ack.seqs, texts, strict=True))
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and "stopped" in (
                        exc.details() or ""
                    ):
                        try:
                            stub.Resume(writer_pb2.ResumeRequest(session_id=log.session_id), timeout=5)
                        except grpc.RpcError:
                            time.sleep(0.05)
                        continue
                    time.sleep(0.02)  # the writer died under us; wait for the next cycle
                    break


def _deleter(writer: _Writer, log: DeletedLog, done: threading.Event, rng: random.Random) -> None:
    """Create a session, append to it, delete it; again, until done (kills land anywhere)."""
    counter = 0
    while not done.is_set():
        if not writer.up.wait(0.2):
            continue
        cycle = writer.cycle
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            current: ClientLog | None = None
            while not done.is_set() and writer.cycle == cycle and writer.up.is_set():
                try:
                    if current is None or current.session_id in log.acked:
                        session_id = str(uuid.uuid4())
                        current = ClientLog(session_id)
                        log.sessions.append(current)  # before the call: it may land unanswered
                        stub.CreateSession(
                            writer_pb2.CreateSessionRequest(session_id=session_id, tenant="deleter"),
                            timeout=5,
                        )
                    for _ in range(rng.randint(0, 3)):
                        text = f"d-{counter}"
                        counter += 1
                        record = writer_pb2.AppendRecord(
                            message=records_pb2.ChatMessage(role="user", text=text)
                        )
                        ack = stub.Append(
                            writer_pb2.AppendRequest(session_id=current.session_id, records=[record]),
                            timeout=5,
                        )
                        current.acked.append((ack.seqs[0], text))
                    stub.DeleteSession(
                        writer_pb2.DeleteSessionRequest(session_id=current.session_id), timeout=5
                    )
                    log.acked.add(current.session_id)
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.NOT_FOUND and current is not None:
                        current = None  # never created (its create was not sent): start another
                        continue
                    time.sleep(0.02)  # the writer died under us; wait for the next cycle
                    break


def check_deleted(data_dir: Path, log: DeletedLog) -> list[str]:
    """Each of the deleting client's sessions is whole or gone, and gone when its delete was
    acknowledged; no trash folder holds anything."""
    problems = []
    root = DataRoot(data_dir)
    for session in log.sessions:
        leftovers = [
            path for path in data_dir.rglob(f"*{session.session_id}*") if path.name != "deletions.jsonl"
        ]
        try:
            _, path = root.locate(session.session_id)
        except SessionNotFoundError:
            if leftovers:
                problems.append(f"deleted session {session.session_id} left {leftovers}")
            continue
        if session.session_id in log.acked:
            problems.append(f"session {session.session_id} is still there after its delete was acknowledged")
        problems.extend(check_session(path, session))
    for trash in data_dir.rglob("trash"):
        if any(trash.iterdir()):
            problems.append(f"{trash} still holds {sorted(p.name for p in trash.iterdir())}")
    return problems


def check_session(path: Path, log: ClientLog) -> list[str]:
    """Every violation of the crash promises in one session file (empty: all hold)."""
    data = path.read_bytes()
    problems = []
    rebuilt = rebuild(data)
    for entry in rebuilt.degraded:
        if entry.kind in _DAMAGE:
            problems.append(f"{path.name}: {entry.kind} at line {entry.line}: {entry.detail}")
    lines = data.splitlines(keepends=True)
    records = [orjson.loads(line) for line in lines]
    by_seq = {record["seq"]: record for record in records}
    texts = [r["payload"].get("content") for r in records if r["type"] == "message"]
    for seq, text in log.acked:
        record = by_seq.get(seq)
        if record is None or record["payload"].get("content") != text:
            problems.append(f"{path.name}: acknowledged {text!r} at seq {seq} is missing")
        elif texts.count(text) != 1:
            problems.append(f"{path.name}: {text!r} appears {texts.count(text)} times")
    acked_seqs = [seq for seq, _ in log.acked]
    if acked_seqs != sorted(acked_seqs):
        problems.append(f"{path.name}: acknowledged seqs are out of order")
    offset = 0
    for index, (line, record) in enumerate(zip(lines, records, strict=True)):
        if record["type"] == "agent_checkpoint":
            payload = record["payload"]
            if payload["covers_seq"] != record["seq"] - 1:
                problems.append(
                    f"{path.name}: checkpoint at seq {record['seq']} covers seq {payload['covers_seq']}"
                )
            if digest(rebuild(data[:offset]).messages) != payload["digest"]:
                problems.append(f"{path.name}: checkpoint at seq {record['seq']} does not verify")
        if record["type"] == "stop":
            previous = records[index - 1] if index else None
            if previous is None or previous["type"] != "agent_checkpoint":
                problems.append(f"{path.name}: stop at seq {record['seq']} does not follow a checkpoint")
            elif record["payload"]["checkpoint_seq"] != previous["seq"]:
                problems.append(f"{path.name}: stop at seq {record['seq']} names another checkpoint")
        offset += len(line)
    return problems


def run_harness(data_dir: Path, kills: int, clients: int = 4, seed: int = 1) -> HarnessReport:
    """Run ``kills`` kill -9 cycles against a writer on ``data_dir`` and check every session."""
    rng = random.Random(seed)
    writer = _Writer(data_dir)
    logs = [ClientLog() for _ in range(clients)]
    done = threading.Event()
    deleted = DeletedLog()
    threads = [
        threading.Thread(target=_client, args=(n, writer, logs[n], done, random.Random(seed * 100 + n)))
        for n in range(clients)
    ]
    threads.append(threading.Thread(target=_deleter, args=(writer, deleted, done, random.Random(seed * 7))))
    for thread in threads:
        thread.start()
    try:
        for _ in range(kills):
            writer.start()
            time.sleep(rng.uniform(0.1, 0.6))
            writer.kill()
    finally:
        done.set()
        for thread in threads:
            thread.join(30)
    writer.start()  # one more start-up: recovery runs on whatever the last kill left
    writer.kill(signal.SIGTERM)
    violations: list[str] = []
    for log in logs:
        if not log.session_id:
            violations.append("a client never created its session")
            continue
        violations.extend(check_session(DataRoot(data_dir).locate(log.session_id)[1], log))
    violations.extend(check_deleted(data_dir, deleted))
    return HarnessReport(
        kills,
        sum(len(log.acked) for log in logs),
        sum(log.stops for log in logs),
        violations,
        len(deleted.acked),
        _finished_deletes(writer.log.read_text(errors="replace")),
    )


def _finished_deletes(log: str) -> int:
    """How many interrupted deletes the writer's start-ups finished (from its log lines)."""
    trashed = sum(int(found) for found in re.findall(r"finished (\d+) deletions a crash interrupted", log))
    return trashed + len(re.findall(r"finished the deletion of \S+ a crash interrupted", log))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        data_dir = Path(folder) / "data"
        data_dir.mkdir()
        report = run_harness(data_dir, args.kills, args.clients, args.seed)
    elapsed = time.perf_counter() - started
    print(f"command: {' '.join(sys.argv)}")
    print(
        f"kill -9 points: {report.kills}; acknowledged records: {report.acked_records};"
        f" stop/resume rounds: {report.stops}; acknowledged deletes: {report.deletes}"
        f" (interrupted and finished at start-up: {report.finished_deletes}); {elapsed:.0f} s"
    )
    for violation in report.violations:
        print(f"VIOLATION: {violation}")
    print(
        "result: "
        + ("all promises hold" if not report.violations else f"{len(report.violations)} violations")
    )
    return 1 if report.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
