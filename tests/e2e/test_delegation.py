"""A parent delegates three times; lookups work both ways and each child's facts are its own."""

from __future__ import annotations

import grpc
import pytest

from rollout.v1 import reader_pb2, records_pb2, writer_pb2
from shared.layout import DataRoot


def call(call_id: str) -> writer_pb2.AppendRecord:
    message = records_pb2.ChatMessage(role="assistant")
    message.tool_calls.add(
        id=call_id, type="function", function=records_pb2.FunctionCall(name="delegate", arguments="{}")
    )
    return writer_pb2.AppendRecord(message=message)


def test_three_delegations_two_with_the_same_agent_name(writer, reader) -> None:
    """Children are found from the parent (all, or by delegation id) and the parent from each child."""
    parent = writer.CreateSession(
        writer_pb2.CreateSessionRequest(agent_name="director", role=writer_pb2.SESSION_ROLE_ROOT)
    ).session_id
    writer.Append(
        writer_pb2.AppendRequest(session_id=parent, records=[call("call_1"), call("call_2"), call("call_3")])
    )
    plan = [("call_1", "coder", "paused"), ("call_2", "coder", "failed"), ("call_3", "reviewer", "cancelled")]
    children = {}
    for delegation_id, agent, kind in plan:
        child = writer.CreateSession(
            writer_pb2.CreateSessionRequest(
                agent_name=agent, parent_session_id=parent, delegation_id=delegation_id
            )
        ).session_id
        children[delegation_id] = child
        writer.Stop(
            writer_pb2.StopRequest(
                session_id=child,
                stop_kind=records_pb2.StopKind.Value("STOP_KIND_" + kind.upper()),
                reason=f"{agent} {kind}",
            )
        )

    found = reader.FindDelegations(reader_pb2.FindDelegationsRequest(parent_session_id=parent)).delegations
    assert {(d.delegation_id, d.child_session_id) for d in found} == set(children.items())
    assert sorted(d.agent_name for d in found) == ["coder", "coder", "reviewer"]

    second = reader.FindDelegations(
        reader_pb2.FindDelegationsRequest(parent_session_id=parent, delegation_id="call_2")
    ).delegations
    assert [d.child_session_id for d in second] == [children["call_2"]]

    expected = {"call_1": ("paused", True), "call_2": ("failed", False), "call_3": ("cancelled", True)}
    for delegation_id, child in children.items():
        (link,) = reader.FindDelegations(
            reader_pb2.FindDelegationsRequest(child_session_id=child)
        ).delegations
        assert link.parent_session_id == parent
        assert link.delegation_id == delegation_id
        kind, replayable = expected[delegation_id]
        facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=child))
        assert facts.stop_kind == kind
        assert facts.resume.replayable is replayable, facts.resume.reason
        assert link.stop_facts.stop_kind == kind

    listed = reader.ListSessions(reader_pb2.ListSessionsRequest(parent_session_id=parent)).sessions
    assert {s.session_id for s in listed} == set(children.values())


@pytest.mark.parametrize(
    ("fields", "missing"),
    [
        pytest.param({"agent_name": "coder"}, "role", id="an-agent-name-alone"),
        pytest.param({"agent_name": "coder", "parent": True}, "delegation_id", id="no-delegation-id"),
        pytest.param({"agent_name": "coder", "delegation_id": "call_1"}, "parent_session_id", id="no-parent"),
        pytest.param(
            {"role": writer_pb2.SESSION_ROLE_CHILD, "parent": True},
            "delegation_id",
            id="child-without-delegation",
        ),
        pytest.param(
            {"role": writer_pb2.SESSION_ROLE_ROOT, "agent_name": "lead", "parent": True},
            "parent_session_id",
            id="root-with-a-parent",
        ),
    ],
)
def test_a_session_neither_clearly_root_nor_a_whole_child_is_refused_at_creation(
    writer, reader, fields, missing
) -> None:
    """Root or child is decided at creation: what is missing or contradictory is named, and nothing is created."""
    parent = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    if fields.pop("parent", False):
        fields["parent_session_id"] = parent
    with pytest.raises(grpc.RpcError) as caught:
        writer.CreateSession(writer_pb2.CreateSessionRequest(**fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(f"{missing}:")
    listed = reader.ListSessions(reader_pb2.ListSessionsRequest()).sessions
    assert [summary.session_id for summary in listed] == [parent]


def test_a_named_root_agent_pauses_and_resumes(writer, reader) -> None:
    """A top-level agent that names itself and says it is a root may be resumed after a pause."""
    sid = writer.CreateSession(
        writer_pb2.CreateSessionRequest(agent_name="lead", role=writer_pb2.SESSION_ROLE_ROOT)
    ).session_id
    writer.Stop(writer_pb2.StopRequest(session_id=sid, stop_kind=records_pb2.STOP_KIND_PAUSED))
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=sid))
    assert facts.resume.replayable, facts.resume.reason
    assert writer.Resume(writer_pb2.ResumeRequest(session_id=sid)).previous_stop_kind == "paused"


def test_a_child_without_coordinates_is_never_taken_for_a_root(writer, reader) -> None:
    """A child said to have no known parent is not replayable as-is, and Resume refuses it without force."""
    child = writer.CreateSession(
        writer_pb2.CreateSessionRequest(
            agent_name="coder", role=writer_pb2.SESSION_ROLE_CHILD_WITHOUT_COORDINATES
        )
    ).session_id
    writer.Stop(writer_pb2.StopRequest(session_id=child, stop_kind=records_pb2.STOP_KIND_PAUSED))
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=child))
    assert not facts.resume.replayable
    assert "no delegation coordinates" in facts.resume.reason
    with pytest.raises(grpc.RpcError) as caught:
        writer.Resume(writer_pb2.ResumeRequest(session_id=child))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_a_parent_that_is_not_in_the_ledger_is_refused(writer, data_dir) -> None:
    """A child naming an unknown parent is refused, and no delegation folder is made for it."""
    ghost = "01938a4b-0000-7000-8000-000000000000"
    with pytest.raises(grpc.RpcError) as caught:
        writer.CreateSession(
            writer_pb2.CreateSessionRequest(
                agent_name="coder", parent_session_id=ghost, delegation_id="call_1"
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("parent_session_id:")
    assert not DataRoot(data_dir).delegation_marker(ghost, "call_1", ghost).parent.exists()


def test_find_delegations_needs_a_direction(reader) -> None:
    """FindDelegations without a parent or child id is INVALID_ARGUMENT."""
    with pytest.raises(grpc.RpcError) as caught:
        reader.FindDelegations(reader_pb2.FindDelegationsRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
