"""The reader's GetMemories and ResolveProvenance (docs/memory.md §6), through the SDK and raw
gRPC: the views over the wire equal the reading functions' (the functions are their body),
a resolution after a fork returns the source's exact messages, and bad requests get
precise statuses."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import grpc
import pytest

from rollout.v1 import reader_pb2, reader_pb2_grpc
from rollout_client import (
    AsyncRolloutClient,
    InvalidArgumentError,
    NotFoundError,
    assistant,
    tool_call,
    tool_result,
    user,
)
from rollout_client.memories import render_memory_block
from rollout_memory import client_source_reader, get_memories, resolve_provenance
from shared.layout import DataRoot
from shared.memory import ArtifactKind, Scope, SourceKind
from shared.memory_wire import view_from_proto
from tests.conftest import run_rollout
from tests.memory.conftest import CWD, TENANT
from tests.memory.test_acceptance import price_responder, seq_of

SCOPE = Scope(cwd=CWD, agent="director")


def stopped(client, *messages):
    session = client.create_session("director", root=True, tenant=TENANT, cwd=CWD)
    seqs = session.append(*messages).seqs
    session.stop("completed", "done")
    return session, seqs


@pytest.fixture
def priced(client, pipeline_for):
    """Two stopped sessions distilled: $20, then $25 superseding it (with rollout summaries)."""
    pipeline, _ = pipeline_for(price_responder)
    first, _ = stopped(client, user("The Pro plan costs $20 a month."), assistant("Noted."))
    pipeline.run()
    second, _ = stopped(client, user("Update: the Pro plan now costs $25 a month."), assistant("Ok."))
    pipeline.run()
    return first, second


def ageless(views):
    return [dataclasses.replace(view, age_seconds=0.0) for view in views]


def test_views_over_the_wire_equal_the_functions(client, store, priced):
    """Current, superseded, summaries, a query, a limit, a scope: each GetMemories answer equals
    get_memories of the same arguments (ages aside, counted at two moments)."""
    cases = [
        {},
        {"include_superseded": True},
        {"include_superseded": True, "kinds": (ArtifactKind.MEMORY, ArtifactKind.ROLLOUT_SUMMARY)},
        {"query": "pro PLAN", "include_superseded": True},
        {"limit": 1, "include_superseded": True},
        {"scope": SCOPE, "include_superseded": True},
        {"scope": Scope(cwd="/elsewhere"), "include_superseded": True},
    ]
    for arguments in cases:
        wire = client.memories(**arguments, tenant=TENANT)
        local = get_memories(store, tenant=TENANT, scope=arguments.pop("scope", None), **arguments)
        assert ageless(wire) == ageless(local), arguments
        assert wire.damaged == {}
    everything = client.memories(include_superseded=True, tenant=TENANT)
    assert [view.artifact.text for view in everything] == [
        "The Pro plan costs $25 a month.",
        "The Pro plan costs $20 a month.",
    ]
    old = everything[1]
    assert old.superseded_by == everything[0].artifact.artifact_id
    assert old.superseded_evidence is not None
    block = render_memory_block(everything)
    current, _, superseded = block.partition("Superseded")
    assert "$25" in current
    assert "$20" not in current
    assert "$20" in superseded
    assert "take precedence" in block


def test_as_of_over_the_wire_equals_the_function_exactly(client, store, priced):
    """As of a moment between the two commits the $20 is current and the $25 absent; as of the
    second artifact's creation both are there, the $20 superseded: the views (ages included,
    counted from as_of) equal get_memories' exactly."""
    everything = get_memories(store, tenant=TENANT, scope=None, include_superseded=True)
    newest, oldest = everything[0].artifact.created_at, everything[-1].artifact.created_at
    for as_of in (oldest, newest):
        for superseded in (False, True):
            wire = client.memories(as_of=as_of, include_superseded=superseded, tenant=TENANT)
            local = get_memories(store, tenant=TENANT, scope=None, as_of=as_of, include_superseded=superseded)
            assert wire == local, (as_of, superseded)
    [then] = client.memories(as_of=oldest, tenant=TENANT)
    assert then.artifact.text == "The Pro plan costs $20 a month."
    assert then.superseded_by is None
    assert then.age_seconds == 0.0


def test_resolving_after_a_fork_returns_the_sources_exact_messages(client, store, pipeline_for):
    """A memory citing a user message and a tool output: after a fork of the source, the reader's
    ResolveProvenance returns the source's own messages, byte for byte as stored, with their
    stamped kinds, exactly as resolve_provenance through WatchSession does."""

    def responder(request):
        if not any("Lyon" in str(m["text"]) for m in request["messages"]):
            return {"memories": []}
        return {
            "memories": [
                {
                    "text": "Orders ship from Lyon.",
                    "cites": [seq_of(request, "warehouse"), seq_of(request, "Lyon")],
                }
            ]
        }

    pipeline, _ = pipeline_for(responder)
    session, seqs = stopped(
        client,
        user("Where is our warehouse?"),
        assistant(tool_calls=[tool_call("c1", "lookup")]),
        tool_result("c1", "warehouse: Lyon"),
    )
    pipeline.run()
    [view] = client.memories(tenant=TENANT)
    fork = session.fork(at_seq=seqs[2])
    fork.append(user("And now something else entirely."))
    fork.stop("completed", "done")

    resolved = client.resolve_provenance(view.artifact.artifact_id, tenant=TENANT)
    assert resolved.problems == ()
    assert [(m.session_id, m.seq, m.kind) for m in resolved.messages] == [
        (session.id, seqs[0], SourceKind.USER),
        (session.id, seqs[2], SourceKind.TOOL_OUTPUT),
    ]
    stored = {record.seq: record.line for record in session.watch(0)}
    assert [m.line for m in resolved.messages] == [stored[seqs[0]], stored[seqs[2]]]
    assert [m.payload["content"] for m in resolved.messages] == ["Where is our warehouse?", "warehouse: Lyon"]
    assert resolved == resolve_provenance(client_source_reader(client), tenant=TENANT, artifact=view.artifact)
    pipeline.run()  # the sweep marks the artifact: its source was forked
    marked = client.memories(tenant=TENANT, kinds=tuple(ArtifactKind))
    assert ageless(marked) == ageless(
        get_memories(store, tenant=TENANT, scope=None, kinds=tuple(ArtifactKind))
    )
    assert [mark.value for mark in marked[-1].marks] == ["forked"]


def test_a_changed_source_is_a_problem_not_a_failure(ledger, client, store, pipeline_for):
    """A cited line whose bytes changed on disk: ResolveProvenance answers, naming the problem
    (source_changed) as the function does."""

    def responder(request):
        return {"memories": [{"text": "Remember the code.", "cites": [request["messages"][0]["seq"]]}]}

    pipeline, _ = pipeline_for(responder)
    session, _ = stopped(client, user("the code is 1234"))
    pipeline.run()
    [view] = client.memories(tenant=TENANT)
    _, path = DataRoot(ledger.data_dir).locate(session.id)
    path.write_bytes(path.read_bytes().replace(b"1234", b"9999"))
    resolved = client.resolve_provenance(view.artifact.artifact_id, tenant=TENANT)
    assert [problem.split(":")[0] for problem in resolved.problems] == ["source_changed"]
    assert resolved == resolve_provenance(client_source_reader(client), tenant=TENANT, artifact=view.artifact)


def test_bad_requests_get_precise_statuses(ledger, client, priced):
    """A limit out of range, an as_of that is not RFC 3339, an unknown kind, an empty artifact id:
    INVALID_ARGUMENT naming the field; an unknown artifact id: NOT_FOUND."""
    for arguments, field in (
        ({"limit": -1}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": 2**40}, "limit"),
        ({"as_of": "yesterday"}, "as_of"),
        ({"kinds": ("facts",)}, "kinds"),
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            client.memories(**arguments, tenant=TENANT)
        assert caught.value.message.startswith(f"{field}: "), caught.value.message
    with pytest.raises(InvalidArgumentError, match="artifact_id"):
        client.resolve_provenance("", tenant=TENANT)
    with pytest.raises(NotFoundError, match="memory artifact 'mem_0000' not found"):
        client.resolve_provenance("mem_0000", tenant=TENANT)
    with grpc.insecure_channel(ledger.reader) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetMemories(reader_pb2.GetMemoriesRequest(limit=5000), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "0..1000" in caught.value.details()
        reply = stub.GetMemories(reader_pb2.GetMemoriesRequest(tenant=TENANT), timeout=30)
        assert [view_from_proto(view).artifact.text for view in reply.memories] == [
            "The Pro plan costs $25 a month."
        ]
        # Without authentication an empty tenant is "default", whose store is empty here.
        assert not stub.GetMemories(reader_pb2.GetMemoriesRequest(), timeout=30).memories


def test_the_async_client_reads_the_same(ledger, client, priced):
    """AsyncRolloutClient.memories and resolve_provenance answer as the blocking client's."""
    blocking = client.memories(include_superseded=True, tenant=TENANT)

    async def read():
        async with AsyncRolloutClient(ledger.writer, ledger.reader) as aio:
            views = await aio.memories(include_superseded=True, tenant=TENANT)
            return views, await aio.resolve_provenance(views[0].artifact.artifact_id, tenant=TENANT)

    views, resolved = asyncio.run(read())
    assert ageless(views) == ageless(blocking)
    assert resolved == client.resolve_provenance(blocking[0].artifact.artifact_id, tenant=TENANT)


def test_the_command_line_reads_through_the_reader(ledger, client, priced):
    """`rollout memory ls | show` with a reader address read through the reader (no --data-dir)."""
    reader = ("--reader", ledger.reader, "--tenant", TENANT)
    listed = run_rollout("memory", "ls", *reader, "--superseded")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert "The Pro plan costs $25 a month." in lines[0]
    assert "superseded-by:" in lines[1]
    assert "$20" in lines[1]
    artifact_id = lines[0].split()[0]
    shown = run_rollout("memory", "show", artifact_id, *reader, "--resolve")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["artifact"]["artifact_id"] == artifact_id
    assert [m["message"]["content"] for m in document["messages"]] == [
        "Update: the Pro plan now costs $25 a month."
    ]
    bad = run_rollout("memory", "ls", *reader, "--as-of", "yesterday")
    assert bad.returncode == 1
    assert "INVALID_ARGUMENT: as_of" in bad.stderr
    missing = run_rollout("memory", "show", "mem_0000", *reader)
    assert missing.returncode == 1
    assert "NOT_FOUND" in missing.stderr


def test_the_writer_forgets_a_session_or_a_scope_and_records_it(client, store, priced):
    """ForgetMemories by session removes exactly what store.forget would (artifacts citing it),
    records who asked, and keeps the watermark; by scope the rest goes; forgetting again
    removes nothing more; bad requests get INVALID_ARGUMENT naming the field."""
    first, second = priced
    before = get_memories(
        store, tenant=TENANT, scope=None, include_superseded=True, kinds=tuple(ArtifactKind)
    )
    citing_first = sorted(
        v.artifact.artifact_id for v in before if v.artifact.sources[0].session_id == first.id
    )
    assert citing_first
    assert client.forget_memories(session_id=first.id, tenant=TENANT, by="ops") == citing_first
    assert client.forget_memories(session_id=first.id, tenant=TENANT) == []
    left = get_memories(store, tenant=TENANT, scope=None, include_superseded=True, kinds=tuple(ArtifactKind))
    assert {v.artifact.artifact_id for v in left} == {v.artifact.artifact_id for v in before} - set(
        citing_first
    )
    [forgotten, *_] = store.read_scope(TENANT, SCOPE.key()).forgotten
    assert (forgotten["by"], forgotten["what"], forgotten["artifact_ids"]) == (
        "ops",
        {"session_id": first.id},
        citing_first,
    )
    assert store.watermarks(TENANT)[first.id] >= 0  # not distilled again
    assert client.memories(tenant="other") == []
    assert client.forget_memories(scope_key=SCOPE.key(), tenant="other") == []  # another tenant's store
    assert sorted(client.forget_memories(scope_key=SCOPE.key(), tenant=TENANT)) == sorted(
        v.artifact.artifact_id for v in left
    )
    assert client.memories(include_superseded=True, kinds=tuple(ArtifactKind), tenant=TENANT) == []
    for arguments, field in (
        ({"session_id": "not-a-session"}, "session_id"),
        ({"scope_key": "XYZ"}, "scope_key"),
        ({"session_id": second.id, "by": "x" * 201}, "by"),
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            client.forget_memories(**arguments, tenant=TENANT)
        assert caught.value.message.startswith(f"{field}: "), caught.value.message
    with pytest.raises(ValueError, match="session_id or scope_key"):
        client.forget_memories(tenant=TENANT)


def test_the_command_line_forgets_through_the_writer(ledger, client, store, priced):
    """`rollout memory forget --writer` forgets through the writer and prints the ids."""
    first, _ = priced
    forgot = run_rollout(
        "memory",
        "forget",
        "--writer",
        ledger.writer,
        "--tenant",
        TENANT,
        "--session",
        first.id,
        "--by",
        "ops",
    )
    assert forgot.returncode == 0, forgot.stderr
    assert forgot.stdout.startswith("forgot 2 artifact(s)")
    assert store.read_scope(TENANT, SCOPE.key()).forgotten[0]["by"] == "ops"


def test_damaged_lines_are_reported_over_the_wire_and_skipped(ledger, client, store, priced):
    """A line of a scope file that holds no entry is skipped by GetMemories and named in its
    reply (by scope key and line number); `ls` through the reader warns, and so does local `ls`."""
    before = client.memories(include_superseded=True, tenant=TENANT)
    path = store.scope_path(TENANT, SCOPE.key())
    lines = path.read_bytes().count(b"\n")
    with path.open("ab") as scope_file:
        scope_file.write(b"not an entry\n")
    found = client.memories(include_superseded=True, tenant=TENANT)
    assert ageless(found) == ageless(before)
    assert found.damaged == {SCOPE.key(): (lines + 1,)}
    listed = run_rollout("memory", "ls", "--reader", ledger.reader, "--tenant", TENANT)
    assert listed.returncode == 0, listed.stderr
    assert f"warning: scope {SCOPE.key()}: lines [{lines + 1}] hold no readable entry" in listed.stderr
    local = run_rollout("memory", "ls", "--data-dir", str(ledger.data_dir), "--tenant", TENANT)
    assert local.returncode == 0, local.stderr
    assert f"warning: scope {SCOPE.key()}: lines [{lines + 1}] hold no readable entry" in local.stderr
