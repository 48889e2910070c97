"""How the ``rollout`` client commands show what the ledger answers, for people.

Everything here takes :mod:`rollout_client` results (plain dicts and dataclasses, never
protobuf) and writes lines to stdout: the session table of ``rollout ls``, the messages
and summary of ``rollout replay`` (or its JSON lines), the facts of ``rollout stop-facts`` and
the one-line records of ``rollout tail``. Long text is cut to the width asked for, with the full
length named (``… [1234 chars]``).

A message that carries an OpenAI Agents SDK item (a ``LedgerSession`` stores most items so,
:mod:`rollout_client.agents`) shows the item's text as a native message shows its own: a
message's text, a call's name and arguments, an output, a reasoning summary; an item of
another type as ``[its type]`` and its fields in JSON.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import textwrap
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import click
import orjson

from rollout_cli.reachability import in_command_words
from rollout_client import (
    ReplaySummary,
    SessionHit,
    SessionSummary,
    StopFacts,
    WatchedRecord,
    carried_agents_item,
)
from shared.digest import canonical_message
from shared.records import parse_timestamp, reasoning_blocks_of
from shared.rounds import Round

#: Columns assumed when stdout is not a terminal.
DEFAULT_COLUMNS = 160
#: Agents SDK items that are calls (the message's tool_calls show them) and where their input is.
_CALL_INPUTS = {"function_call": "arguments", "custom_tool_call": "input"}


#: Characters a terminal acts on rather than shows: C0 and C1 controls (ESC starts sequences that
#: recolour, retitle or clear it) and the bidirectional overrides (they reorder what follows).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` from a session file (a title, a prompt, a branch, a snippet) as shown on one line:
    a newline, tab or carriage return as a blank, any other character of :data:`_UNPRINTABLE`
    as its escape (``\\x1b``)."""
    return _UNPRINTABLE.sub(
        lambda found: " " if found.group() in "\t\n\r" else found.group().encode("unicode_escape").decode(),
        text,
    )


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (0: whole), naming its full length when cut."""
    return text if not width or len(text) <= width else text[:width] + f"… [{len(text)} chars]"


def relative_time(moment: str, now: datetime) -> str:
    """How long before ``now`` an RFC 3339 time was, as a session picker says it ("3 min ago")."""
    try:
        then = parse_timestamp(moment)
    except ValueError:
        return moment or "-"
    seconds = (now - then).total_seconds()
    if seconds < 0:
        return then.strftime("%Y-%m-%d %H:%M")
    for limit, unit, size in (
        (60, "s", 1),
        (3600, "min", 60),
        (86400, "h", 3600),
        (30 * 86400, "days", 86400),
    ):
        if seconds < limit:
            count = int(seconds // size)
            return "just now" if unit == "s" and count < 10 else f"{count} {unit} ago"
    return then.strftime("%Y-%m-%d")


def print_sessions(sessions: Iterable[SessionSummary], now: datetime) -> None:
    """One row per session, like a session picker: when it last changed, its state and first prompt.

    The session id is never shortened; the preview is cut to what the terminal's width
    leaves (160 columns when the output is not a terminal).
    """
    from rich.console import Console  # here: the other commands start without loading it
    from rich.table import Table
    from rich.text import Text  # cells as Text: brackets in a title are text, never markup

    header = ("UPDATED", "SESSION", "AGENT", "BRANCH", "STATE", "RESUME", "MSGS")
    rows = []
    for summary in sessions:
        facts = summary.stop_facts
        rows.append(
            (
                relative_time(summary.updated_at or summary.created_at, now),
                summary.session_id,
                summary.agent_name or "-",
                printable(summary.branch) or "-",
                (facts.stop_kind or "legacy") if facts.found else "unknown",
                "yes" if facts.replayable else "no",
                str(summary.message_count),
                printable(summary.title or summary.preview) or "-",
            )
        )
    width = shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns
    used = sum(max(len(row[column]) for row in [header, *rows]) + 2 for column in range(len(header)))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in header:
        table.add_column(name, no_wrap=True, justify="right" if name == "MSGS" else "left")
    table.add_column("TITLE/PREVIEW", no_wrap=True, overflow="ellipsis", max_width=max(width - used, 12))
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console(width=max(width, used + 12), highlight=False, soft_wrap=False).print(table)


def print_hits(hits: Iterable[SessionHit], now: datetime) -> None:
    """Each session found, best first: a line naming it (when it last changed, its id, folder,
    branch, title), then one indented line per matching record (its seq, kind and snippet,
    the matched words between « and »; a title match says so)."""
    width = shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns
    for hit in hits:
        where = " ".join(
            printable(part) for part in (hit.cwd, f"[{hit.branch}]" if hit.branch else "") if part
        )
        title = f"  {hit.title!r}" if hit.title else ""
        click.echo(
            f"{relative_time(hit.updated_at or hit.created_at, now)}  {hit.session_id}  {where}{title}"
        )
        for match in hit.matches:
            label = "title" if match.kind == "title" else f"seq {match.seq} {match.kind}"
            click.echo(_fit(f"    {label}: {' '.join(printable(match.snippet).split())}", width))
        if hit.match_count > len(hit.matches):
            click.echo(f"    (+{hit.match_count - len(hit.matches)} more matching records)")


def _duration_text(seconds: float) -> str:
    """``42s``, ``5m01s``, ``2h03m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def print_rounds(rounds: Iterable[Round]) -> None:
    """One row per round: #, status, started (UTC), duration, tokens in/out (``~``: the bytes/4
    estimate), tool calls and failures, and the first line of its question (cut to the width)."""
    from rich.console import Console  # here: the other commands start without loading it
    from rich.table import Table
    from rich.text import Text  # cells as Text: brackets in a title are text, never markup

    header = ("#", "STATUS", "STARTED", "DURATION", "TOKENS IN/OUT", "TOOLS/FAILED")
    rows = []
    for found in rounds:
        estimate = "~" if found.tokens_estimated else ""
        rows.append(
            (
                str(found.number),
                found.status.value,
                found.started_at[:19].replace("T", " "),
                _duration_text(found.duration_s),
                f"{estimate}{found.input_tokens}/{estimate}{found.output_tokens}",
                f"{found.tool_calls}/{found.tool_failures}",
                printable((found.question.strip().splitlines() or ["-"])[0]),
            )
        )
    width = shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns
    used = sum(max(len(row[column]) for row in [header, *rows]) + 2 for column in range(len(header)))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in header:
        table.add_column(name, no_wrap=True, justify="left" if name in ("STATUS", "STARTED") else "right")
    table.add_column("QUESTION", no_wrap=True, overflow="ellipsis", max_width=max(width - used, 12))
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console(width=max(width, used + 12), highlight=False, soft_wrap=False).print(table)


def _json_text(value: Any) -> str:
    """Compact JSON of a value read from JSON (NaN kept as Python's json module writes it)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _content_text(content: Any) -> str:
    """Text content as it is; parts one per line: a part's text (a refusal as ``refusal: ...``),
    a carried Agents SDK item as :func:`item_text` shows it, another part as ``[its type]``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else _json_text(content)
    texts = []
    for part in content:
        fields = part if isinstance(part, dict) else {}
        kind = fields.get("type")
        if "text" in fields:
            texts.append(fields["text"] if isinstance(fields["text"], str) else "")
        elif kind == "refusal" and isinstance(fields.get("refusal"), str):
            texts.append(f"refusal: {fields['refusal']}")
        elif (item := _carried(fields)) is not None:
            texts.append(item_text(item))
        else:
            texts.append(f"[{kind if isinstance(kind, str) else ''}]")
    return "\n".join(texts)


def _carried(part: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        return carried_agents_item(part)
    except ValueError:  # a carried text that is not JSON: shown as the part's type
        return None


def item_text(item: Mapping[str, Any]) -> str:
    """What an OpenAI Agents SDK item says, as a native message shows the same: a message's
    text, ``call <id>: name(arguments)``, an output's text, ``reasoning: <summary>``; any other
    item as ``[its type] <its other fields as JSON>``."""
    kind = item.get("type")
    if kind is None or kind == "message":
        return _content_text(item.get("content"))
    if kind in _CALL_INPUTS:
        return f"call {item.get('call_id', '')}: {item.get('name', '')}({item.get(_CALL_INPUTS[kind], '')})"
    if kind == "reasoning":
        summary = item.get("summary")
        texts = [_content_text([part]) for part in summary] if isinstance(summary, list) else []
        if not texts and item.get("encrypted_content"):
            texts = ["(encrypted)"]
        return "reasoning: " + " ".join(texts)
    if isinstance(kind, str) and kind.endswith("_output") and "output" in item:
        return _content_text(item["output"])
    if kind == "mcp_call":
        answer = item.get("output") or item.get("error") or ""
        call = f"call {item.get('server_label', '')}.{item.get('name', '')}({item.get('arguments', '')})"
        return f"{call} -> {answer}" if answer else call
    fields = {key: value for key, value in item.items() if key != "type"}
    return f"[{kind}] {_json_text(fields)}"


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message dict: its string content, or its parts' texts one per line (a
    part without text as ``[its type]``; a carried Agents SDK item as :func:`item_text` shows
    it, except a call the message's tool calls show already)."""
    content = message.get("content")
    calls = {call.get("id") for call in message.get("tool_calls") or () if isinstance(call, dict)}
    if calls and isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        item = _carried(content[0])
        if item is not None and item.get("type") in _CALL_INPUTS and item.get("call_id") in calls:
            return ""
    return _content_text(content)


def print_message(index: int, message: Mapping[str, Any], width: int) -> None:
    """One replayed message: ``[index] role`` (what it answers, whether synthetic), then its
    reasoning blocks, text and tool calls, indented, each cut to ``width`` characters."""
    head = f"[{index}] {message.get('role', '')}"
    if "tool_call_id" in message:
        head += f" (answers {message['tool_call_id']})"
    if message.get("synthetic"):
        head += " (synthetic)"
    click.echo(click.style(head, bold=True))
    blocks = reasoning_blocks_of(message)
    for number, block in enumerate(blocks, 1):
        label = "reasoning" if len(blocks) == 1 else f"reasoning {number}/{len(blocks)}"
        click.echo(textwrap.indent(f"{label}: {shorten(str(block.get('content', '')), width)}", "  "))
    text = message_text(message)
    if text:
        click.echo(textwrap.indent(shorten(text, width), "  "))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = shorten(str(function.get("arguments", "")), width)
        click.echo(f"  call {call.get('id', '')}: {function.get('name', '')}({arguments})")


def round_header(found: Round) -> str:
    """The line ``rollout replay --rounds`` prints before a round's messages: number, status (and
    why), start (UTC), duration, tokens (``~``: estimated), tool calls and failures, model and
    effort when known."""
    estimate = "~" if found.tokens_estimated else ""
    parts = [
        f"== round {found.number}: {found.status.value}"
        + (f" ({found.status_reason})" if found.status_reason else ""),
        f"started {found.started_at[:19].replace('T', ' ') or '-'}",
        f"took {_duration_text(found.duration_s)}",
        f"tokens {estimate}{found.input_tokens}/{estimate}{found.output_tokens}",
        f"tools {found.tool_calls}/{found.tool_failures} failed",
    ]
    if found.model:
        parts.append(f"model {found.model}" + (f" ({found.effort})" if found.effort else ""))
    return ", ".join(parts)


def round_json_line(found: Round) -> str:
    """A round's line in ``rollout replay --rounds --json``: ``{"round": {...}}`` with the fields
    of :class:`shared.rounds.Round` but the file offsets (a message line never has a ``round`` key)."""
    fields = dataclasses.asdict(found)
    fields.pop("start_offset")
    fields.pop("end_offset")
    return _compact({"round": fields})


def replay_json_line(message: Mapping[str, Any]) -> str:
    """One message of ``rollout replay --json``: its canonical JSON (docs/spec.md §4, the form the digest
    hashes: sorted keys, the digest's fields only)."""
    return canonical_message(message).decode()


def replay_summary_json_line(summary: ReplaySummary) -> str:
    """The last line of ``rollout replay --json``: ``{"summary": {...}}`` with the fields of
    :class:`rollout_client.ReplaySummary` (a message line never has a ``summary`` key)."""
    return _compact({"summary": dataclasses.asdict(summary)})


def print_replay_summary(summary: ReplaySummary) -> None:
    """The lines after a replay's messages: counts, checkpoint status, degraded entries, budget."""
    click.echo(
        f"-- {summary.message_count} messages, ~{summary.estimated_tokens} tokens,"
        f" superseded outputs {summary.superseded_outputs},"
        f" checkpoint {summary.digest_status or 'unspecified'}"
    )
    for entry in summary.degraded:
        click.echo(f"-- degraded {entry.kind} (line {entry.line}, byte {entry.offset}): {entry.detail}")
    if summary.too_large is not None:
        click.echo(
            f"-- REPLAY_TOO_LARGE: ~{summary.too_large.estimated_tokens} tokens over the budget of"
            f" {summary.too_large.token_budget}"
        )


def print_stop_facts(session_id: str, facts: StopFacts) -> None:
    """Why and where a session stopped and whether it may be continued, one fact per line."""
    if not facts.found:
        click.echo(f"{session_id}: unknown (no stop facts in the tail: running, or killed before any Stop)")
        return
    click.echo(f"session:     {session_id}")
    click.echo(f"stop kind:   {facts.stop_kind or '(none: legacy stop record)'}")
    click.echo(f"reason:      {facts.reason}")
    if facts.error is not None:
        click.echo(f"error:       {facts.error['category']}: {facts.error['message']}")
    if facts.checkpoint is not None:
        checkpoint = facts.checkpoint
        click.echo(
            f"checkpoint:  seq {checkpoint.seq}, {checkpoint.message_count} messages, covers seq"
            f" ≤ {checkpoint.covers_seq}"
        )
        click.echo(f"digest:      {checkpoint.digest}")
    if not facts.has_stop_record:
        click.echo("stop record: missing (killed between checkpoint and stop): still a stopped session")
    for entry in facts.damage:
        click.echo(f"DAMAGE:      {entry.kind} at byte {entry.offset}: {entry.detail}")
    verdict = "may be continued exactly" if facts.replayable else "may not be continued as-is"
    click.echo(f"resume:      {verdict}: {in_command_words(facts.resume_reason)}")
    click.echo(f"tail read:   {facts.tail_bytes_read} bytes")


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode()


def _record_summary(record: WatchedRecord) -> str:
    """What one record says, in a few words (its payload's main fields)."""
    payload = record.payload or {}
    match record.type:
        case "message":
            words = [message_text(payload).replace("\n", " ")]
            if "tool_call_id" in payload:
                words.insert(0, f"(answers {payload['tool_call_id']})")
            for call in payload.get("tool_calls") or ():
                function = call.get("function") or {}
                words.append(f"→ {function.get('name', '')}({function.get('arguments', '')})")
            return " ".join(word for word in words if word)
        case "reasoning":
            return str(payload.get("content", ""))
        case "event":
            body = payload.get("body")
            return f"{payload.get('kind', '')} {_compact(body)}" if body else str(payload.get("kind", ""))
        case "stop":
            return f"{payload.get('stop_kind', '')}: {payload.get('reason', '')}"
        case "agent_checkpoint":
            return f"{payload.get('message_count', '')} messages, {payload.get('digest', '')}"
        case "compacted":
            return str(payload.get("summary", ""))
        case "session_meta":
            keys = ("agent_name", "parent_session_id", "delegation_id", "model", "cwd")
            return " ".join(f"{key}={payload[key]}" for key in keys if payload.get(key))
        case _:
            return _compact(payload)


def record_line(record: WatchedRecord, width: int) -> str:
    """One record of ``rollout tail`` as one line, at most ``width`` characters:
    ``[seq] YYYY-MM-DD HH:MM:SS.mmm type/role summary`` in UTC (imported sessions hold old dates),
    a damaged line as ``[?] damaged line: ...``."""
    if record.seq < 0 or record.payload is None:
        text = record.line.decode("utf-8", "replace")
        return _fit(f"[?] damaged line: {text}", width)
    clock = f"{record.ts[:10]} {record.ts[11:23]}" if len(record.ts) >= 23 else record.ts
    label = str(record.payload.get("role", "message")) if record.type == "message" else record.type
    head = f"[{record.seq}] {clock} "
    line = _fit(f"{head}{label} {_record_summary(record)}".rstrip(), width)
    styled = click.style(label, bold=True)
    return line.replace(f"{head}{label}", f"{head}{styled}", 1) if line.startswith(f"{head}{label}") else line


def _fit(text: str, width: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def terminal_width() -> int:
    """The terminal's columns (160 when stdout is not a terminal)."""
    return shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns
