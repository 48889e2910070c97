"""Writers of a cluster as the cluster tests and bench/cluster.py start and question them: the
process, etcd's owners of the shards, and the NOT_OWNER answer's details (docs/cluster.md §4.1)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import grpc
from google.rpc import error_details_pb2, status_pb2

from shared.reasons import NOT_OWNER
from tests.processes import ServiceProcess, start_service
from writer_service.coordination import ClusterKeys, EtcdClient


def start_cluster_writer(
    data_dir: Path,
    log: Path,
    etcd: str,
    cluster: str,
    shards: int,
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> ServiceProcess:
    """``rollout serve-writer --etcd ETCD --cluster CLUSTER --shards SHARDS`` with the options
    ``extra`` (and ``env`` for a test hook), listening."""
    return start_service(
        "writer",
        data_dir,
        log,
        "--etcd",
        etcd,
        "--cluster",
        cluster,
        "--shards",
        str(shards),
        *extra,
        env=env,
    )


async def shard_owners(etcd: EtcdClient, keys: ClusterKeys) -> dict[int, tuple[str, int]]:
    """Shard -> (owner address, epoch), as etcd holds them now."""
    snapshot = await etcd.owners(keys.shards)
    return {
        keys.shard_of(key): (record.owner.address, record.epoch) for key, record in snapshot.owners.items()
    }


def not_owner_metadata(error: grpc.RpcError) -> dict[str, str] | None:
    """The ErrorInfo metadata (shard, epoch, owner_address, owner_epoch) of an UNAVAILABLE
    NOT_OWNER answer; None for any other error."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info) and info.reason == NOT_OWNER:
                    return dict(info.metadata)
    return None
