"""A small LangGraph chat for the LedgerSaver tests: ``add_messages`` state, an agent node that
asks an ``add`` tool for the sum the user wrote ("3+4") and then answers with it, and
LangGraph's own tool node. No model: the agent's replies are made from the messages.

``python -m tests.client.langgraph_chat WRITER READER THREAD [TEXT]`` (the second process of
the resume test) prints the thread's messages as JSON, after one more turn when TEXT is given.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from rollout_client import RolloutClient
from rollout_client.langgraph import LedgerSaver


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent(state: ChatState) -> dict[str, list[AnyMessage]]:
    last = state["messages"][-1]
    if isinstance(last, HumanMessage):
        a, b = (int(part) for part in str(last.content).split("+"))
        call = {"id": f"call_{len(state['messages'])}", "name": "add", "args": {"a": a, "b": b}}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    return {"messages": [AIMessage(f"the sum is {last.content}")]}


def build(checkpointer: Any) -> Any:
    graph = StateGraph(ChatState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def turn(graph: Any, thread_id: str, text: str) -> list[AnyMessage]:
    """One user turn; the thread's messages after it."""
    config = {"configurable": {"thread_id": thread_id}}
    return list(graph.invoke({"messages": [HumanMessage(text)]}, config)["messages"])


def described(messages: list[AnyMessage]) -> list[list[Any]]:
    """Messages as comparable JSON: type, content, tool calls, tool call id."""
    return [
        [
            message.type,
            message.content,
            getattr(message, "tool_calls", []),
            getattr(message, "tool_call_id", ""),
        ]
        for message in messages
    ]


def main(writer: str, reader: str, thread_id: str, text: str = "") -> None:
    with RolloutClient(writer, reader) as client:
        graph = build(LedgerSaver(client))
        if text:
            turn(graph, thread_id, text)
        state = graph.get_state({"configurable": {"thread_id": thread_id}})
        print(json.dumps(described(state.values["messages"])))


if __name__ == "__main__":
    main(*sys.argv[1:])
