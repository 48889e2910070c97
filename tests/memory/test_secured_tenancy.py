"""Tenancy with authentication: the pipeline and every read of tenant b see nothing of tenant a,
against a writer and reader served with TLS and bearer tokens."""

from __future__ import annotations

import grpc
import pytest

from rollout.v1 import reader_pb2
from rollout_client import NotFoundError, PermissionDeniedError, RolloutClient, user
from rollout_memory import (
    ChatCompletionsExtractor,
    MemoryPipeline,
    MemoryStore,
    PipelineConfig,
    client_source_reader,
    get_memories,
    resolve_provenance,
)
from shared.memory import ArtifactKind
from tests.e2e.secured import READER, A, B, call, local, refusal, start_secured_pair, tls_channel
from tests.memory.fake_openai import FakeChatCompletions


def remember(request):
    if request["task"] == "consolidate":
        return {"memories": []}
    first = request["messages"][0]
    return {"memories": [{"text": f"a's: {first['text']}", "cites": [first["seq"]]}]}


def test_tenant_b_sees_none_of_tenant_as_artifacts_by_any_call(tmp_path):
    """b's pipeline distills nothing of a's, b cannot list a's sessions even when it names a, b's reads of the store are empty, a's citations do not resolve for b, and the reader's GetMemories and ResolveProvenance (SDK and raw gRPC) show b none of a's artifacts: another tenant named is PERMISSION_DENIED, a's artifact id NOT_FOUND exactly as an unknown one."""
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
                resolve_provenance(client_source_reader(client_b), tenant="a", artifact=view.artifact)
            resolved = resolve_provenance(client_source_reader(client_a), tenant="a", artifact=view.artifact)
            assert [m.payload["content"] for m in resolved.messages] == ["the launch is in May"]

            # Through the reader, the tenant is the token's: a's artifacts for a, none for b.
            artifact_id = view.artifact.artifact_id
            assert [v.artifact.artifact_id for v in client_a.memories()] == [artifact_id]
            assert client_a.resolve_provenance(artifact_id) == resolved
            every_kind = tuple(ArtifactKind)
            assert client_b.memories(include_superseded=True, kinds=every_kind) == []
            assert (
                client_b.memories(artifact_ids=[artifact_id], include_superseded=True, kinds=every_kind) == []
            )
            with pytest.raises(PermissionDeniedError):
                client_b.memories(tenant="a")
            with pytest.raises(PermissionDeniedError):
                client_b.resolve_provenance(artifact_id, tenant="a")
            absent = "mem_" + "0" * 32
            with pytest.raises(NotFoundError) as seen:
                client_b.resolve_provenance(artifact_id)
            with pytest.raises(NotFoundError) as unknown:
                client_b.resolve_provenance(absent)
            assert seen.value.message.replace(artifact_id, "<id>") == unknown.value.message.replace(
                absent, "<id>"
            )

            # And by raw gRPC: b's token, with or without naming a's tenant.
            channel = tls_channel(pair.reader.address, pair.certificates)
            try:
                get, resolve = (
                    READER.methods_by_name["GetMemories"],
                    READER.methods_by_name["ResolveProvenance"],
                )
                (listing,) = call(channel, get, reader_pb2.GetMemoriesRequest(include_superseded=True), B)
                assert not listing.memories
                (own,) = call(channel, get, reader_pb2.GetMemoriesRequest(), A)
                assert [v.artifact.artifact_id for v in own.memories] == [artifact_id]
                for request, code in (
                    (reader_pb2.GetMemoriesRequest(tenant="a"), grpc.StatusCode.PERMISSION_DENIED),
                    (reader_pb2.ResolveProvenanceRequest(artifact_id=artifact_id), grpc.StatusCode.NOT_FOUND),
                    (
                        reader_pb2.ResolveProvenanceRequest(artifact_id=artifact_id, tenant="a"),
                        grpc.StatusCode.PERMISSION_DENIED,
                    ),
                ):
                    method = get if isinstance(request, reader_pb2.GetMemoriesRequest) else resolve
                    error = refusal(channel, method, request, B)
                    assert error.code() == code, error.details()
                    assert "launch" not in error.details()
                for method, request in (
                    (get, reader_pb2.GetMemoriesRequest()),
                    (resolve, reader_pb2.ResolveProvenanceRequest(artifact_id=artifact_id)),
                ):
                    assert refusal(channel, method, request, None).code() == grpc.StatusCode.UNAUTHENTICATED
            finally:
                channel.close()

            # Forgetting is the writer's, with the token's tenant: b forgets nothing of a's (not
            # even naming a's session), naming tenant a is PERMISSION_DENIED; a's forget records
            # a's credential, never the token.
            assert client_b.forget_memories(session_id=session.id) == []
            with pytest.raises(PermissionDeniedError):
                client_b.forget_memories(session_id=session.id, tenant="a")
            assert [v.artifact.artifact_id for v in client_a.memories()] == [artifact_id]
            assert client_a.forget_memories(session_id=session.id, by="claimed") == [artifact_id]
            assert client_a.memories(include_superseded=True, kinds=every_kind) == []
            [forgotten] = store.read_scope("a", view.artifact.scope.key()).forgotten
            assert forgotten["by"].startswith("token:")
            assert A not in str(forgotten)
    finally:
        pair.stop()
