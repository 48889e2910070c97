"""How soon the SDK's appends go on after a writer restart, and what it says of those that did not.

    .venv/bin/python bench/reconnect.py [--outages 0.5,1,2,5,10] [--stops kill,term]
                                        [--sessions 4] [--baseline-repo PATH] [--check]

A writer and a reader (``rollout serve-writer`` / ``serve-reader`` on a temporary data root,
free ports) and an appender process: ``--sessions`` threads, each with a session of its own
through one blocking ``RolloutClient`` (deadline 30 s), appending one user message after the
other. For each stop kind (``kill``: SIGKILL; ``term``: SIGTERM, the writer drains and exits)
and each outage: once the appender has acks flowing, the writer is stopped; once it has exited
and the outage has passed, a writer is started again on the same port on the same data root.
"Back" is the moment its "listening on" line is read (it accepts connections then). The figure
is the delay from back to the appender's first ack after it: target <= 0.5 s (a first ack at
most outage + 0.5 s after the writer went away). Also printed: the longest append of the run.

Then the deadline phase: a fresh appender with a 5 s deadline, the writer killed for 10 s.
Each append is counted by how it ended (an ack; UnavailableError, which this client raises
only for an append none of whose attempts was sent: "was not written"; AppendOutcomeUnknownError,
"may have landed"; anything else) and looked up in the session files: an UnavailableError
append found there, an acknowledged one missing or one written twice is a false answer (exit 2).

``--baseline-repo PATH`` runs the same with another checkout's client (the services stay this
checkout's), and prints its figures beside these as ratios. Exit status: 0 whatever the
figures; with ``--check``, 1 when a delay is over 0.5 s; 2 when an answer was false.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGET_S = 0.5
DEADLINE_PHASE = (5.0, 10.0)  # client deadline, outage (s)
#: How an append ends: acknowledged, UnavailableError (this client: "was not written"),
#: AppendOutcomeUnknownError ("may have landed"), anything else.
OUTCOMES = ("ack", "UnavailableError", "AppendOutcomeUnknownError", "other")

# -- the appender (a process of its own, running the chosen checkout's client) ----------------


def _append_loop(writer: str, reader: str, sessions: int, deadline: float, tag: str) -> None:
    """Run the appender: print one JSON line per ended append until stdin closes."""
    import rollout_client
    from rollout_client import (
        AppendOutcomeUnknownError,
        RetryPolicy,
        RolloutClient,
        UnavailableError,
        user,
    )

    stop = threading.Event()
    printing = threading.Lock()

    def say(event: dict[str, Any]) -> None:
        with printing:
            print(json.dumps(event), flush=True)

    def agent(client: RolloutClient, index: int) -> None:
        session = client.create_session()
        count = 0
        while not stop.is_set():
            text = f"{tag}-s{index}-{count}"
            count += 1
            started = time.monotonic()
            event: dict[str, Any] = {"text": text, "started": started}
            try:
                result = session.append(user(text))
                event.update(outcome="ack", seq=result.seqs[0])
            except AppendOutcomeUnknownError as error:
                event.update(outcome="AppendOutcomeUnknownError", message=str(error))
            except UnavailableError as error:
                event.update(outcome="UnavailableError", message=str(error))
            except Exception as error:
                event.update(outcome="other", message=f"{type(error).__name__}: {error}")
            event["ended"] = time.monotonic()
            say(event)

    policy = RetryPolicy(deadline=deadline)
    with RolloutClient(writer, reader, retry=policy) as client:
        threads = [threading.Thread(target=agent, args=(client, i), daemon=True) for i in range(sessions)]
        for thread in threads:
            thread.start()
        say({"outcome": "ready", "client": rollout_client.__file__})
        sys.stdin.read()  # until the benchmark closes it
        stop.set()
        for thread in threads:
            thread.join(120)


@dataclass
class Appender:
    """An appender process and the appends it reported (``events``, in the order printed)."""

    process: subprocess.Popen[str]
    events: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ready: threading.Event = field(default_factory=threading.Event)
    client: str = ""  # the rollout_client package the appender runs

    @classmethod
    def start(cls, repo: Path, writer: str, reader: str, sessions: int, deadline: float) -> Appender:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--appender",
            f"{writer},{reader},{sessions},{deadline},{uuid.uuid4().hex[:8]}",
        ]
        env = {**os.environ, "PYTHONPATH": str(repo)}
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=repo, env=env
        )
        appender = cls(process)
        threading.Thread(target=appender._read, daemon=True).start()
        if not appender.ready.wait(60):
            raise RuntimeError("the appender did not start")
        return appender

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            if event["outcome"] == "ready":
                self.client = event["client"]
                self.ready.set()
                continue
            with self.lock:
                self.events.append(event)

    def acks_after(self, moment: float) -> list[float]:
        """End times of the acks that came after ``moment`` (monotonic clock, shared by processes)."""
        with self.lock:
            return sorted(e["ended"] for e in self.events if e["outcome"] == "ack" and e["ended"] > moment)

    def wait_ack_after(self, moment: float, limit: float) -> float | None:
        """The first ack's end time after ``moment``; None when none comes within ``limit`` s."""
        until = time.monotonic() + limit
        while time.monotonic() < until:
            acks = self.acks_after(moment)
            if acks:
                return acks[0]
            time.sleep(0.005)
        return None

    def close(self) -> list[dict[str, Any]]:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(180)
        with self.lock:
            return list(self.events)


# -- the benchmark --------------------------------------------------------------------------


def _stop_writer(writer: Any, stop: str) -> None:
    writer.stop(signal.SIGKILL if stop == "kill" else signal.SIGTERM, timeout=60)


def _landed_texts(data_dir: Path) -> dict[str, int]:
    """How many times each user message text is in the session files."""
    import orjson

    counts: dict[str, int] = {}
    for path in (data_dir / "sessions").glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            payload = orjson.loads(line).get("payload", {})
            content = payload.get("content") if isinstance(payload, dict) else None
            if isinstance(content, str):
                counts[content] = counts.get(content, 0) + 1
    return counts


def _restarts(
    args: argparse.Namespace, repo: Path, data_dir: Path, logs: Path, state: dict[str, Any]
) -> list:
    """Per stop kind and outage: (stop, outage, delay from back to first ack or None)."""
    from tests.processes import start_service as start_at

    rows = []
    appender = Appender.start(repo, state["writer"].address, state["reader"].address, args.sessions, 30.0)
    state["client"] = appender.client
    try:
        for stop in args.stops:
            for outage in args.outages:
                if appender.wait_ack_after(time.monotonic(), 30) is None:
                    raise RuntimeError("no acks before a stop")
                address = state["writer"].address
                _stop_writer(state["writer"], stop)
                time.sleep(outage)
                state["writer"] = start_at("writer", data_dir, logs / "writer.log", address=address)
                back = time.monotonic()
                first = appender.wait_ack_after(back, 60)
                rows.append((stop, outage, None if first is None else first - back))
                time.sleep(0.5)
    finally:
        events = appender.close()
    longest = max(e["ended"] - e["started"] for e in events)
    failures = [e for e in events if e["outcome"] != "ack"]
    state["longest"] = longest
    state["failures"] = failures
    return rows


def _deadline_phase(repo: Path, data_dir: Path, logs: Path, state: dict[str, Any], sessions: int) -> dict:
    """Appends with a 5 s deadline across a 10 s kill: outcomes and what the files hold."""
    from tests.processes import start_service as start_at

    deadline, outage = DEADLINE_PHASE
    appender = Appender.start(repo, state["writer"].address, state["reader"].address, sessions, deadline)
    try:
        if appender.wait_ack_after(time.monotonic(), 30) is None:
            raise RuntimeError("no acks before the kill")
        address = state["writer"].address
        _stop_writer(state["writer"], "kill")
        time.sleep(outage)
        state["writer"] = start_at("writer", data_dir, logs / "writer.log", address=address)
        appender.wait_ack_after(time.monotonic(), 30)
        time.sleep(0.5)
    finally:
        events = appender.close()
    landed = _landed_texts(data_dir)
    summary: dict[str, Any] = {"appends": len(events)}
    for outcome in OUTCOMES:
        chosen = [e for e in events if e["outcome"] == outcome]
        summary[outcome] = (len(chosen), sum(1 for e in chosen if landed.get(e["text"], 0)))
    summary["twice"] = sum(1 for e in events if landed.get(e["text"], 0) > 1)
    summary["other messages"] = [e["message"] for e in events if e["outcome"] == "other"][:3]
    return summary


def _measure(args: argparse.Namespace, repo: Path) -> tuple[list, dict[str, Any], dict]:
    from _support import start_service

    with tempfile.TemporaryDirectory(prefix="bench-reconnect-") as temp:
        root = Path(temp)
        data_dir, logs = root / "data", root
        data_dir.mkdir()
        state: dict[str, Any] = {
            "writer": start_service("writer", data_dir, logs / "writer.log"),
            "reader": start_service("reader", data_dir, logs / "reader.log"),
        }
        try:
            rows = _restarts(args, repo, data_dir, logs, state)
            deadline = _deadline_phase(repo, data_dir, logs, state, args.sessions)
        finally:
            state["writer"].stop()
            state["reader"].stop()
    return rows, state, deadline


def _report(label: str, rows: list, state: dict[str, Any], deadline: dict) -> None:
    print(f"\n{label} ({state['client']})")
    print(f"{'stop':5} {'outage s':>8} {'first ack after back s':>23}  target <= {TARGET_S}")
    for stop, outage, delay in rows:
        shown = "none in 60 s" if delay is None else f"{delay:.3f}"
        verdict = "MET" if delay is not None and delay <= TARGET_S else "NOT MET"
        print(f"{stop:5} {outage:8g} {shown:>23}  {verdict}")
    delays = [delay for _, _, delay in rows if delay is not None]
    if delays:
        print(f"delay after back: median {statistics.median(delays):.3f} s, max {max(delays):.3f} s")
    kinds = sorted({e["outcome"] for e in state["failures"]})
    print(
        f"longest append {state['longest']:.2f} s; appends that ended without an ack:"
        f" {len(state['failures'])} ({', '.join(kinds) or 'none'})"
    )
    client_deadline, outage = DEADLINE_PHASE
    print(
        f"deadline {client_deadline:g} s across a {outage:g} s kill: {deadline['appends']} appends;"
        + "".join(
            f" {outcome} {deadline[outcome][0]} (in the files {deadline[outcome][1]});"
            for outcome in OUTCOMES
        )
        + f" written twice {deadline['twice']}"
    )
    for message in [e["message"] for e in state["failures"]][:5] + deadline["other messages"]:
        print(f"  {message[:300]}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--appender":
        writer, reader, sessions, deadline, tag = sys.argv[2].split(",")
        _append_loop(writer, reader, int(sessions), float(deadline), tag)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _support import REPO, HelpFormatter

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--outages", default="0.5,1,2,5,10", help="outages to measure (s), comma-separated")
    parser.add_argument("--stops", default="kill,term", help="how the writer is stopped: kill, term")
    parser.add_argument("--sessions", type=int, default=4, help="appending sessions (threads)")
    parser.add_argument("--baseline-repo", type=Path, help="another checkout whose client is measured too")
    parser.add_argument("--check", action="store_true", help="exit 1 when a delay is over the target")
    args = parser.parse_args()
    args.outages = [float(value) for value in args.outages.split(",")]
    args.stops = [value for value in args.stops.split(",") if value]
    if not set(args.stops) <= {"kill", "term"}:
        parser.error("--stops takes kill and term")
    print("command:", shlex.join(sys.orig_argv))

    rows, state, deadline = _measure(args, REPO)
    _report(f"client: {REPO}", rows, state, deadline)
    if args.baseline_repo is not None:
        base_rows, base_state, base_deadline = _measure(args, args.baseline_repo.resolve())
        _report(f"baseline client: {args.baseline_repo.resolve()}", base_rows, base_state, base_deadline)
        print("\ndelay after back, this client / baseline:")
        for (stop, outage, delay), (_, _, base) in zip(rows, base_rows, strict=True):
            ratio = "n/a" if delay is None or not base else f"{delay / base:.2f}"
            print(f"  {stop:5} {outage:6g} s: {ratio}")

    false = deadline["UnavailableError"][1] + deadline["twice"] + (deadline["ack"][0] - deadline["ack"][1])
    if false:
        print(f"FALSE ANSWERS: {false} (not written but landed, written twice, or acknowledged and missing)")
        return 2
    if args.check and any(delay is None or delay > TARGET_S for _, _, delay in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
