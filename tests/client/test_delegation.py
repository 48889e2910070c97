"""Delegation through context (seed rule 13): children pick up the parent session id and the
delegating tool call id from contextvars, in blocking code and in asyncio tasks; a session that
names an agent outside any delegation must say it is a root."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from rollout.v1 import writer_pb2, writer_pb2_grpc
from rollout_client import (
    AsyncRolloutClient,
    RolloutClient,
    RootNotDeclaredError,
    assistant,
    current_delegation,
    delegation,
    tool_call,
)
from tests.client.conftest import TEST_RETRY


def test_a_parent_delegates_three_times_from_blocking_code_and_asyncio_tasks(
    client, writer_process, reader_process
) -> None:
    """Three children (two with the same agent name), made in sync code and in tasks; lookups work both ways."""
    parent = client.create_session()
    parent.append(
        assistant(tool_calls=[tool_call("call_1", "delegate"), tool_call("call_2", "delegate")]),
        assistant(tool_calls=[tool_call("call_3", "delegate")]),
    )
    children: dict[str, str] = {}
    with delegation(parent=parent, tool_call_id="call_1"):
        children["call_1"] = client.create_session("coder").id  # blocking code

    async def in_tasks() -> None:
        async with AsyncRolloutClient(
            writer_process.address, reader_process.address, retry=TEST_RETRY
        ) as aclient:

            async def child(agent: str) -> str:
                await asyncio.sleep(0)  # runs after the block below has been left
                return (await aclient.create_session(agent)).id

            with delegation(parent=parent.id, tool_call_id="call_2"):
                coder = asyncio.create_task(child("coder"))
                # a blocking client from a task, through a thread that copies the context
                blocking_reviewer = asyncio.to_thread(client.create_session, "reviewer")
                reviewer_id = (await blocking_reviewer).id
            with delegation(parent=parent.id, tool_call_id="call_3"):
                reviewer = asyncio.create_task(child("reviewer"))
            assert current_delegation() is None
            children["call_2"] = await coder
            children["call_3"] = await reviewer
            children["call_2 reviewer"] = reviewer_id

    asyncio.run(in_tasks())

    found = client.find_children(parent.id)
    assert sorted((d.delegation_id, d.child_session_id) for d in found) == sorted(
        (key.split()[0], child_id) for key, child_id in children.items()
    )
    assert sorted(d.agent_name for d in found) == ["coder", "coder", "reviewer", "reviewer"]
    assert {d.child_session_id for d in client.find_children(parent.id, "call_2")} == {
        children["call_2"],
        children["call_2 reviewer"],
    }
    for key, child_id in children.items():
        link = client.find_parent(child_id)
        assert (link.parent_session_id, link.delegation_id) == (parent.id, key.split()[0])


class RecordingWriter(writer_pb2_grpc.RolloutWriterServicer):
    """A stand-in writer that keeps every CreateSessionRequest (to see the role the client sends)."""

    def __init__(self) -> None:
        self.requests: list[writer_pb2.CreateSessionRequest] = []

    def CreateSession(self, request, context):
        self.requests.append(request)
        return writer_pb2.CreateSessionResponse(session_id=request.session_id, next_seq=1)


@pytest.fixture
def recorded() -> Iterator[tuple[RolloutClient, RecordingWriter]]:
    writer = RecordingWriter()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    writer_pb2_grpc.add_RolloutWriterServicer_to_server(writer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with RolloutClient(f"127.0.0.1:{port}", "127.0.0.1:1") as client:
        yield client, writer
    server.stop(None)


def _role(request: writer_pb2.CreateSessionRequest) -> tuple[str, str, str]:
    return writer_pb2.SessionRole.Name(request.role), request.parent_session_id, request.delegation_id


def test_the_role_is_always_said_explicitly(recorded) -> None:
    """Inside a delegation: CHILD with both coordinates; outside: ROOT only when asked, never by default."""
    client, writer = recorded
    with delegation(parent="p-1", tool_call_id="call_7"):
        client.create_session("coder")
        client.create_session("coder", root=True)  # an explicit root inside a delegation stays a root
    client.create_session("director", root=True)
    client.create_session("orphan", root=False)
    client.create_session()
    assert [_role(r) for r in writer.requests] == [
        ("SESSION_ROLE_CHILD", "p-1", "call_7"),
        ("SESSION_ROLE_ROOT", "", ""),
        ("SESSION_ROLE_ROOT", "", ""),
        ("SESSION_ROLE_CHILD_WITHOUT_COORDINATES", "", ""),
        ("SESSION_ROLE_UNSPECIFIED", "", ""),
    ]


def test_an_agent_session_outside_any_delegation_must_say_root(recorded) -> None:
    """create_session('coder') outside a delegation raises RootNotDeclaredError and sends nothing."""
    client, writer = recorded
    with pytest.raises(RootNotDeclaredError, match="root=True"):
        client.create_session("coder")
    assert writer.requests == []


def test_nested_delegations_restore_the_outer_one(recorded) -> None:
    """The innermost delegation wins; leaving it restores the outer coordinates, then none."""
    client, writer = recorded
    with delegation(parent="p-outer", tool_call_id="call_a"):
        with delegation(parent="p-inner", tool_call_id="call_b"):
            client.create_session("inner")
        client.create_session("outer")
    assert current_delegation() is None
    assert [_role(r)[1:] for r in writer.requests] == [("p-inner", "call_b"), ("p-outer", "call_a")]


def test_plain_threads_do_not_inherit_the_delegation_but_a_copied_context_does(recorded) -> None:
    """A thread started inside a delegation sees none; contextvars.copy_context().run carries it."""
    client, writer = recorded
    outcomes: list[object] = []

    def work() -> None:
        try:
            outcomes.append(client.create_session("helper").id)
        except RootNotDeclaredError as exc:
            outcomes.append(exc)

    with delegation(parent="p-2", tool_call_id="call_t"):
        plain = threading.Thread(target=work)
        copied = threading.Thread(target=contextvars.copy_context().run, args=(work,))
    for thread in (plain, copied):
        thread.start()
        thread.join()
    assert isinstance(outcomes[0], RootNotDeclaredError)
    assert [_role(r) for r in writer.requests] == [("SESSION_ROLE_CHILD", "p-2", "call_t")]


@pytest.mark.parametrize(("parent", "call_id"), [("", "call_1"), ("p", "")])
def test_half_coordinates_are_refused(parent, call_id) -> None:
    """delegation() with an empty parent id or tool call id raises ValueError."""
    with pytest.raises(ValueError, match="needs"), delegation(parent=parent, tool_call_id=call_id):
        pass
