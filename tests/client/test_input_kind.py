"""A user message's input kind goes through Append and decides its round; a bad one is refused."""

from __future__ import annotations

import pytest

from rollout_client import InvalidArgumentError, assistant, tool_call, tool_result, user
from shared.rounds import RoundStatus


def test_input_kinds_travel_and_decide_rounds(client) -> None:
    session = client.create_session()
    session.append(user("deploy", input_kind="trigger"))
    session.append(assistant(None, tool_calls=[tool_call("ask", "ask_user")]), tool_result("ask", "asked"))
    session.append(user("staging", input_kind="question_answer"))
    session.append(assistant("deployed to staging"))
    session.append(user("and prod?", input_kind="trigger"))
    first, second = session.rounds()
    assert [i.kind for i in first.inputs] == ["question_answer"]
    assert first.status is RoundStatus.COMPLETE
    assert second.status is RoundStatus.PENDING
    assert second.question == "and prod?"


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (user("x", input_kind="follow_up"), "input_kind"),
        ({"role": "assistant", "content": "x", "input_kind": "trigger"}, "input_kind"),
    ],
)
def test_a_bad_input_kind_is_refused_naming_the_field(client, message, field) -> None:
    session = client.create_session()
    with pytest.raises(InvalidArgumentError) as refused:
        session.append(message)
    assert field in str(refused.value)
