"""Items of the OpenAI Agents SDK carried in a ledger message's content part (docs/spec.md §11).

An item the ledger's chat shape cannot hold exactly (see :mod:`rollout_client.agents`) is
stored as one content part::

    {"type": "openai_agents_item", "json": "<the item as JSON text>"}
    {"type": "openai_agents_item", "json": "<...>", "codec": "json"}   # NaN, integers past 64 bits

``codec: "json"``: only Python's json module reads the text back exactly (orjson otherwise).
Parts written by earlier versions hold the item itself: ``{"type": "openai_agents_item",
"item": {...}}``. :func:`agents_item_part` writes the part and :func:`carried_agents_item` reads
it, for :class:`rollout_client.agents.LedgerSession` and for anything that shows a replay (the
``rollout`` command) alike; neither needs the ``agents`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

#: Type of the content part that carries an item the chat shape cannot hold exactly.
AGENTS_ITEM_PART = "openai_agents_item"


def agents_item_part(item: Mapping[str, Any]) -> dict[str, Any]:
    """The content part that carries ``item`` as JSON text (orjson where it is exact)."""
    try:
        text = orjson.dumps(item)
    except TypeError:  # an integer beyond 64 bits, a key that is not a string
        text = b"null"
    if b"null" not in text:
        return {"type": AGENTS_ITEM_PART, "json": text.decode()}
    # NaN and infinities become null in orjson: Python's json module keeps them (as SQLiteSession does).
    return {"type": AGENTS_ITEM_PART, "json": json.dumps(item, ensure_ascii=False), "codec": "json"}


def carried_agents_item(part: Any) -> dict[str, Any] | None:
    """The Agents SDK item a content part carries, or None when ``part`` carries none (another
    part, or a carried value that is not a JSON object). Raises ValueError for a part whose
    ``json`` text is not JSON."""
    carried = carried_agents_item_text(part)
    return None if carried is None else carried[0]


def carried_agents_item_text(part: Any) -> tuple[dict[str, Any], str | None] | None:
    """:func:`carried_agents_item`'s item with the text it was read from when orjson reads that
    text back exactly (None when only Python's json module does, or the part holds the item
    itself): a copy of the item is then one orjson parse of the text. None, and ValueError, as
    :func:`carried_agents_item`."""
    if not isinstance(part, dict) or part.get("type") != AGENTS_ITEM_PART:
        return None
    text = part.get("json")
    if isinstance(text, str):
        exact = part.get("codec") != "json"
        item = orjson.loads(text) if exact else json.loads(text)
        return (item, text if exact else None) if isinstance(item, dict) else None
    carried = part.get("item")  # written by earlier versions
    return (carried, None) if set(part) == {"type", "item"} and isinstance(carried, dict) else None
