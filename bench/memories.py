"""Memory reads served by the reader (docs/memory.md §6) against their bodies called in-process.

Two figures, each a ratio against a baseline measured in the same run (calls in pairs whose
order alternates; the writer and reader run in this process, as InProcessLedger serves them):

* ``get``: the median time of one GetMemories through the SDK (a reader on loopback, the
  views converted to protobuf and back) against the median time of
  :func:`rollout_memory.get_memories` on the same store in this process; the store holds
  ``--artifacts`` artifacts over ``--scopes`` scopes, and each call asks for the newest
  ``--limit`` of every scope, superseded ones included.
* ``resolve``: the median time of one ResolveProvenance (the reader reads the cited
  session's file) against :func:`rollout_memory.resolve_provenance` reading the same session
  through WatchSession with the SDK (how it was resolved before the RPC); the artifact cites
  the first and last messages of a session of ``--messages`` messages of ~1 KB.

Usage:

    .venv/bin/python bench/memories.py [--artifacts 2000] [--scopes 20] [--limit 50]
                                       [--messages 2000] [--calls 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _support import HelpFormatter

from memory_store.store import MemoryStore
from rollout_client import RolloutClient, user
from rollout_client.in_process import InProcessLedger
from rollout_memory import client_source_reader, get_memories, resolve_provenance
from rollout_memory.sources import read_source_records
from shared.layout import DataRoot
from shared.memory import Artifact, ArtifactKind, Generator, Scope, new_artifact_id, stamp_source
from shared.records import now_timestamp

TENANT = "bench"


def paired_medians(
    first: Callable[[], object], second: Callable[[], object], calls: int
) -> tuple[float, float]:
    """The median seconds of one call of each, measured in pairs whose order alternates (so a
    machine whose load drifts loads both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for index in range(calls):
        for which in (0, 1) if index % 2 == 0 else (1, 0):
            started = time.perf_counter()
            (first, second)[which]()
            times[which].append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--artifacts", type=int, default=2000)
    parser.add_argument("--scopes", type=int, default=20)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/memories.py", *sys.argv[1:]]))
    with (
        tempfile.TemporaryDirectory() as scratch,
        InProcessLedger(Path(scratch) / "data") as ledger,
        RolloutClient(ledger.writer, ledger.reader) as client,
    ):
        session = client.create_session("bench", root=True, tenant=TENANT, cwd="/bench")
        for start in range(0, args.messages, 100):
            count = min(100, args.messages - start)
            session.append(*(user(f"message {start + i} " + "x" * 1000) for i in range(count)))
        session.stop("completed", "done")
        records = read_source_records(client, session.id, args.messages, tenant=TENANT)
        source = stamp_source(session.id, records, [1, args.messages])
        store = MemoryStore(DataRoot(ledger.data_dir).memories_folder)
        per_scope = args.artifacts // args.scopes
        for index in range(args.scopes):
            scope = Scope(cwd=f"/bench/{index}")
            artifacts = [
                Artifact(
                    new_artifact_id(),
                    ArtifactKind.MEMORY,
                    f"fact {index}.{n}",
                    TENANT,
                    scope,
                    now_timestamp(),
                    Generator("bench", "bench/v1"),
                    (source,),
                )
                for n in range(per_scope)
            ]
            store.commit_job(TENANT, scope, session.id, index + 1, artifacts)
        artifact = artifacts[0]

        def local_get() -> object:
            return get_memories(store, tenant=TENANT, scope=None, limit=args.limit, include_superseded=True)

        def wire_get() -> object:
            return client.memories(limit=args.limit, include_superseded=True, tenant=TENANT)

        def watch_resolve() -> object:
            return resolve_provenance(client_source_reader(client), tenant=TENANT, artifact=artifact)

        def wire_resolve() -> object:
            return client.resolve_provenance(artifact.artifact_id, tenant=TENANT)

        assert len(wire_get()) == len(local_get()) == args.limit  # type: ignore[arg-type]
        assert wire_resolve() == watch_resolve()
        wire, local = paired_medians(wire_get, local_get, args.calls)
        print(
            f"get: GetMemories {wire * 1000:.2f} ms, get_memories in-process {local * 1000:.2f} ms"
            f" ({args.artifacts} artifacts, {args.scopes} scopes, limit {args.limit}):"
            f" ratio wire/function {wire / local:.2f}"
        )
        served, watched = paired_medians(wire_resolve, watch_resolve, args.calls)
        print(
            f"resolve: ResolveProvenance {served * 1000:.2f} ms, through WatchSession"
            f" {watched * 1000:.2f} ms ({args.messages} messages read):"
            f" ratio served/watched {served / watched:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
