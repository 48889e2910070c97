"""The memory view: a lossy, model-facing summary of a session (docs/spec.md §3, seed rule 4).

Unlike replay it drops system messages, shortens reasoning (each block of a
message with several; ``shortened_reasoning`` counts blocks) and truncates long
tool outputs (at a code-point boundary: Python strings index code points, so a
cut never splits a character), marking each truncated output with
``[truncated: kept N of M characters]`` both at the end of its text and in its
``truncation_marker``. It is a separate function on purpose: replay never calls
it, because replay must return exactly what the agent had.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.rebuild_index import MessageSource, index_rebuild
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


class MemoryViewer:
    """The memory view made one message at a time (limits in characters); :attr:`view` keeps the counts."""

    def __init__(
        self,
        max_tool_output_chars: int = DEFAULT_MAX_TOOL_OUTPUT_CHARS,
        max_reasoning_chars: int = DEFAULT_MAX_REASONING_CHARS,
    ) -> None:
        self.max_tool_output_chars = max_tool_output_chars
        self.max_reasoning_chars = max_reasoning_chars
        #: Counters so far; its ``messages`` stay empty (the caller keeps what it needs).
        self.view = MemoryView()

    def shorten(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The view of one rebuilt message, or None when it is dropped (a system message)."""
        view = self.view
        role = message.get("role")
        if role == "system":
            view.dropped_system_messages += 1
            return None
        shortened = dict(message)
        blocks = reasoning_blocks_of(message)
        if blocks:
            kept = [_shorten_reasoning(block, self.max_reasoning_chars) for block in blocks]
            view.shortened_reasoning += sum(
                block is not original for block, original in zip(kept, blocks, strict=True)
            )
            shortened["reasoning"] = attached_reasoning(kept)
        if role == "tool":
            content, marker = _truncate_content(message.get("content"), self.max_tool_output_chars)
            if marker is not None:
                shortened["content"] = content
                shortened["truncation_marker"] = marker
                view.truncated_tool_outputs += 1
        return shortened


def memory_view(
    messages: list[dict[str, Any]],
    max_tool_output_chars: int = DEFAULT_MAX_TOOL_OUTPUT_CHARS,
    max_reasoning_chars: int = DEFAULT_MAX_REASONING_CHARS,
) -> MemoryView:
    """The lossy view of rebuilt messages (limits in characters); never for replay."""
    viewer = MemoryViewer(max_tool_output_chars, max_reasoning_chars)
    for message in messages:
        shortened = viewer.shorten(message)
        if shortened is not None:
            viewer.view.messages.append(shortened)
    return viewer.view


def stream_memory_view(path: Path, viewer: MemoryViewer) -> Iterator[dict[str, Any]]:
    """The view of a session file's messages, one at a time, in bounded memory.

    The file is indexed once (shared.rebuild_index) and each message read back by
    offset, so memory grows with the number of messages (offsets), not their
    bytes; ``viewer.view`` holds the counters once the iterator is exhausted.
    Raises OSError when the file cannot be read.
    """
    rebuilt = index_rebuild(path)
    with MessageSource(path) as source:
        for handle in rebuilt.messages:
            shortened = viewer.shorten(source.message(handle))
            if shortened is not None:
                yield shortened
