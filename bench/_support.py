"""Shared helpers of the benchmarks: synthetic session files and a reader subprocess.

Session files are written directly in the real on-disk format
(:func:`shared.records.encode_line`, :func:`shared.naming.build_file_name`): a
``session_meta`` line, then turns of a realistic record mix, then (optionally)
the ``agent_checkpoint`` + ``stop`` pair a writer's Stop appends. The checkpoint
digest is computed on the way with :class:`shared.digest.DigestBuilder` over the
messages exactly as :func:`shared.rebuild.rebuild` will rebuild them (reasoning
attached to the next assistant message), so memory stays bounded for any size.

One turn ``i`` holds, in order:

* ``turn_context`` (~300 B) and a ``user`` message (~1 KB; every 4th turn as
  content parts instead of a string);
* ``k = 1 + i % 3`` tool rounds: an assistant message with one tool call
  (``function`` shell calls; every 5th turn's first call is a ``custom``
  apply_patch), an ``event`` (exec begin), the ``tool`` output (~1.5 KB, multi
  line); a ``reasoning`` record (~700 B) precedes the first call;
* an ``event`` token count, a ``reasoning`` record on even turns, and the final
  assistant message (~1 KB).

Text is sliced from a seeded pool of prose, code and some non-ASCII text, so
lines differ and JSON escaping (quotes, newlines, backslashes) is exercised.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from shared.digest import DigestBuilder
from shared.naming import build_file_name, new_session_id
from shared.records import RecordType, encode_line, format_timestamp

REPO = Path(__file__).resolve().parent.parent
# The service-process harness lives in the test suite (tests/processes.py), imported from the checkout.
sys.path.insert(0, str(REPO))
from tests.processes import ServiceProcess  # noqa: E402
from tests.processes import start_service as start_service_process  # noqa: E402

MB = 1_000_000
_WRITE_BUFFER = 8 * 1024 * 1024
# A turn pattern repeats every 60 turns (i % 3, i % 2, i % 4, i % 5); sizing samples one cycle.
_CYCLE_TURNS = 60

Record = tuple[str, dict[str, Any]]


def _text_pool(seed: int = 20261130, size: int = 256 * 1024) -> str:
    rng = random.Random(seed)
    sentence = (
        "the session writer appends each record once and the reader rebuilds the exact sequence"
        " from the file; a tool call waits for its output before the model continues with the"
        " next step of the plan while checkpoints pin the digest of everything before them"
    )
    words = sentence.split(" ")
    names = ("rebuild", "append", "digest", "offset", "handle", "payload", "window", "cursor")
    parts: list[str] = []
    total = 0
    while total < size:
        roll = rng.random()
        if roll < 0.65:
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 18)))
            piece = sentence.capitalize() + ". "
        elif roll < 0.9:
            name = rng.choice(names)
            piece = f'    {name} = load("{rng.choice(words)}", {rng.randint(0, 9999)})  # {name}\\n\n'
        else:
            piece = rng.choice(("café — naïve “quotes” ", "東京で実行 ✓ ", "Größe ≤ 4 KiB → ok ", "\ttab\t"))
        parts.append(piece)
        total += len(piece)
    return "".join(parts)


_POOL = _text_pool()


def _text(key: int, length: int) -> str:
    start = (key * 7919) % (len(_POOL) - length)
    return _POOL[start : start + length]


def messages_in_turn(turn: int) -> int:
    """Messages the rebuilt sequence gains from turn ``turn`` (user, k calls + k outputs, final)."""
    return 2 * (1 + turn % 3) + 2


def turn_records(turn: int) -> tuple[list[Record], list[dict[str, Any]]]:
    """The records of one turn and the messages they rebuild to (reasoning attached)."""
    records: list[Record] = []
    messages: list[dict[str, Any]] = []
    key = turn * 31
    records.append(
        (
            RecordType.TURN_CONTEXT,
            {
                "cwd": "/home/dev/projects/rollout-ledger",
                "model": "gpt-5-codex",
                "approval_policy": "on-request",
                "sandbox_policy": {"mode": "workspace-write", "network_access": False, "writable_roots": []},
                "effort": "medium",
                "summary": "auto",
                "turn": turn,
            },
        )
    )
    if turn % 4 == 0:
        content: Any = [
            {"type": "input_text", "text": _text(key + 1, 600)},
            {"type": "input_text", "text": _text(key + 2, 280)},
        ]
    else:
        content = _text(key + 1, 900)
    user = {"role": "user", "content": content}
    records.append((RecordType.MESSAGE, user))
    messages.append(user)
    for call in range(1 + turn % 3):
        call_id = f"call_{turn:08d}_{call:02d}_{(turn * 2654435761 + call) % 16**12:012x}"
        if call == 0 and turn % 5 == 4:
            tool_call = {
                "id": call_id,
                "type": "custom",
                "function": {
                    "name": "apply_patch",
                    "arguments": "*** Begin Patch\n*** Update File: shared/rebuild.py\n@@\n-"
                    + _text(key + 3, 200)
                    + "\n+"
                    + _text(key + 4, 200)
                    + "\n*** End Patch\n",
                },
            }
        else:
            arguments = {"command": ["bash", "-lc", _text(key + 5 + call, 120)], "timeout_ms": 120000}
            tool_call = {
                "id": call_id,
                "type": "function",
                "function": {"name": "shell", "arguments": orjson.dumps(arguments).decode()},
            }
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": _text(key + 6 + call, 140),
            "tool_calls": [tool_call],
        }
        if call == 0:
            reasoning = {"content": _text(key + 7, 700), "signature": f"sig-{turn:x}-{key:x}"}
            records.append((RecordType.REASONING, reasoning))
            messages.append({**assistant, "reasoning": reasoning})
        else:
            messages.append(assistant)
        records.append((RecordType.MESSAGE, assistant))
        records.append(
            (
                RecordType.EVENT,
                {"kind": "exec_command_begin", "body": {"call_id": call_id, "cwd": "/home/dev/projects"}},
            )
        )
        output = {"role": "tool", "tool_call_id": call_id, "content": _text(key + 8 + call, 1500)}
        records.append((RecordType.MESSAGE, output))
        messages.append(output)
    records.append(
        (
            RecordType.EVENT,
            {
                "kind": "token_count",
                "body": {
                    "input_tokens": 12000 + turn,
                    "cached_input_tokens": 9000 + turn,
                    "output_tokens": 800 + turn % 97,
                    "reasoning_output_tokens": 320,
                    "total_tokens": 13120 + turn,
                    "model_context_window": 272000,
                },
            },
        )
    )
    final: dict[str, Any] = {"role": "assistant", "content": _text(key + 9, 1000)}
    records.append((RecordType.MESSAGE, final))
    if turn % 2 == 0:
        reasoning = {"content": _text(key + 10, 500)}
        records.insert(len(records) - 1, (RecordType.REASONING, reasoning))
        messages.append({**final, "reasoning": reasoning})
    else:
        messages.append(final)
    return records, messages


def _cycle_bytes() -> int:
    ts = "2026-11-30T10:15:30.123456Z"
    total = 0
    for turn in range(_CYCLE_TURNS):
        for record_type, payload in turn_records(turn)[0]:
            total += len(encode_line(1_000_000, ts, record_type, payload))
    return total


def turns_for(target_bytes: int) -> int:
    """Turns whose records take about ``target_bytes`` (at least one)."""
    return max(1, round(target_bytes * _CYCLE_TURNS / _cycle_bytes()))


@dataclass(frozen=True)
class SessionInfo:
    """A synthesized session file and what a rebuild of it must find."""

    path: Path
    session_id: str
    bytes: int
    records: int
    messages: int
    digest: str
    stopped: bool


class _LineWriter:
    """Numbered record lines into a buffered file."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.seq = 0

    def write(self, record_type: str, payload: dict[str, Any], ts: str) -> None:
        self.handle.write(encode_line(self.seq, ts, record_type, payload))
        self.seq += 1


def write_session(
    directory: Path,
    *,
    target_bytes: int = 0,
    turns: int = 0,
    first_turn: int = 0,
    created_at: datetime | None = None,
    session_id: str = "",
    stop_kind: str = "paused",
    sparse_bytes: int = 0,
) -> SessionInfo:
    """Write one session file under ``directory`` and return what it holds.

    Size: ``turns`` turns (numbered from ``first_turn``: the turn pattern varies
    with the number), or as many as take about ``target_bytes``. With a
    ``stop_kind`` the file ends with an ``agent_checkpoint`` (digest of every
    message) and a ``stop`` record; empty: the session is left running. With
    ``sparse_bytes`` the stop pair is written so that the file ends at that size,
    after a hole (NUL bytes on read) that starts right after a ``\\n``; only the
    tail of such a file is meaningful (the head stays a real session).
    """
    created = created_at or datetime(2026, 11, 30, 10, 15, 30, tzinfo=UTC)
    session_id = session_id or new_session_id()
    turn_count = turns or turns_for(target_bytes)
    numbers = range(first_turn, first_turn + turn_count)
    count = sum(messages_in_turn(turn) for turn in numbers)
    builder = DigestBuilder(count)
    path = directory / build_file_name(created, session_id)
    with path.open("wb", buffering=_WRITE_BUFFER) as handle:
        lines = _LineWriter(handle)
        meta = {"session_id": session_id, "tenant": "t", "created_at": format_timestamp(created)}
        lines.write(RecordType.SESSION_META, meta, format_timestamp(created))
        for turn in numbers:
            ts = format_timestamp(created + timedelta(seconds=turn - first_turn))
            records, messages = turn_records(turn)
            for record_type, payload in records:
                lines.write(record_type, payload, ts)
            for message in messages:
                builder.add(message)
        message_digest = builder.result()
        if stop_kind:
            ts = format_timestamp(created + timedelta(seconds=turn_count))
            checkpoint_seq = lines.seq
            checkpoint = {
                "digest": message_digest,
                "message_count": count,
                "covers_seq": checkpoint_seq - 1,
                "stop_kind": stop_kind,
            }
            stop = {"stop_kind": stop_kind, "reason": "benchmark", "checkpoint_seq": checkpoint_seq}
            tail = encode_line(checkpoint_seq, ts, RecordType.AGENT_CHECKPOINT, checkpoint)
            tail += encode_line(checkpoint_seq + 1, ts, RecordType.STOP, stop)
            if sparse_bytes:
                handle.flush()
                tail = b"\n" + tail
                start = max(sparse_bytes - len(tail), handle.tell())
                handle.seek(start)
            handle.write(tail)
            lines.seq += 2
    return SessionInfo(
        path, session_id, path.stat().st_size, lines.seq, count, message_digest, bool(stop_kind)
    )


# -- a reader subprocess --------------------------------------------------------------


#: A started service process (``.process.pid``, ``.address``, ``.stop()``).
Service = ServiceProcess


def start_service(
    kind: str, data_dir: Path, stderr_path: Path, *extra: str, repo: Path = REPO
) -> ServiceProcess:
    """``rollout serve-<kind>`` on a free port, with the options ``extra``, running the code of the
    checkout ``repo``; waits for its "listening on" line."""
    return start_service_process(kind, data_dir, stderr_path, *extra, repo=repo)


def proc_status_kb(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/<pid>/status (VmHWM: peak RSS, VmRSS: current RSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_cpu_ns(pid: int) -> int:
    """Nanoseconds of CPU a process's threads now alive have run (the first field of each
    /proc/<pid>/task/<tid>/schedstat): precise where /proc/<pid>/stat counts clock ticks."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def settle(service: Service, quiet_seconds: float = 1.0, limit: float = 600) -> float:
    """Seconds until a service's CPU time stays flat for ``quiet_seconds`` (a reader: its listing
    index is warm); RuntimeError when it does not within ``limit`` seconds."""
    started = time.perf_counter()
    before = proc_cpu_seconds(service.process.pid)
    while time.perf_counter() - started < limit:
        time.sleep(quiet_seconds)
        now = proc_cpu_seconds(service.process.pid)
        if now - before < 0.05 * quiet_seconds:
            return time.perf_counter() - started - quiet_seconds
        before = now
    raise RuntimeError(f"the service (pid {service.process.pid}) did not settle")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """A benchmark's ``--help``: its module docstring as written, and every option's default."""
