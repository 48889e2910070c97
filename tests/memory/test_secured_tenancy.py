"""Tenancy with authentication: the pipeline and every read of tenant b see nothing of tenant a,
against a writer and reader served with TLS and bearer tokens."""

from __future__ import annotations

import pytest

from rollout_client import NotFoundError, PermissionDeniedError, RolloutClient, user
from rollout_memory import (
    ChatCompletionsExtractor,
    MemoryPipeline,
    MemoryStore,
    PipelineConfig,
    get_memories,
    resolve_provenance,
)
from tests.e2e.secured import A, B, local, start_secured_pair
from tests.memory.fake_openai import FakeChatCompletions


def remember(request):
    if request["task"] == "consolidate":
        return {"memories": []}
    first = request["messages"][0]
    return {"memories": [{"text": f"a's: {first['text']}", "cites": [first["seq"]]}]}


def test_tenant_b_sees_none_of_tenant_as_artifacts_by_any_call(tmp_path):
    """b's pipeline distills nothing of a's, b cannot list a's sessions even when it names a, b's reads of the store are empty, and a's citations do not resolve for b."""
    pair = start_secured_pair(tmp_path)
    try:
        store = MemoryStore(tmp_path / "data" / "memories")
        writer, reader = local(pair.writer.address), local(pair.reader.address)
        ca = pair.certificates.ca_file
        with (
            RolloutClient(writer, reader, token=A, tls_ca=ca) as client_a,
            RolloutClient(writer, reader, token=B, tls_ca=ca) as client_b,
            FakeChatCompletions(remember) as fake,
        ):
            session = client_a.create_session("director", root=True, cwd="/src")
            session.append(user("the launch is in May"))
            session.stop("completed", "done")
            extractor = ChatCompletionsExtractor(fake.base_url, "fake-model", "sk-test")

            def pipeline(client, tenant):
                config = PipelineConfig(worker_id=f"w-{tenant}")
                return MemoryPipeline(client, store, extractor, tenant=tenant, config=config)

            assert pipeline(client_a, "a").run().distilled == [session.id]
            [view] = get_memories(store, tenant="a", scope=None)

            asked = len(fake.requests)
            assert pipeline(client_b, "b").run().distilled == []
            with pytest.raises(PermissionDeniedError):
                pipeline(client_b, "a").run()  # b's token naming tenant a
            assert len(fake.requests) == asked
            assert get_memories(store, tenant="b", scope=None, include_superseded=True) == []
            assert store.find_artifact("b", view.artifact.artifact_id) is None
            with pytest.raises(NotFoundError):
                resolve_provenance(client_b, tenant="a", artifact=view.artifact)
            resolved = resolve_provenance(client_a, tenant="a", artifact=view.artifact)
            assert [m.payload["content"] for m in resolved.messages] == ["the launch is in May"]
    finally:
        pair.stop()
