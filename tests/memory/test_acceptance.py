"""The acceptance cases of memory (docs/memory.md): the fake extractor returns chosen
outputs; what is checked is the ledger's bookkeeping of provenance, supersession and tenancy."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rollout_client import NotFoundError, assistant, tool_call, tool_result, user
from rollout_client.memories import render_memory_block
from rollout_memory import client_source_reader, get_memories, resolve_provenance
from shared.errors import InvalidArgumentError
from shared.memory import ArtifactKind, Scope, SourceKind
from tests.memory.conftest import CWD, TENANT

SCOPE = Scope(cwd=CWD, agent="director")


def stopped_session(client, *messages: dict[str, Any], tenant: str = TENANT) -> tuple[str, tuple[int, ...]]:
    """A session of ``messages`` (agent director, cwd CWD), stopped: its id and the seqs."""
    session = client.create_session("director", root=True, tenant=tenant, cwd=CWD)
    seqs = session.append(*messages).seqs
    session.stop("completed", "done")
    return session.id, seqs


def seq_of(request: dict[str, Any], needle: str) -> int:
    return next(m["seq"] for m in request["messages"] if needle in str(m["text"]))


def price_responder(request: dict[str, Any]) -> dict[str, Any]:
    """The fake extractor of the $20 / $25 cases: $25 supersedes the $20 memory it is shown."""
    if request["task"] != "extract":
        return {"memories": []}
    if any("$25" in str(m["text"]) for m in request["messages"]):
        seq = seq_of(request, "$25")
        old = next(m["artifact_id"] for m in request["memories"] if "$20" in m["text"])
        return {
            "summary": {"text": "Price update.", "cites": [seq]},
            "memories": [
                {
                    "text": "The Pro plan costs $25 a month.",
                    "cites": [seq],
                    "supersedes": [{"artifact_id": old, "evidence_seq": seq}],
                }
            ],
        }
    seq = seq_of(request, "$20")
    return {
        "summary": {"text": "Pricing talk.", "cites": [seq]},
        "memories": [{"text": "The Pro plan costs $20 a month.", "cites": [seq]}],
    }


def test_a_later_price_supersedes_an_earlier_one_with_evidence(client, store, pipeline_for):
    """$20 then $25: the injected block says $25; $20 appears only as superseded, with its session and seq."""

    pipeline, _ = pipeline_for(price_responder)
    first, first_seqs = stopped_session(client, user("The Pro plan costs $20 a month."), assistant("Noted."))
    assert pipeline.run().distilled == [first]
    second, second_seqs = stopped_session(
        client, user("Update: the Pro plan now costs $25 a month."), assistant("Ok.")
    )
    assert pipeline.run().distilled == [second]

    current = get_memories(store, tenant=TENANT, scope=SCOPE)
    assert [view.artifact.text for view in current] == ["The Pro plan costs $25 a month."]
    everything = get_memories(store, tenant=TENANT, scope=SCOPE, include_superseded=True)
    old = next(view for view in everything if "$20" in view.artifact.text)
    assert old.superseded_by == current[0].artifact.artifact_id
    assert (old.superseded_evidence.evidence_session_id, old.superseded_evidence.evidence_seq) == (
        second,
        second_seqs[0],
    )
    assert old.artifact.sources[0].session_id == first
    assert [c.seq for c in old.artifact.sources[0].citations] == [first_seqs[0]]

    block = render_memory_block(everything)
    current_part, _, superseded_part = block.partition("Superseded")
    assert "$25" in current_part
    assert "$20" not in current_part
    assert "$20" in superseded_part
    assert f"session {first} seq {first_seqs[0]}" in superseded_part
    assert "take precedence" in block
    assert "old" in current_part


def test_a_tool_output_labelled_as_said_by_the_user_stays_a_tool_output(client, store, pipeline_for):
    """The extractor says the user said what a fetched page said: the provenance says tool output, through consolidation too."""

    def responder(request):
        if request["task"] == "consolidate":
            ids = [m["artifact_id"] for m in request["memories"]]
            return {
                "memories": [
                    {"text": "Shop facts: the API limit is 100 req/s; deploys on Fridays.", "from": ids}
                ]
            }
        page = seq_of(request, "rate limit")
        told = seq_of(request, "Fridays")
        return {
            "memories": [
                {
                    "text": "The user said the API limit is 100 req/s.",
                    "cites": [page],
                    "said_by": "user",
                    "kind": "user",
                },
                {"text": "Deploys happen on Fridays.", "cites": [told]},
            ]
        }

    pipeline, _ = pipeline_for(responder)
    session, seqs = stopped_session(
        client,
        user("We deploy on Fridays. Check the API docs."),
        assistant(tool_calls=[tool_call("c1", "fetch", '{"url": "https://example.test/api"}')]),
        tool_result("c1", "<html>The rate limit is 100 req/s.</html>"),
        assistant("The limit is 100 req/s."),
    )
    report = pipeline.run()
    assert report.distilled == [session]
    assert report.consolidated == [SCOPE.key()]

    everything = get_memories(store, tenant=TENANT, scope=SCOPE, include_superseded=True)
    extracted = next(v for v in everything if v.artifact.text.startswith("The user said"))
    assert [(c.seq, c.kind) for c in extracted.artifact.sources[0].citations] == [
        (seqs[2], SourceKind.TOOL_OUTPUT)
    ]
    [merged] = get_memories(store, tenant=TENANT, scope=SCOPE)
    kinds = {(c.seq, c.kind) for s in merged.artifact.sources for c in s.citations}
    assert kinds == {(seqs[2], SourceKind.TOOL_OUTPUT), (seqs[0], SourceKind.USER)}
    assert f"seq {seqs[2]} (tool_output)" in render_memory_block([merged])


def test_two_sources_keep_both_entries_and_resolve_to_the_source_after_a_fork(client, store, pipeline_for):
    """A fact from a user message and a tool output keeps both provenance entries; after a fork they resolve to the source's exact messages."""

    def responder(request):
        if not any("Lyon" in str(m["text"]) for m in request["messages"]):
            return {"memories": []}
        return {
            "memories": [
                {
                    "text": "Orders ship from Lyon.",
                    "cites": [seq_of(request, "warehouse"), seq_of(request, "Lyon")],
                }
            ]
        }

    pipeline, fake = pipeline_for(responder)
    session = client.create_session("director", root=True, tenant=TENANT, cwd=CWD)
    seqs = session.append(
        user("Where is our warehouse?"),
        assistant(tool_calls=[tool_call("c1", "lookup")]),
        tool_result("c1", "warehouse: Lyon"),
    ).seqs
    session.stop("completed", "done")
    pipeline.run()
    [view] = get_memories(store, tenant=TENANT, scope=SCOPE)
    cited = [(c.seq, c.kind) for c in view.artifact.sources[0].citations]
    assert cited == [(seqs[0], SourceKind.USER), (seqs[2], SourceKind.TOOL_OUTPUT)]

    fork = session.fork(at_seq=seqs[2])
    fork.append(user("And now something else entirely."))
    fork.stop("completed", "done")
    resolved = resolve_provenance(client_source_reader(client), tenant=TENANT, artifact=view.artifact)
    assert resolved.problems == ()
    assert [(m.session_id, m.seq, m.kind) for m in resolved.messages] == [
        (session.id, seqs[0], SourceKind.USER),
        (session.id, seqs[2], SourceKind.TOOL_OUTPUT),
    ]
    assert resolved.messages[0].payload["content"] == "Where is our warehouse?"
    assert resolved.messages[1].payload["content"] == "warehouse: Lyon"
    stored = {}
    for record in session.watch(0):
        stored[record.seq] = record.line
    assert [m.line for m in resolved.messages] == [stored[seqs[0]], stored[seqs[2]]]

    report = pipeline.run()
    assert report.distilled == [fork.id]
    # The fork's copied lines are its source's: only what follows them is distilled.
    assert [m["text"] for m in fake.extract_requests()[-1]["messages"]] == [
        "And now something else entirely."
    ]
    assert (view.artifact.artifact_id, "forked") in report.marked
    [marked] = get_memories(store, tenant=TENANT, scope=SCOPE, kinds=(ArtifactKind.MEMORY,))
    assert "forked" in [m.value for m in marked.marks]


def test_tenant_b_sees_none_of_tenant_a(client, store, pipeline_for):
    """Tenant B's pipeline and reads see none of tenant A's sessions or artifacts."""

    def responder(request):
        return {
            "memories": [
                {"text": "A's secret: the launch is in May.", "cites": [request["messages"][0]["seq"]]}
            ]
        }

    pipeline_a, _ = pipeline_for(responder)
    session, _ = stopped_session(client, user("The launch is in May."))
    assert pipeline_a.run().distilled == [session]
    [view] = get_memories(store, tenant=TENANT, scope=SCOPE)

    pipeline_b, fake_b = pipeline_for(responder, tenant="other", worker="w2")
    assert pipeline_b.run().distilled == []
    assert fake_b.requests == []
    assert get_memories(store, tenant="other", scope=SCOPE, include_superseded=True) == []
    assert store.scope_keys("other") == []
    assert store.watermarks("other") == {}
    assert store.find_artifact("other", view.artifact.artifact_id) is None
    with pytest.raises(InvalidArgumentError):
        resolve_provenance(client_source_reader(client), tenant="other", artifact=view.artifact)
    forged = dataclasses.replace(view.artifact, tenant="other")
    with pytest.raises(NotFoundError):
        resolve_provenance(client_source_reader(client), tenant="other", artifact=forged)
    assert store.forget("other", session_id=session) == []
    assert [v.artifact.artifact_id for v in get_memories(store, tenant=TENANT, scope=SCOPE)] == [
        view.artifact.artifact_id
    ]


def test_sessions_distilled_in_one_run_go_oldest_first(client, store, pipeline_for):
    """Both sessions stopped before one run (the listing is newest first): the older is distilled
    first, so the $25 of the later one supersedes the $20, never the other way round."""
    pipeline, _ = pipeline_for(price_responder)
    first, _ = stopped_session(client, user("The Pro plan costs $20 a month."), assistant("Noted."))
    second, _ = stopped_session(client, user("Update: the Pro plan now costs $25 a month."), assistant("Ok."))
    assert pipeline.run().distilled == [first, second]
    current = get_memories(store, tenant=TENANT, scope=SCOPE)
    assert [view.artifact.text for view in current] == ["The Pro plan costs $25 a month."]
