"""Fuzz both services' RPCs with hostile requests; every answer must be a status the protos document.

Usage (the long run; CI runs a short one through tests/test_fuzz_rpcs.py):

    .venv/bin/python scripts/fuzz_rpcs.py --requests 130000 [--seed 7] [--json]

Starts ``rollout serve-writer`` and ``rollout serve-reader`` on one fresh data root,
creates a few real sessions (messages, tool calls, stops, a fork), then sends
``--requests`` requests, each to a random RPC of either service (every RPC of
RolloutWriter and RolloutReader, streams included), built one of five ways:

* random bytes as the serialized request (invalid protobuf, invalid UTF-8, ...);
* a request of the right type with random fields set to random values (every field
  type: hostile strings, edge integers, undeclared enum numbers, NaN in Structs,
  deep and long repeated fields);
* a valid request on a real session with one to three fields made hostile
  (20 KB to 1 MB strings, non-ASCII, NUL, path traversal, uppercase or unknown
  UUIDs, reserved event kinds, leap seconds and ISO week dates);
* a valid request whose serialized bytes are then flipped or cut;
* a valid request as it is (so that sessions grow, stop, resume and fork meanwhile).

Hostile strings come from a fixed list and a generator; the run is reproducible
from its seed (printed). Findings, each printed with the RPC, the way it was built,
the status and a prefix of the message:

* a crash: either service exits during the run (or fails to stop cleanly after it);
* INTERNAL or UNKNOWN;
* a status replaced by gRPC's own because it did not fit the metadata limits
  (``RESOURCE_EXHAUSTED: Stream removed (received metadata size exceeds ...)``), whatever
  the protos say of RESOURCE_EXHAUSTED;
* a status the protos do not document for that RPC (the codes named in the
  comment above each ``rpc`` in ``protos/rollout/v1/*.proto``, plus the ones the
  file's ``Every RPC:`` lines give; ``Same status codes as X`` and ``exactly as X``
  inherit X's, ``without CODE`` removes one);
* an OK answer whose bytes do not parse as the RPC's response type;
* after the run, a session file that fails VerifySession (a partial or forged write).

Exit status 0 when there is no finding, 1 otherwise (2: the services did not start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import re
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # tests/processes.py, the harness that starts services as processes

from memory_store.store import MemoryStore  # noqa: E402
from rollout.v1 import reader_pb2, records_pb2, writer_pb2  # noqa: E402
from shared.layout import DataRoot  # noqa: E402
from shared.memory import (  # noqa: E402
    Artifact,
    ArtifactKind,
    Generator,
    scope_of,
    source_record_of_line,
    stamp_source,
)
from shared.records import now_timestamp  # noqa: E402
from shared.rounds import round_id  # noqa: E402
from tests.processes import ServiceProcess, start_service  # noqa: E402

PROTOS = REPO / "protos" / "rollout" / "v1"
#: The id of the memory artifact the run seeds (Fuzzer.seed_memory).
SEEDED_ARTIFACT = "mem_" + "f" * 32
SERVICES: dict[str, ServiceDescriptor] = {
    "writer": writer_pb2.DESCRIPTOR.services_by_name["RolloutWriter"],
    "reader": reader_pb2.DESCRIPTOR.services_by_name["RolloutReader"],
}
CODE_NAMES = frozenset(code.name for code in grpc.StatusCode)
#: Seconds a call may take before it counts as a hang (DEADLINE_EXCEEDED, a finding unless documented).
CALL_TIMEOUT_S = 60.0
#: The deadline of a WatchSession call (a watch of an open session ends only with it).
WATCH_TIMEOUT_S = 0.3
#: The way the closing sweep's calls are named (Fuzzer.sweep), and its valid requests per RPC.
SWEEP = "valid request (sweep)"
SWEEP_ATTEMPTS = 20
#: gRPC's own words when a status did not fit the metadata limits: the service's answer was lost.
METADATA_LIMIT = re.compile(r"metadata size exceeds")
#: The receive limit of the fuzzing client (replies of big sessions must fit).
RECEIVE_LIMIT = 256 * 1024 * 1024


# -- what the protos document ---------------------------------------------------------------


def documented_statuses(proto: Path) -> dict[str, frozenset[str]]:
    """RPC name -> the status codes its comment names (see the module doc), OK included."""
    every: set[str] = {"OK"}
    own: dict[str, set[str]] = {}
    aliases: dict[str, str] = {}
    removed: dict[str, set[str]] = {}
    comment: list[str] = []
    in_every = False  # inside an "Every RPC:" paragraph (it ends at an empty comment line)
    for line in proto.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if text.startswith("//"):
            comment.append(text[2:])
            in_every = (in_every and text != "//") or "Every RPC:" in text
            if in_every:
                every |= _codes(text)
            continue
        in_every = False
        match = re.match(r"rpc (\w+)\(", text)
        if match:
            name, block = match.group(1), " ".join(comment)
            own[name] = _codes(block)
            alias = re.search(r"(?:Same status codes as|exactly as)\s+(\w+)", block)
            if alias:
                aliases[name] = alias.group(1)
            removed[name] = {code for code in CODE_NAMES if re.search(rf"without {code}\b", block)}
        comment = []
    result: dict[str, frozenset[str]] = {}
    for name, codes in own.items():
        inherited = own.get(aliases.get(name, ""), set())
        result[name] = frozenset((codes | inherited | every) - removed[name])
    return result


def _codes(text: str) -> set[str]:
    return {code for code in CODE_NAMES if re.search(rf"\b{code}\b", text)}


# -- hostile values -------------------------------------------------------------------------

FIXED_STRINGS = [
    "",
    " ",
    "../../../../etc/passwd",
    "..",
    "/",
    "a/b",
    "\x00",
    "a\x00b",
    "\n",
    "\u202eevil",
    "%s%s%n",
    '{"seq":',
    "{}",
    "null",
    "resumed",
    "forked",
    "codex.resumed",
    "session_meta",
    "agent_checkpoint",
    "2016-12-31T23:59:60Z",
    "2016-12-31T23:59:60+01:00",
    "9999-12-31T23:59:59.999999999Z",
    "0000-01-01T00:00:00Z",
    "2026-W48-1T10:00:00Z",
    "20261130T101530Z",
    "2026-11-30T10:15:30",
    "2026-13-45T25:61:61Z",
    "1e400",
    "NaN",
    "01A22C15-89A6-7D3D-B5B7-165622BD350C",
    "01a22c15-89a6-7d3d-b5b7-165622bd350c ",
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "paused",
    "replayable",
    "x" * 65,
    "é" * 5000,
    "🙂" * 3000,
]
EDGE_INTS = [0, 1, -1, 2, 31, 32, 33, 1000, 1001, 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63)]


@dataclass
class Pool:
    """Real session ids the run made (fuzzed requests name them half the time) and its random source."""

    rng: random.Random
    sessions: list[str] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=lambda: ["call_1", "call_2"])

    def session_id(self) -> str:
        if self.sessions and self.rng.random() < 0.6:
            return self.rng.choice(self.sessions)
        return self.string()

    def string(self) -> str:
        rng = self.rng
        pick = rng.random()
        if pick < 0.35:
            return rng.choice(FIXED_STRINGS)
        if pick < 0.6:  # long: every quote of client input must be clipped to fit the metadata
            return rng.choice("xé🙂") * rng.choice([6 * 1024, 20_000, 100_000, 400_000])
        if pick < 0.7:
            return str(uuid.UUID(int=rng.getrandbits(128)))
        if pick < 0.8:
            return rng.choice(self.call_ids)
        alphabet = "abcXYZ019_-./:\\ \t\"'{}[]<>é中\u0301\u200b"
        return "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 5, 40, 300])))

    def json_value(self, depth: int = 0) -> Any:
        rng = self.rng
        pick = rng.random()
        if depth > 3 or pick < 0.3:
            return rng.choice([self.string(), 0, -1, 1.5, True, None, 2**53, math.nan, math.inf])
        if pick < 0.65:
            return {self.string()[:50]: self.json_value(depth + 1) for _ in range(rng.randint(0, 4))}
        return [self.json_value(depth + 1) for _ in range(rng.randint(0, 4))]


def _int_for(descriptor: FieldDescriptor, rng: random.Random) -> int:
    value = rng.choice(EDGE_INTS) if rng.random() < 0.7 else rng.randint(-3, 40)
    if descriptor.type in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return max(-(2**31), min(2**31 - 1, value))
    if descriptor.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return max(0, min(2**32 - 1, value))
    if descriptor.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return max(0, value)
    return value


def _scalar(descriptor: FieldDescriptor, pool: Pool) -> Any:
    rng = pool.rng
    kind = descriptor.type
    if kind == FieldDescriptor.TYPE_STRING:
        return pool.session_id() if descriptor.name.endswith("session_id") else pool.string()
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 3, 100]))
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_ENUM:
        declared = [value.number for value in descriptor.enum_type.values]
        return rng.choice([*declared, *declared, 99, -1])
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice([0.0, -1.5, 1e308, math.nan, math.inf])
    return _int_for(descriptor, rng)


def random_message(cls: type[Message], pool: Pool, depth: int = 0, fill: float = 0.5) -> Message:
    """A ``cls`` with a random subset of its fields set to random values (recursively)."""
    message = cls()
    for descriptor in cls.DESCRIPTOR.fields:
        if pool.rng.random() < fill:
            _set_field(message, descriptor, pool, depth)
    return message


def _set_field(message: Message, descriptor: FieldDescriptor, pool: Pool, depth: int) -> None:
    rng = pool.rng
    name = descriptor.name
    is_message = descriptor.type == FieldDescriptor.TYPE_MESSAGE
    if descriptor.is_repeated:
        count = rng.choice([0, 1, 2, 3, 40]) if depth < 2 else rng.choice([0, 1])
        container = getattr(message, name)
        for _ in range(count):
            if is_message:
                _fill_message(container.add(), pool, depth + 1)
            else:
                with contextlib.suppress(ValueError, TypeError):
                    container.append(_scalar(descriptor, pool))
        return
    if is_message:
        if depth < 4:
            _fill_message(getattr(message, name), pool, depth + 1)
        return
    with contextlib.suppress(ValueError, TypeError):  # e.g. an out-of-range value: left unset
        setattr(message, name, _scalar(descriptor, pool))


def _fill_message(target: Message, pool: Pool, depth: int) -> None:
    full_name = target.DESCRIPTOR.full_name
    if full_name == "google.protobuf.Struct":
        value = pool.json_value()
        if isinstance(value, dict):
            try:
                target.update(value)  # type: ignore[attr-defined]
            except (ValueError, TypeError):
                target.SetInParent()
        return
    if full_name in ("google.protobuf.ListValue", "google.protobuf.Value"):
        target.SetInParent()
        return
    target.SetInParent()
    target.CopyFrom(random_message(type(target), pool, depth))


# -- valid requests, made hostile -----------------------------------------------------------


def _record(pool: Pool) -> writer_pb2.AppendRecord:
    rng = pool.rng
    pick = rng.random()
    if pick < 0.4:
        return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=pool.string()[:200]))
    if pick < 0.55:
        call_id = f"call_{rng.randrange(10**6)}"
        pool.call_ids.append(call_id)
        message = records_pb2.ChatMessage(role="assistant", text="working")
        message.tool_calls.add(id=call_id, type="function", function=records_pb2.FunctionCall(name="run"))
        if rng.random() < 0.3:
            message.reasoning.content = "think"
        return writer_pb2.AppendRecord(message=message)
    if pick < 0.7:
        output = records_pb2.ChatMessage(role="tool", text="out", tool_call_id=rng.choice(pool.call_ids))
        return writer_pb2.AppendRecord(message=output)
    if pick < 0.85:
        event = records_pb2.Event(kind=rng.choice(["tool_result", "token_count", "resumed", "codex.x"]))
        return writer_pb2.AppendRecord(event=event)
    return writer_pb2.AppendRecord(compacted=records_pb2.Compacted(summary="so far"))


def valid_request(method: MethodDescriptor, pool: Pool) -> Message:
    """A plausible request for ``method`` on a real session (it may still be refused: a stopped
    session, an unanswered call, a fork point between a call and its output...)."""
    rng = pool.rng
    sid = rng.choice(pool.sessions) if pool.sessions else str(uuid.uuid4())
    name = method.name
    if name in ("Append", "AppendStream"):
        records = [_record(pool) for _ in range(rng.randint(1, 4))]
        return writer_pb2.AppendRequest(session_id=sid, records=records)
    if name == "CreateSession":
        return writer_pb2.CreateSessionRequest(
            agent_name=rng.choice(["", "coder"]), role=writer_pb2.SESSION_ROLE_ROOT, tenant="fuzz"
        )
    if name == "Stop":
        kind = rng.choice(list(records_pb2.StopKind.values())[1:])
        return writer_pb2.StopRequest(session_id=sid, stop_kind=kind, reason="fuzz")
    if name == "Resume":
        return writer_pb2.ResumeRequest(session_id=sid, force=rng.random() < 0.3)
    if name == "Fork":
        key = rng.choice(["", "", "", f"fork-{uuid.uuid4()}", "fork-taken"])  # the last collides after once
        return writer_pb2.ForkRequest(session_id=sid, at_seq=rng.randint(0, 12), session_key=key)
    if name == "DeleteSession":  # mostly ids of no session: the pool stays for the other RPCs
        return writer_pb2.DeleteSessionRequest(session_id=sid if rng.random() < 0.1 else str(uuid.uuid4()))
    if name == "GetShardMap":
        return writer_pb2.GetShardMapRequest()
    if name == "ImportSessions":
        return writer_pb2.ImportSessionsRequest(
            create=writer_pb2.CreateSessionRequest(
                session_id=str(uuid.uuid4()), role=writer_pb2.SESSION_ROLE_ROOT
            )
        )
    if name in ("GetReplay", "StreamReplay"):
        return reader_pb2.ReplayRequest(session_id=sid, token_budget=rng.choice([0, 10]))
    if name in ("GetMemoryView", "StreamMemoryView"):
        return reader_pb2.MemoryViewRequest(session_id=sid)
    if name == "VerifySession":
        return reader_pb2.VerifyRequest(session_id=sid)
    if name == "GetStopFacts":
        return reader_pb2.StopFactsRequest(session_id=sid)
    if name == "ListSessions":
        return reader_pb2.ListSessionsRequest(page_size=rng.choice([0, 5]), tenant=rng.choice(["", "fuzz"]))
    if name == "FindDelegations":
        return reader_pb2.FindDelegationsRequest(parent_session_id=sid)
    if name == "WatchSession":
        return reader_pb2.WatchSessionRequest(session_id=sid, from_seq=rng.randint(0, 6))
    if name == "GetRecentMessages":
        return reader_pb2.RecentMessagesRequest(
            session_id=sid, limit=rng.choice([0, 1, 10]), canonical=rng.random() < 0.5
        )
    if name == "SearchSessions":
        return reader_pb2.SearchSessionsRequest(
            query=rng.choice(["hi", "fuzz*", '"a b"', "é #1 OR NOT"]),
            cwd=rng.choice(["", "/"]),
            page_size=rng.choice([0, 1, 5]),
        )
    if name == "ResolveSession":
        return reader_pb2.ResolveSessionRequest(session_key=rng.choice([sid, "chat-1", "é" * 20]))
    if name == "ListRounds":
        return reader_pb2.ListRoundsRequest(session_id=sid, page_size=rng.choice([0, 1, 5]))
    if name == "GetRound":  # the first round of a seeded session, or a round that may not exist
        seeded = rng.choice(pool.sessions[:8]) if pool.sessions else sid
        return reader_pb2.GetRoundRequest(
            session_id=rng.choice([seeded, seeded, ""]), round_id=round_id(seeded, rng.choice([1, 1, 1, 3]))
        )
    if name == "ListPendingRounds":
        return reader_pb2.ListPendingRoundsRequest(
            tenant=rng.choice(["", "fuzz"]),
            since=rng.choice(["", "2026-01-01T00:00:00Z"]),
            limit=rng.choice([0, 1, 10]),
            idle_seconds=rng.choice([0, 1]),
        )
    if name == "ForgetMemories":  # of a session with no artifact, or an unknown scope: nothing goes
        if rng.random() < 0.5:
            return writer_pb2.ForgetMemoriesRequest(session_id=str(uuid.uuid4()), tenant="fuzz", by="fuzz")
        return writer_pb2.ForgetMemoriesRequest(scope_key=f"{rng.getrandbits(128):032x}", tenant="fuzz")
    if name == "GetMemories":
        return reader_pb2.GetMemoriesRequest(
            tenant=rng.choice(["", "fuzz"]),
            query=rng.choice(["", "fuzz", "é"]),
            limit=rng.choice([0, 1, 20]),
            as_of=rng.choice(["", "2026-01-01T00:00:00Z"]),
            include_superseded=rng.random() < 0.5,
            kinds=rng.choice([[], ["memory"], ["memory", "rollout_summary"]]),
        )
    if name == "ResolveProvenance":
        # The seeded artifact (an unknown id is NOT_FOUND: the mutated requests make those).
        return reader_pb2.ResolveProvenanceRequest(artifact_id=SEEDED_ARTIFACT, tenant="fuzz")
    raise ValueError(f"no valid request for {name}")


def _valid_bytes(method: MethodDescriptor, pool: Pool) -> bytes:
    return valid_request(method, pool).SerializeToString()


def mutated(request: Message, pool: Pool) -> Message:
    """``request`` with one to three of its fields (at any depth) set to hostile values."""
    rng = pool.rng
    for _ in range(rng.randint(1, 3)):
        target = request
        for _ in range(3):  # walk down into a set message field now and then
            nested = [
                d
                for d, _ in target.ListFields()
                if d.type == FieldDescriptor.TYPE_MESSAGE and not d.is_repeated
            ]
            if not nested or rng.random() < 0.5:
                break
            target = getattr(target, rng.choice(nested).name)
        fields = target.DESCRIPTOR.fields
        if fields:
            _set_field(target, rng.choice(fields), pool, 1)
    return request


def flipped(raw: bytes, rng: random.Random) -> bytes:
    """``raw`` with a few bytes flipped, or cut short."""
    if not raw or rng.random() < 0.3:
        return raw[: rng.randint(0, len(raw))]
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


# -- the run --------------------------------------------------------------------------------


@dataclass
class Finding:
    rpc: str
    way: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.rpc} ({self.way}): {self.code}: {self.message[:300]!r}"


class Fuzzer:
    """Sends the requests and keeps the counts and findings."""

    def __init__(self, writer: ServiceProcess, reader: ServiceProcess, rng: random.Random) -> None:
        self.pool = Pool(rng)
        self.rng = rng
        self.processes = {"writer": writer, "reader": reader}
        options = [("grpc.max_receive_message_length", RECEIVE_LIMIT), ("grpc.max_send_message_length", -1)]
        self.channels = {
            "writer": grpc.insecure_channel(writer.address, options=options),
            "reader": grpc.insecure_channel(reader.address, options=options),
        }
        self.allowed: dict[str, frozenset[str]] = {}
        for proto in ("writer.proto", "reader.proto"):
            self.allowed.update(documented_statuses(PROTOS / proto))
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.sweep_counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.findings: list[Finding] = []
        self.methods = [(kind, method) for kind, service in SERVICES.items() for method in service.methods]

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()

    def seed_sessions(self, count: int = 8) -> None:
        """Real sessions to aim at: messages, a tool pair, some stopped, one fork."""
        stub = self._stub("writer", "CreateSession")
        for index in range(count):
            request = writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT, tenant="fuzz")
            sid = writer_pb2.CreateSessionResponse.FromString(stub(request.SerializeToString())).session_id
            self.pool.sessions.append(sid)
            # A prompt at seq 1: the session's first round (GetRound aims at it).
            prompt = records_pb2.ChatMessage(role="user", text="fuzz", input_kind="trigger")
            first = writer_pb2.AppendRequest(
                session_id=sid, records=[writer_pb2.AppendRecord(message=prompt)]
            )
            self._stub("writer", "Append")(first.SerializeToString())
            records = [_record(self.pool) for _ in range(4)]
            append = writer_pb2.AppendRequest(
                session_id=sid, records=[r for r in records if r.WhichOneof("record") != "event"]
            )
            with contextlib.suppress(grpc.RpcError):  # an output for another session's call: refused
                self._stub("writer", "Append")(append.SerializeToString())
            if index % 2:
                stop = writer_pb2.StopRequest(
                    session_id=sid, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="x"
                )
                self._stub("writer", "Stop")(stop.SerializeToString())

    def seed_memory(self, data_dir: Path) -> None:
        """One memory artifact of tenant ``fuzz`` citing the prompt (seq 1) of a session of its own,
        so that GetMemories and ResolveProvenance have something to find. The session is kept
        out of the pool: no fuzzed request names it (a DeleteSession or ForgetMemories of it
        would take the artifact's source or the artifact away)."""
        request = writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT, tenant="fuzz")
        create = self._stub("writer", "CreateSession")
        session_id = writer_pb2.CreateSessionResponse.FromString(
            create(request.SerializeToString())
        ).session_id
        prompt = writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text="fuzz"))
        append = writer_pb2.AppendRequest(session_id=session_id, records=[prompt])
        self._stub("writer", "Append")(append.SerializeToString())
        _, path = DataRoot(data_dir).locate(session_id)
        records = [
            r for r in map(source_record_of_line, path.read_bytes().split(b"\n")[:-1]) if r is not None
        ]
        artifact = Artifact(
            SEEDED_ARTIFACT,
            ArtifactKind.MEMORY,
            "fuzz prompt",
            "fuzz",
            scope_of(records),
            now_timestamp(),
            Generator("fuzz", "fuzz/v1"),
            (stamp_source(session_id, records, [1]),),
        )
        MemoryStore(DataRoot(data_dir).memories_folder).commit_job(
            "fuzz", artifact.scope, session_id, 1, [artifact]
        )

    def _stub(
        self, kind: str, name: str, streaming: tuple[bool, bool] = (False, False)
    ) -> Callable[..., Any]:
        path = f"/{SERVICES[kind].full_name}/{name}"
        channel = self.channels[kind]
        factory = {
            (False, False): channel.unary_unary,
            (False, True): channel.unary_stream,
            (True, False): channel.stream_unary,
            (True, True): channel.stream_stream,
        }[streaming]
        return factory(path)  # no serializers: requests and replies travel as bytes

    def one(self) -> None:
        kind, method = self.rng.choice(self.methods)
        request_class = GetMessageClass(method.input_type)
        pick = self.rng.random()
        way = (
            "random bytes"
            if pick < 0.1
            else "random fields"
            if pick < 0.35
            else "hostile fields"
            if pick < 0.75
            else "flipped bytes"
            if pick < 0.9
            else "valid request"
        )

        def build() -> bytes:
            if way == "random bytes":
                return self.rng.randbytes(self.rng.choice([0, 1, 7, 64, 2000]))
            if way == "random fields":
                return random_message(request_class, self.pool).SerializeToString()
            if way == "hostile fields":
                return mutated(valid_request(method, self.pool), self.pool).SerializeToString()
            if way == "flipped bytes":
                return flipped(valid_request(method, self.pool).SerializeToString(), self.rng)
            return valid_request(method, self.pool).SerializeToString()

        self.call(kind, method, way, build)

    def call(self, kind: str, method: MethodDescriptor, way: str, build: Callable[[], bytes]) -> None:
        streaming = (method.client_streaming, method.server_streaming)
        stub = self._stub(kind, method.name, streaming)
        response_class = GetMessageClass(method.output_type)
        request: bytes | Iterator[bytes] = (
            iter([build() for _ in range(self.rng.choice([0, 1, 2, 5]))])
            if method.client_streaming
            else build()
        )
        code, message = "OK", ""
        try:
            # A watch of an open session streams until its deadline: a short one keeps the run moving.
            timeout = WATCH_TIMEOUT_S if method.name == "WatchSession" else CALL_TIMEOUT_S
            reply = stub(request, timeout=timeout)
            replies = list(reply) if method.server_streaming else [reply]
            for raw in replies:
                response_class.FromString(raw)
                if method.name in ("CreateSession", "Fork") and len(self.pool.sessions) < 200:
                    made = response_class.FromString(raw).session_id  # type: ignore[attr-defined]
                    if made:
                        self.pool.sessions.append(made)
        except grpc.RpcError as error:
            code, message = error.code().name, error.details() or ""
        except Exception as error:  # a reply that does not parse
            code, message = "BAD_REPLY", repr(error)
        rpc = f"{SERVICES[kind].name}/{method.name}"
        (self.sweep_counts if way == SWEEP else self.counts)[rpc][code] += 1
        if (
            code in ("INTERNAL", "UNKNOWN", "BAD_REPLY")
            or code not in self.allowed[method.name]
            or METADATA_LIMIT.search(message)
        ):
            self.findings.append(Finding(rpc, way, code, message))

    def sweep(self, attempts: int = SWEEP_ATTEMPTS) -> None:
        """Each RPC the random run never saw answer OK gets valid requests until one does (at most
        ``attempts``): a run whose draws missed an RPC's success still shows that it can succeed,
        whatever the seed. Counted apart (``sweep_counts``); findings as in the run. The valid
        requests aim at sessions seeded for the sweep: the run may have deleted, stopped or
        retracted from the ones it was seeded with (a GetRound of their first round then finds none)."""
        fuzzed = self.pool.sessions
        self.pool.sessions = []
        try:
            self.seed_sessions()
            for kind, method in self.methods:
                rpc = f"{SERVICES[kind].name}/{method.name}"
                for _ in range(attempts):
                    if self.counts[rpc].get("OK") or self.sweep_counts[rpc].get("OK"):
                        break
                    self.call(kind, method, SWEEP, partial(_valid_bytes, method, self.pool))
        finally:
            self.pool.sessions = fuzzed + self.pool.sessions

    def crashed(self) -> list[str]:
        return [kind for kind, process in self.processes.items() if process.process.poll() is not None]

    def verify_all(self) -> None:
        """Every session file the run left verifies: nothing partial or forged was written."""
        verify = self._stub("reader", "VerifySession")
        listing = self._stub("reader", "ListSessions")
        token, ids = "", []
        while True:
            raw = listing(
                reader_pb2.ListSessionsRequest(page_size=1000, page_token=token).SerializeToString()
            )
            page = reader_pb2.ListSessionsResponse.FromString(raw)
            ids += [summary.session_id for summary in page.sessions]
            token = page.next_page_token
            if not token:
                break
        for session_id in ids:
            report = reader_pb2.VerifyReport.FromString(
                verify(reader_pb2.VerifyRequest(session_id=session_id).SerializeToString())
            )
            if not report.ok:
                self.findings.append(
                    Finding(
                        "RolloutReader/VerifySession", "after the run", "NOT_OK", "; ".join(report.findings)
                    )
                )


def run(requests: int, seed: int, data_dir: Path, log_dir: Path) -> tuple[dict[str, Any], int]:
    """The whole run; returns (summary, exit status)."""
    rng = random.Random(seed)
    try:
        writer = start_service("writer", data_dir, log_dir / "writer.log")
        reader = start_service("reader", data_dir, log_dir / "reader.log")
    except RuntimeError as exc:
        return {"error": str(exc)}, 2
    fuzzer = Fuzzer(writer, reader, rng)
    started = time.perf_counter()
    crashed: list[str] = []
    try:
        fuzzer.seed_sessions()
        fuzzer.seed_memory(data_dir)
        for _ in range(requests):
            fuzzer.one()
            crashed = fuzzer.crashed()
            if crashed:
                break
        if not crashed:
            fuzzer.sweep()
            crashed = fuzzer.crashed()
        if not crashed:
            fuzzer.verify_all()
    finally:
        fuzzer.close()
        stopped = {"writer": writer.stop(), "reader": reader.stop()}
    crashed += [f"{kind} did not stop cleanly (exit {code})" for kind, code in stopped.items() if code != 0]
    sent = sum(sum(counter.values()) for counter in fuzzer.counts.values())
    summary = {
        "seed": seed,
        "requests": sent,
        "seconds": round(time.perf_counter() - started, 1),
        "statuses": {rpc: dict(counter) for rpc, counter in sorted(fuzzer.counts.items())},
        "valid_sweep": {
            rpc: dict(counter) for rpc, counter in sorted(fuzzer.sweep_counts.items()) if counter
        },
        "crashes": crashed,
        "findings": [str(finding) for finding in fuzzer.findings],
        "internal_or_unknown": sum(1 for f in fuzzer.findings if f.code in ("INTERNAL", "UNKNOWN")),
        "undocumented": sum(1 for f in fuzzer.findings if f.code not in ("INTERNAL", "UNKNOWN")),
    }
    return summary, 1 if crashed or fuzzer.findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests to send (default 2000)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1_000_000
    with tempfile.TemporaryDirectory(prefix="rollout-fuzz-") as scratch:
        data_dir = Path(scratch) / "data"
        data_dir.mkdir()
        summary, status = run(args.requests, seed, data_dir, Path(scratch))
    command = f"{Path(sys.executable).name} scripts/fuzz_rpcs.py --requests {args.requests} --seed {seed}"
    if args.json:
        print(json.dumps({"command": command, **summary}))
        return status
    print(f"command: {command}")
    if "error" in summary:
        print(f"the services did not start: {summary['error']}")
        return status
    print(f"{summary['requests']} requests in {summary['seconds']} s")
    for rpc, counts in summary["statuses"].items():
        print(f"  {rpc:40s} " + ", ".join(f"{code} {n}" for code, n in sorted(counts.items())))
    print(
        f"crashes: {len(summary['crashes'])}  INTERNAL/UNKNOWN: {summary['internal_or_unknown']}"
        f"  undocumented statuses and other findings: {summary['undocumented']}"
    )
    for line in [*summary["crashes"], *summary["findings"][:50]]:
        print(f"  - {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
