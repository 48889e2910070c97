"""The memory view: a lossy, model-facing summary of a session (SPEC §3, seed rule 4).

Unlike replay it drops system messages, shortens reasoning (each block of a
message with several; ``shortened_reasoning`` counts blocks) and truncates long
tool outputs (at a code-point boundary: Python strings index code points, so a
cut never splits a character), marking each truncated output with
``[truncated: kept N of M characters]`` both at the end of its text and in its
``truncation_marker``. It is a separate function on purpose: replay never calls
it, because replay must return exactly what the agent had.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.records import attached_reasoning, reasoning_blocks_of

DEFAULT_MAX_TOOL_OUTPUT_CHARS = 2000
DEFAULT_MAX_REASONING_CHARS = 200


@dataclass(slots=True)
class MemoryView:
    """The shortened messages and what was lost to make them."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    dropped_system_messages: int = 0
    truncated_tool_outputs: int = 0
    shortened_reasoning: int = 0


def _marker(kept: int, total: int) -> str:
    return f"[truncated: kept {kept} of {total} characters]"


def _truncate_content(content: Any, limit: int) -> tuple[Any, str | None]:
    """(content cut to ``limit`` characters of text, marker or None when nothing was cut)."""
    if isinstance(content, str):
        if len(content) <= limit:
            return content, None
        marker = _marker(limit, len(content))
        return content[:limit] + "\n" + marker, marker
    if isinstance(content, list):
        total = sum(
            len(part["text"])
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
        if total <= limit:
            return content, None
        budget = limit
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                text = part["text"][: max(budget, 0)]
                budget -= len(text)
                parts.append({**part, "text": text})
            else:
                parts.append(part)
        marker = _marker(limit, total)
        parts.append({"type": "text", "text": marker})
        return parts, marker
    return content, None


def _shorten_reasoning(block: dict[str, Any], limit: int) -> dict[str, Any]:
    """One reasoning block cut to ``limit`` characters of text (the block itself when it fits)."""
    text = str(block.get("content", ""))
    return block if len(text) <= limit else {"content": text[:limit] + "…"}


def memory_view(
    messages: list[dict[str, Any]],
    max_tool_output_chars: int = DEFAULT_MAX_TOOL_OUTPUT_CHARS,
    max_reasoning_chars: int = DEFAULT_MAX_REASONING_CHARS,
) -> MemoryView:
    """The lossy view of rebuilt messages (limits in characters); never for replay."""
    view = MemoryView()
    for message in messages:
        role = message.get("role")
        if role == "system":
            view.dropped_system_messages += 1
            continue
        shortened = dict(message)
        blocks = reasoning_blocks_of(message)
        if blocks:
            kept = [_shorten_reasoning(block, max_reasoning_chars) for block in blocks]
            view.shortened_reasoning += sum(
                block is not original for block, original in zip(kept, blocks, strict=True)
            )
            shortened["reasoning"] = attached_reasoning(kept)
        if role == "tool":
            content, marker = _truncate_content(message.get("content"), max_tool_output_chars)
            if marker is not None:
                shortened["content"] = content
                shortened["truncation_marker"] = marker
                view.truncated_tool_outputs += 1
        view.messages.append(shortened)
    return view
