"""Virtual shards: which shard holds a session, and how many shards a data root has (docs/spec.md §7).

A data root created sharded holds a fixed number of virtual shards, chosen when the root
is created and never changed (:data:`DEFAULT_SHARDS` unless the writer that creates it is
told otherwise). A session lives in one shard for its whole life::

    shard_of(session_id, shards) = int.from_bytes(BLAKE2b-64(session_id), "big") % shards

* ``session_id`` is the id's canonical text, the lowercase hyphenated UUID of docs/spec.md §2.9
  (``01a22c15-89a6-7d3d-b5b7-165622bd350c``), hashed as its ASCII bytes;
* BLAKE2b-64 is BLAKE2b with an 8-byte digest (``hashlib.blake2b(data, digest_size=8)``:
  the digest length is a parameter of the hash, so this is not a cut BLAKE2b-512), no key,
  salt or personalization; read as an unsigned big-endian integer.

The rule is the cluster's format, not an implementation detail: the writer places files
with it, the reader finds them with it and clients will route with it (the only function
computing it is :func:`shard_of`; tests pin known ids to their shards). Changing it, or
the shard count of an existing root, would move every session.

The count is recorded in the data root, in ``<data root>/cluster.json`` (mode 0600,
created once, atomically: written under a temporary name, fsynced, linked, its folder
fsynced)::

    {"hash":"blake2b-64","shards":256}

A root without it is the single-shard layout of earlier versions (shared.layout).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

#: The shard count of a data root created without one given.
DEFAULT_SHARDS = 256
#: The largest shard count a data root may have.
MAX_SHARDS = 65536
#: The name of :func:`shard_of`'s hash, as ``cluster.json`` records it.
HASH_NAME = "blake2b-64"
#: The file recording a sharded root's shard count, in the data root.
CLUSTER_FILE = "cluster.json"
#: Bytes of the BLAKE2b digest :func:`shard_of` reads.
_DIGEST_BYTES = 8


class ClusterFileError(RuntimeError):
    """``cluster.json`` cannot be read as a shard record (names the file and what is wrong).

    Raised at start-up (the service stops with the message); never by a call that finds
    the record sound.
    """


def check_shards(shards: object) -> int:
    """``shards`` when it is a valid shard count (1..:data:`MAX_SHARDS`), else ValueError."""
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"a shard count is a whole number from 1 to {MAX_SHARDS}, not {shards!r}")
    return shards


def shard_of(session_id: str, shards: int) -> int:
    """The shard (0..shards-1) of a session: BLAKE2b-64 of its id, big-endian, modulo ``shards``.

    ``session_id`` must be in its canonical form (lowercase UUID, shared.naming validates
    it): another spelling of the same UUID hashes elsewhere. See the module docstring.
    """
    digest = hashlib.blake2b(session_id.encode("ascii"), digest_size=_DIGEST_BYTES).digest()
    return int.from_bytes(digest, "big") % shards


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """What ``cluster.json`` records: the shard count and the name of the shard hash."""

    shards: int
    hash: str = HASH_NAME

    def encode(self) -> bytes:
        return orjson.dumps({"hash": self.hash, "shards": self.shards}, option=orjson.OPT_SORT_KEYS)


def read_cluster(root: Path) -> ClusterRecord | None:
    """The shard record of data root ``root``; None when it has none (not sharded, or not created).

    Raises ClusterFileError when the file exists but is not a record this version reads
    (malformed, another hash, a shard count out of range), OSError when it cannot be read.
    """
    path = root / CLUSTER_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ClusterFileError(
            f"{path} is not JSON ({exc}); it should be {ClusterRecord(1).encode()!r}"
        ) from exc
    if not isinstance(body, dict) or body.get("hash") != HASH_NAME:
        raise ClusterFileError(
            f'{path} names no shard hash this version knows (expected "hash": {HASH_NAME!r}): {raw[:200]!r}'
        )
    try:
        return ClusterRecord(check_shards(body.get("shards")))
    except ValueError as exc:
        raise ClusterFileError(f"{path}: {exc}") from exc


def create_cluster(root: Path, shards: int) -> ClusterRecord:
    """Record ``shards`` in data root ``root`` (an existing folder) unless a record is there already;
    returns the record that holds (the existing one when another process created it first).

    The file appears whole or not at all (temporary name, fsync, link, folder fsync; mode 0600).
    Raises ValueError for a bad shard count, ClusterFileError for an unreadable existing
    record, OSError when the disk refuses.
    """
    record = ClusterRecord(check_shards(shards))
    path = root / CLUSTER_FILE
    temporary = root / f".{CLUSTER_FILE}.tmp-{os.urandom(4).hex()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(record.encode() + b"\n")
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            existing = read_cluster(root)
            if existing is None:  # linked by another process, then removed behind its back
                raise ClusterFileError(f"{path} vanished while it was being created; start again") from None
            return existing
    finally:
        temporary.unlink(missing_ok=True)
    folder = os.open(root, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return record
