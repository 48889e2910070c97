"""Fixtures: real etcd clusters (1 and 3 members) on loopback, stopped after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.etcd import EtcdCluster, etcd_binary, etcd_cluster


def _cluster(root: Path, size: int) -> Iterator[EtcdCluster]:
    if etcd_binary() is None:
        pytest.fail("etcd is not installed: apt-get install -y etcd-server (.ci/run does it on CI)")
    with etcd_cluster(root, size) as cluster:
        yield cluster


@pytest.fixture
def etcd1(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A one-member etcd cluster."""
    yield from _cluster(tmp_path, 1)


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A three-member etcd cluster."""
    yield from _cluster(tmp_path, 3)
