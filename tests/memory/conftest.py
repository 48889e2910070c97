"""Fixtures of the memory tests: a ledger in this process, its artifact store, a fake
chat-completions endpoint on loopback, and a pipeline wired to all three."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_client import RolloutClient
from rollout_client.in_process import InProcessLedger
from rollout_memory import ChatCompletionsExtractor, MemoryPipeline, MemoryStore, PipelineConfig
from shared.layout import DataRoot
from tests.memory.fake_openai import FakeChatCompletions, Responder

TENANT = "acme"
CWD = "/src/shop"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[InProcessLedger]:
    with InProcessLedger(tmp_path / "ledger") as running:
        yield running


@pytest.fixture
def client(ledger: InProcessLedger) -> Iterator[RolloutClient]:
    with ledger.client() as opened:
        yield opened


@pytest.fixture
def store(ledger: InProcessLedger) -> MemoryStore:
    return MemoryStore(DataRoot(ledger.data_dir).memories_folder)


PipelineFactory = Callable[..., MemoryPipeline]


@pytest.fixture
def pipeline_for(
    client: RolloutClient, store: MemoryStore
) -> Iterator[Callable[[Responder], tuple[MemoryPipeline, FakeChatCompletions]]]:
    """A pipeline of tenant ``acme`` whose extractor is a fake endpoint answering with ``responder``."""
    servers: list[FakeChatCompletions] = []

    def make(responder: Responder, *, tenant: str = TENANT, worker: str = "w1", **config: Any):
        fake = FakeChatCompletions(responder).__enter__()
        servers.append(fake)
        extractor = ChatCompletionsExtractor(fake.base_url, "fake-model", "sk-test")
        pipeline = MemoryPipeline(
            client,
            store,
            extractor,
            tenant=tenant,
            config=PipelineConfig(worker_id=worker, **config),
            sleep=lambda _seconds: None,
        )
        return pipeline, fake

    yield make
    for fake in servers:
        fake.__exit__()
