"""The checkpoint digest (docs/spec.md §4): what it covers, what it leaves out, its framing."""

from __future__ import annotations

import hashlib
import json
import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared.digest import digest, single_reasoning_digest

_DIGEST_SHAPE = re.compile(r"sha256:v1:[0-9a-f]{64}")
#: The fields docs/spec.md §4 puts in the canonical form, spelled out here on purpose
#: (not imported) so that a change to the product's list fails a test.
_SPEC_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning")

_texts = st.text(max_size=12)
_parts = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _texts}), min_size=1, max_size=3)
_tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text(min_size=1, max_size=8),
            "type": st.sampled_from(["function", "custom"]),
            "function": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8), "arguments": _texts}),
        }
    ),
    min_size=1,
    max_size=2,
)
_reasoning = st.fixed_dictionaries({"content": _texts}, optional={"signature": _texts, "encrypted": _texts})
#: Rebuilt message payloads whose content is never empty (so it can be truncated).
_messages = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
        "content": st.text(min_size=1, max_size=20) | _parts,
    },
    optional={
        "name": _texts,
        "tool_calls": _tool_calls,
        "tool_call_id": _texts,
        "reasoning": _reasoning,
        "is_anchored": st.just(True),
        "truncation_marker": _texts,
    },
)
_sequences = st.lists(_messages, min_size=1, max_size=6)


def _reversed_keys(value):
    """``value`` with the keys of every object, at every depth, in reverse order."""
    if isinstance(value, dict):
        return {key: _reversed_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_keys(item) for item in value]
    return value


def _spec_projection(messages):
    """The part of each message docs/spec.md §4 says the digest covers."""
    return [{key: message[key] for key in _SPEC_FIELDS if key in message} for message in messages]


def test_digest_has_versioned_sha256_shape():
    """A digest is "sha256:v1:" followed by 64 lowercase hex digits."""
    for messages in ([], [{"role": "user", "content": "hi"}]):
        assert _DIGEST_SHAPE.fullmatch(digest(messages))


def test_digest_hashes_the_documented_framed_stream():
    """The digest is sha256 over the domain tag, the count and each length-prefixed canonical message."""
    messages = [
        {"role": "system", "content": "Be brief.", "is_anchored": True},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
            "reasoning": {"content": "list first", "signature": "sig"},
            "truncation_marker": "[cut]",
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt", "name": "ls"},
        {"role": "user", "content": [{"type": "text", "text": "héllo ✓"}]},
    ]
    stream = b"rollout-ledger/digest/v1\x00" + len(messages).to_bytes(8, "big")
    for message in messages:
        canonical = json.dumps(
            {key: message[key] for key in _SPEC_FIELDS if key in message},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        stream += len(canonical).to_bytes(8, "big") + canonical
    assert digest(messages) == "sha256:v1:" + hashlib.sha256(stream).hexdigest()


def test_digest_includes_reasoning():
    """Adding or changing a message's reasoning changes the digest."""
    plain = {"role": "assistant", "content": "done"}
    with_reasoning = {**plain, "reasoning": {"content": "think"}}
    changed = {**plain, "reasoning": {"content": "think harder"}}
    signed = {**plain, "reasoning": {"content": "think", "signature": "s"}}
    digests = {digest([message]) for message in (plain, with_reasoning, changed, signed)}
    assert len(digests) == 4


def test_a_single_reasoning_digests_as_the_previous_release_did():
    """One reasoning block keeps its canonical form: the digest equals the one the previous release computed."""
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning": {"content": "think", "encrypted": "gAAA=="}},
    ]
    # Computed by the release before several-reasoning support, over the same sequence.
    assert digest(messages) == "sha256:v1:26dcd50f45ca50c5a2f9c90f79a314601fe53ce761065d094eb76b187618c444"


def test_every_reasoning_block_and_its_order_is_digested():
    """Dropping, changing or reordering one of several reasoning blocks changes the digest."""
    first, second = {"content": "one", "encrypted": "e1"}, {"content": "two", "encrypted": "e2"}
    base = {"role": "assistant", "content": "a"}
    variants = [
        [first, second],
        [second, first],
        [first],
        [second],
        [first, {**second, "encrypted": "e3"}],
    ]
    digests = {digest([{**base, "reasoning": blocks}]) for blocks in variants}
    assert len(digests) == len(variants)
    assert digest([{**base, "reasoning": [first]}]) != digest([{**base, "reasoning": first}])


def test_the_single_reasoning_reading_digests_the_last_block_only():
    """single_reasoning_digest reads several blocks as the last one, and is None when no message has several."""
    first, second = {"content": "one"}, {"content": "two"}
    several = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning": [first, second]},
    ]
    last_only = [several[0], {**several[1], "reasoning": second}]
    assert single_reasoning_digest(iter(several), 2) == digest(last_only)
    assert single_reasoning_digest(iter(last_only), 2) is None


@given(messages=_sequences, index=st.integers(min_value=0), anchored=st.booleans(), marker=_texts)
def test_digest_excludes_anchoring_and_truncation_marker(messages, index, anchored, marker):
    """Changing is_anchored or truncation_marker of a message leaves the digest equal."""
    index %= len(messages)
    before = digest(messages)
    changed = [dict(message) for message in messages]
    changed[index]["is_anchored"] = anchored
    changed[index]["truncation_marker"] = marker
    assert digest(changed) == before
    del changed[index]["is_anchored"], changed[index]["truncation_marker"]
    assert digest(changed) == before


@settings(deadline=None)
@given(messages=_sequences)
def test_dropping_any_message_changes_the_digest(messages):
    """Removing any one message from a sequence changes its digest."""
    full = digest(messages)
    for index in range(len(messages)):
        assert digest(messages[:index] + messages[index + 1 :]) != full


@settings(deadline=None)
@given(messages=_sequences)
def test_truncating_any_content_changes_the_digest(messages):
    """Cutting the last character or part off any message's content changes the digest."""
    full = digest(messages)
    for index, message in enumerate(messages):
        cut = [*messages[:index], {**message, "content": message["content"][:-1]}, *messages[index + 1 :]]
        assert digest(cut) != full


@given(first=st.lists(_messages, max_size=4), second=st.lists(_messages, max_size=4))
def test_different_sequences_have_different_digests(first, second):
    """Two sequences that differ in a digested field have different digests."""
    assume(_spec_projection(first) != _spec_projection(second))
    assert digest(first) != digest(second)


@given(messages=_sequences)
def test_key_order_does_not_matter(messages):
    """The digest does not depend on the key order of the message objects at any depth."""
    assert digest(_reversed_keys(messages)) == digest(messages)


def test_content_split_across_messages_differs():
    """One message holding "ab" and two messages holding "a" and "b" have different digests."""
    assert digest([{"content": "ab"}]) != digest([{"content": "a"}, {"content": "b"}])
    assert digest([{"role": "user", "content": "ab"}]) != digest(
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    )
