"""The memory artifact store (``<data root>/memories/``) and its reads: what the writer
(ForgetMemories), the reader (GetMemories, ResolveProvenance) and the memory pipeline
(:mod:`rollout_memory`) share. It depends on :mod:`shared` alone, so the services never import
the pipeline or the client. docs/memory.md §5-§6 is the specification."""
