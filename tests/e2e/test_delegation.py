"""A parent delegates three times; lookups work both ways and each child's facts are its own."""

from __future__ import annotations

import grpc
import pytest

from rollout.v1 import reader_pb2, records_pb2, writer_pb2


def call(call_id: str) -> writer_pb2.AppendRecord:
    message = records_pb2.ChatMessage(role="assistant")
    message.tool_calls.add(
        id=call_id, type="function", function=records_pb2.FunctionCall(name="delegate", arguments="{}")
    )
    return writer_pb2.AppendRecord(message=message)


def test_three_delegations_two_with_the_same_agent_name(writer, reader) -> None:
    """Children are found from the parent (all, or by delegation id) and the parent from each child."""
    parent = writer.CreateSession(writer_pb2.CreateSessionRequest(agent_name="director")).session_id
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


def test_child_without_coordinates_is_not_taken_for_a_root(writer, reader) -> None:
    """A child created without a delegation id reports empty coordinates and is not replayable."""
    parent = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    child = writer.CreateSession(
        writer_pb2.CreateSessionRequest(agent_name="coder", parent_session_id=parent)
    ).session_id
    writer.Stop(writer_pb2.StopRequest(session_id=child, stop_kind=records_pb2.STOP_KIND_PAUSED))
    (link,) = reader.FindDelegations(reader_pb2.FindDelegationsRequest(child_session_id=child)).delegations
    assert link.parent_session_id == parent
    assert link.delegation_id == ""
    facts = reader.GetStopFacts(reader_pb2.StopFactsRequest(session_id=child))
    assert not facts.resume.replayable
    assert "no delegation coordinates" in facts.resume.reason


def test_find_delegations_needs_a_direction(reader) -> None:
    """FindDelegations without a parent or child id is INVALID_ARGUMENT."""
    with pytest.raises(grpc.RpcError) as caught:
        reader.FindDelegations(reader_pb2.FindDelegationsRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
