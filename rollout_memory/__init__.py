"""Memory: what later sessions may learn from earlier ones, kept apart from the rollouts.

The artifact format and provenance rules are shared (:mod:`shared.memory`); this package
is the rest, a client of the reader and never part of the writer's or reader's paths:
the artifact store under ``<data root>/memories/`` (:mod:`rollout_memory.store`), job
leases (:mod:`rollout_memory.leases`), extractors (:mod:`rollout_memory.extractors`), the
pipeline that ``rollout memory run`` runs (:mod:`rollout_memory.pipeline`), its staleness
sweep (:mod:`rollout_memory.staleness`) and the reads
(:mod:`rollout_memory.reading`). docs/memory.md is the specification.
"""

from rollout_memory.extractors import ChatCompletionsExtractor, CommandExtractor, Extractor, ExtractorError
from rollout_memory.pipeline import MemoryPipeline, PipelineConfig, RunReport
from rollout_memory.reading import ResolvedMessage, ResolvedProvenance, get_memories, resolve_provenance
from rollout_memory.store import MemoryStore

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
    "get_memories",
    "resolve_provenance",
]
