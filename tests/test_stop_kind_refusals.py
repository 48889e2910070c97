"""A stop kind outside the vocabulary is refused with the declared kinds listed, wherever it is
given: to shared's parser, to either client's ``stop``, over gRPC, on the command line."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from click.testing import CliRunner

from rollout.v1 import records_pb2, writer_pb2
from rollout_cli.main import cli
from rollout_client import AsyncRolloutClient, RolloutClient
from shared.stop_kinds import StopKind, stop_kind_named

UNKNOWN_ID = "01998c6e-0000-7000-8000-000000000000"


def every_kind_is_listed(message: str, names: list[str]) -> bool:
    return all(name in message for name in names)


@pytest.mark.parametrize("raw", ["done", "PAUSED", " paused", ""])
def test_the_parser_names_what_it_got_and_lists_every_kind(raw) -> None:
    """stop_kind_named refuses anything but a declared value exactly, listing each one."""
    with pytest.raises(ValueError, match="is not a stop kind") as caught:
        stop_kind_named(raw)
    assert repr(raw) in str(caught.value)
    assert every_kind_is_listed(str(caught.value), [kind.value for kind in StopKind])
    assert stop_kind_named("budget_exceeded") is StopKind.BUDGET_EXCEEDED


def test_both_clients_refuse_an_unknown_kind_listing_the_kinds_before_any_call() -> None:
    """session.stop("done") raises ValueError listing the kinds; nothing is sent (nothing listens)."""
    kinds = [kind.value for kind in StopKind]
    with (
        RolloutClient("127.0.0.1:1", "127.0.0.1:1") as client,
        pytest.raises(ValueError, match="'done' is not a stop kind") as caught,
    ):
        client.session(UNKNOWN_ID).stop("done")
    assert every_kind_is_listed(str(caught.value), kinds)

    async def stop_async() -> None:
        async with AsyncRolloutClient("127.0.0.1:1", "127.0.0.1:1") as client:
            await client.session(UNKNOWN_ID).stop("finished")

    with pytest.raises(ValueError, match="'finished' is not a stop kind") as caught:
        asyncio.run(stop_async())
    assert every_kind_is_listed(str(caught.value), kinds)


@pytest.mark.parametrize("value", [records_pb2.STOP_KIND_UNSPECIFIED, 99])
def test_the_writer_lists_the_declared_values_of_an_unknown_stop_kind(writer, value) -> None:
    """A Stop naming no declared StopKind: INVALID_ARGUMENT listing each STOP_KIND_* name and number."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    with pytest.raises(grpc.RpcError) as caught:
        writer.Stop(writer_pb2.StopRequest(session_id=session_id, stop_kind=value))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    declared = [f"{name} ({number})" for name, number in records_pb2.StopKind.items() if number != 0]
    assert len(declared) == len(StopKind)
    assert every_kind_is_listed(caught.value.details(), declared)


def test_the_command_line_lists_the_kinds() -> None:
    """`rollout stop ID --kind done` exits 2 naming each kind (before reaching any service)."""
    result = CliRunner().invoke(cli, ["stop", UNKNOWN_ID, "--kind", "done", "--writer", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert every_kind_is_listed(result.output, [kind.value for kind in StopKind])
