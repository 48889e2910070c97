"""Several writer processes on one data root, each owning the shards a static map gives it
(``serve-writer --static-shard-map``: writer_service.ownership.StaticOwnership), for routing tests
without a coordination service. A map change is a restart of the writers with a new map."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from shared.shards import create_cluster, shard_of
from tests.ports import free_port
from tests.processes import ServiceProcess, start_service


def id_in_shard(shard: int, shards: int) -> str:
    """A fresh session id (canonical UUID) whose shard is ``shard``."""
    while True:
        session_id = str(uuid.uuid4())
        if shard_of(session_id, shards) == shard:
            return session_id


@dataclass
class StaticCluster:
    """Writers at ``addresses`` on data root ``data_dir`` of ``shards`` shards; ``owners`` maps each
    shard to (address, epoch), written to ``map_path`` for the writers started after it."""

    data_dir: Path
    shards: int
    addresses: list[str]
    owners: dict[int, tuple[str, int]] = field(default_factory=dict)
    writers: dict[str, ServiceProcess] = field(default_factory=dict)
    generation: int = 0

    @classmethod
    def create(cls, root: Path, writers: int, shards: int = 16) -> StaticCluster:
        """A new data root under ``root`` and ``writers`` free addresses, shard s owned by writer
        s mod ``writers`` at epoch 1 (nothing started)."""
        data_dir = root / "data"
        data_dir.mkdir()
        create_cluster(data_dir, shards)
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(writers)]
        cluster = cls(data_dir, shards, addresses)
        cluster.owners = {shard: (addresses[shard % writers], 1) for shard in range(shards)}
        return cluster

    @property
    def map_path(self) -> Path:
        return self.data_dir.parent / f"shard-map-{self.generation}.json"

    def write_map(self) -> Path:
        """Write the map of :attr:`owners` to a new file (a new generation); returns its path."""
        self.generation += 1
        grouped: dict[tuple[str, int], list[int]] = {}
        for shard, owner in sorted(self.owners.items()):
            grouped.setdefault(owner, []).append(shard)
        body = {
            "shards": self.shards,
            "owners": [
                {"address": address, "epoch": epoch, "shards": owned}
                for (address, epoch), owned in grouped.items()
            ],
        }
        self.map_path.write_bytes(orjson.dumps(body))
        return self.map_path

    def start(self, *addresses: str) -> None:
        """Start the writers at ``addresses`` (all by default) with the current map."""
        path = self.write_map()
        for address in addresses or self.addresses:
            log = self.data_dir.parent / f"writer-{address.rsplit(':', 1)[1]}-{os.urandom(3).hex()}.log"
            self.writers[address] = start_service(
                "writer", self.data_dir, log, "--static-shard-map", str(path), address=address
            )

    def stop(self, *addresses: str) -> None:
        """Stop (SIGTERM, drained) the writers at ``addresses`` (all by default)."""
        for address in addresses or list(self.writers):
            self.writers.pop(address).stop()

    def move(self, shard: int, address: str) -> None:
        """Give ``shard`` to ``address`` at the next epoch (in the map of the next start)."""
        self.owners[shard] = (address, self.owners[shard][1] + 1)

    def owner(self, session_id: str) -> str:
        """The address the current map gives ``session_id``'s shard."""
        return self.owners[shard_of(session_id, self.shards)][0]

    def shards_of(self, address: str) -> list[int]:
        return sorted(shard for shard, (owner, _) in self.owners.items() if owner == address)
