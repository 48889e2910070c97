"""`rollout replay` and `rollout tail` show what a LedgerSession's carried items say, and
`rollout replay --json` gives the replay as canonical JSON lines (a real agents.Runner over a
scripted agents.Model writes the session)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest
from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from rollout_client import RolloutClient
from rollout_client.agents import ITEM_PART, LedgerSession, messages_to_items
from shared.digest import canonical_message, digest
from tests.conftest import run_rollout

set_tracing_disabled(True)
REFUSAL = {
    "id": "msg_3",
    "content": [{"refusal": "I cannot predict tomorrow.", "type": "refusal"}],
    "role": "assistant",
    "status": "completed",
    "type": "message",
}
WEB_SEARCH = {
    "id": "ws_1",
    "status": "completed",
    "type": "web_search_call",
    "action": {"type": "search", "query": "oslo forecast"},
}


class ScriptedModel(Model):
    """Turn 1: reasoning and a tool call, then an answer; turn 2: an answer."""

    def __init__(self) -> None:
        self.outputs: list[list[Any]] = [
            [
                ResponseReasoningItem(
                    id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="look it up")]
                ),
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id="call_1",
                    name="lookup",
                    arguments='{"city":"Oslo"}',
                    id="fc_1",
                    status="completed",
                ),
            ],
            [
                self._answer(
                    ResponseOutputText(type="output_text", text="It is 4 degrees in Oslo.", annotations=[])
                )
            ],
            [self._answer(ResponseOutputText(type="output_text", text="Ask me tomorrow.", annotations=[]))],
        ]

    @staticmethod
    def _answer(part: Any) -> ResponseOutputMessage:
        return ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed", content=[part]
        )

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Runner.run only")


@function_tool
def lookup(city: str) -> str:
    """The weather of a city."""
    return f"4 degrees in {city}"


@pytest.fixture
def written(client: RolloutClient) -> tuple[str, list[dict[str, Any]]]:
    """A session written by LedgerSession under two Runner turns and two added items: (its ledger
    session id, its items as the SDK reads them)."""

    async def run() -> list[dict[str, Any]]:
        session = LedgerSession("weather-chat", client=client)
        agent = Agent(name="weather", instructions="Answer briefly.", model=ScriptedModel(), tools=[lookup])
        await Runner.run(agent, "What is the weather in Oslo?", session=session)
        await Runner.run(agent, "And tomorrow?", session=session)
        await session.add_items([dict(REFUSAL), dict(WEB_SEARCH)])
        return await session.get_items()

    items = asyncio.run(run())
    session_id, found = client.resolve_session("weather-chat")
    assert found
    return session_id, items


def test_replay_shows_the_text_of_every_carried_item(written, reader_process) -> None:
    """The question, the reasoning summary, the call, its output, the answer, the refusal and an
    item of another type all show as text; no part shows as [openai_agents_item]."""
    session_id, items = written
    replay = run_rollout("replay", session_id, "--reader", reader_process.address)
    assert replay.returncode == 0, replay.stderr
    lines = [line.strip() for line in replay.stdout.splitlines()]
    assert f"[{ITEM_PART}]" not in replay.stdout
    assert "What is the weather in Oslo?" in lines
    assert "reasoning: look it up" in lines
    assert 'call call_1: lookup({"city":"Oslo"})' in lines
    assert "[3] tool (answers call_1)" in lines
    assert "4 degrees in Oslo" in lines
    assert "It is 4 degrees in Oslo." in lines
    assert "Ask me tomorrow." in lines
    assert "refusal: I cannot predict tomorrow." in lines
    assert (
        '[web_search_call] {"id":"ws_1","status":"completed","action":{"type":"search","query":"oslo forecast"}}'
        in lines
    )
    assert any(line.startswith(f"-- {len(items)} messages") for line in lines)


def test_tail_shows_the_text_of_every_carried_item(written, reader_process, monkeypatch) -> None:
    """One line per record, each saying what its item says (a call as the → name(arguments) of a
    native call, once)."""
    session_id, _ = written
    monkeypatch.setenv("COLUMNS", "300")  # no line cut to the terminal's width
    result = run_rollout("tail", session_id, "-n", "20", "--reader", reader_process.address)
    assert result.returncode == 0, result.stderr
    assert f"[{ITEM_PART}]" not in result.stdout
    summaries = [line.split(" ", 3)[3] for line in result.stdout.splitlines()]
    assert summaries[1:] == [
        "user What is the weather in Oslo?",
        "assistant reasoning: look it up",
        'assistant → lookup({"city":"Oslo"})',
        "tool (answers call_1) 4 degrees in Oslo",
        "assistant It is 4 degrees in Oslo.",
        "user And tomorrow?",
        "assistant Ask me tomorrow.",
        "assistant refusal: I cannot predict tomorrow.",
        'assistant [web_search_call] {"id":"ws_1","status":"completed","action":{"type":"search","query":"oslo forecast"}}',
    ]


def test_replay_json_gives_canonical_message_lines_then_the_summary(written, client, reader_process) -> None:
    """Each message line is the message's canonical JSON (its digest is the replay's), the items
    read back from the lines are the session's items, and the last line is the summary."""
    session_id, items = written
    result = run_rollout("replay", session_id, "--json", "--reader", reader_process.address)
    assert result.returncode == 0, result.stderr
    *message_lines, summary_line = result.stdout.splitlines()
    messages = [json.loads(line) for line in message_lines]
    assert [line.encode() for line in message_lines] == [canonical_message(message) for message in messages]
    assert messages_to_items(messages) == items
    summary = orjson.loads(summary_line)["summary"]
    replay = client.session(session_id).replay()
    assert summary["message_count"] == len(messages) == len(replay.messages)
    assert summary["computed_digest"] == digest(messages) == replay.summary.computed_digest
    assert summary["digest_status"] == "no_checkpoint"
    assert [entry["kind"] for entry in summary["degraded"]] == ["no_checkpoint"]
