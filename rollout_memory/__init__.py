"""Memory: what later sessions may learn from earlier ones, kept apart from the rollouts.

The artifact format and provenance rules are shared (:mod:`shared.memory`); this package
is the rest: the artifact store under ``<data root>/memories/`` (:mod:`memory_store.store`),
job leases (:mod:`rollout_memory.leases`), extractors (:mod:`rollout_memory.extractors`), the
pipeline that ``rollout memory run`` runs (:mod:`rollout_memory.pipeline`: a client of the
reader, never part of the writer's or reader's paths), its staleness sweep
(:mod:`rollout_memory.staleness`) and the reads (:mod:`memory_store.reading`), which the
reader serves as its GetMemories and ResolveProvenance RPCs. docs/memory.md is the
specification.

The names below are imported on first use, so that the reader, which imports the store
and the reads, never loads the pipeline or the client it is built on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memory_store.reading import get_memories, resolve_provenance
    from memory_store.store import MemoryStore
    from rollout_memory.extractors import (
        ChatCompletionsExtractor,
        CommandExtractor,
        Extractor,
        ExtractorError,
    )
    from rollout_memory.pipeline import MemoryPipeline, PipelineConfig, RunReport
    from rollout_memory.sources import client_source_reader
    from shared.memory import ResolvedMessage, ResolvedProvenance

_HOMES = {
    "ChatCompletionsExtractor": "rollout_memory.extractors",
    "CommandExtractor": "rollout_memory.extractors",
    "Extractor": "rollout_memory.extractors",
    "ExtractorError": "rollout_memory.extractors",
    "MemoryPipeline": "rollout_memory.pipeline",
    "PipelineConfig": "rollout_memory.pipeline",
    "RunReport": "rollout_memory.pipeline",
    "get_memories": "memory_store.reading",
    "resolve_provenance": "memory_store.reading",
    "client_source_reader": "rollout_memory.sources",
    "MemoryStore": "memory_store.store",
    "ResolvedMessage": "shared.memory",
    "ResolvedProvenance": "shared.memory",
}

__all__ = [
    "ChatCompletionsExtractor",
    "CommandExtractor",
    "Extractor",
    "ExtractorError",
    "MemoryPipeline",
    "MemoryStore",
    "PipelineConfig",
    "ResolvedMessage",
    "ResolvedProvenance",
    "RunReport",
    "client_source_reader",
    "get_memories",
    "resolve_provenance",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rollout_memory' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
