"""Virtual shards: a session's shard by a stable hash of its id, and the shard record (shared.shards)."""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest

from shared.shards import (
    CLUSTER_FILE,
    DEFAULT_SHARDS,
    MAX_SHARDS,
    ClusterFileError,
    ClusterRecord,
    create_cluster,
    read_cluster,
    shard_of,
)

#: Known ids and their shards: the format of every sharded data root, never to change.
PINNED = [
    ("01a22c15-89a6-7d3d-b5b7-165622bd350c", 256, 96),
    ("00000000-0000-0000-0000-000000000000", 256, 10),
    ("ffffffff-ffff-ffff-ffff-ffffffffffff", 256, 233),
    ("01900000-0000-7000-8000-000000000001", 256, 245),
    ("01a22c15-89a6-7d3d-b5b7-165622bd350c", 7, 1),
    ("01a22c15-89a6-7d3d-b5b7-165622bd350c", 65536, 35936),
    ("01a22c15-89a6-7d3d-b5b7-165622bd350c", 1, 0),
]


def independent_shard(session_id: str, shards: int) -> int:
    """The documented rule, written out here: BLAKE2b with an 8-byte digest, big-endian, modulo."""
    digest = hashlib.new("blake2b", session_id.encode("ascii"), digest_size=8).hexdigest()
    return int(digest, 16) % shards


@pytest.mark.parametrize(("session_id", "shards", "shard"), PINNED)
def test_known_ids_keep_their_shards(session_id: str, shards: int, shard: int) -> None:
    """Each pinned id lands in its pinned shard, as the documented rule computes it."""
    assert shard_of(session_id, shards) == shard
    assert independent_shard(session_id, shards) == shard


def test_the_hash_is_blake2b_with_an_eight_byte_digest() -> None:
    """The 64-bit value behind a pinned shard is BLAKE2b-64 of the id's text (not a cut BLAKE2b-512)."""
    value = int.from_bytes(hashlib.blake2b(PINNED[0][0].encode(), digest_size=8).digest(), "big")
    assert value == 0xC7DD1AD5DF978C60
    assert value % 256 == shard_of(PINNED[0][0], 256)
    assert int.from_bytes(hashlib.blake2b(PINNED[0][0].encode()).digest()[:8], "big") % 256 != 96


def test_random_ids_agree_with_the_documented_rule_and_spread_over_every_shard() -> None:
    """25,600 random ids: every one as the rule computes it, every shard used, none over twice its share."""
    ids = [str(uuid.UUID(bytes=os.urandom(16), version=4)) for _ in range(25_600)]
    shards = [shard_of(session_id, DEFAULT_SHARDS) for session_id in ids]
    assert shards == [independent_shard(session_id, DEFAULT_SHARDS) for session_id in ids]
    counts = Counter(shards)
    assert sorted(counts) == list(range(DEFAULT_SHARDS))
    assert max(counts.values()) < 2 * 25_600 / DEFAULT_SHARDS


def test_the_record_is_created_once_private_and_whole(tmp_path: Path) -> None:
    """cluster.json holds the hash and count as compact sorted JSON, mode 0600, no temporary left;
    a second creation keeps the first record."""
    assert read_cluster(tmp_path) is None
    assert create_cluster(tmp_path, 16) == ClusterRecord(16)
    path = tmp_path / CLUSTER_FILE
    assert path.read_bytes() == b'{"hash":"blake2b-64","shards":16}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert create_cluster(tmp_path, 256) == ClusterRecord(16)
    assert read_cluster(tmp_path) == ClusterRecord(16)
    assert sorted(os.listdir(tmp_path)) == [CLUSTER_FILE]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        b'{"shards":16}',
        b'{"hash":"sha256-64","shards":16}',
        b'{"hash":"blake2b-64","shards":0}',
        b'{"hash":"blake2b-64","shards":"16"}',
        b'{"hash":"blake2b-64","shards":true}',
        orjson.dumps({"hash": "blake2b-64", "shards": MAX_SHARDS + 1}),
    ],
)
def test_a_record_this_version_cannot_read_is_refused_naming_the_file(tmp_path: Path, body: bytes) -> None:
    """A malformed record, another hash or a count out of range is ClusterFileError naming the file."""
    (tmp_path / CLUSTER_FILE).write_bytes(body)
    with pytest.raises(ClusterFileError, match=CLUSTER_FILE):
        read_cluster(tmp_path)


@pytest.mark.parametrize("shards", [0, -1, MAX_SHARDS + 1])
def test_a_bad_count_creates_nothing(tmp_path: Path, shards: int) -> None:
    """A shard count out of 1..MAX_SHARDS is refused before anything is written."""
    with pytest.raises(ValueError, match="shard count"):
        create_cluster(tmp_path, shards)
    assert os.listdir(tmp_path) == []
