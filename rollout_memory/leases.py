"""Leases on distillation jobs: ``memories/<tenant key>/leases/<name>.lease``.

A lease is a file created with ``O_CREAT | O_EXCL`` (exactly one creator wins), holding
``{"worker": "<worker id>", "token": "<random>", "expires_at": <POSIX seconds>}``. Its
holder releases it by removing it (only while the token is still its own). A lease
whose time has passed, that names the asking worker itself (a worker restarted with
the same id after a crash takes its leases back at once), or that names a worker of the
default form ``<host>:<pid>`` on this host whose process is gone (a worker killed and run
again without ``--worker-id`` gets a new pid), is broken: renamed aside (one
``rename`` wins among breakers, the others find no file) and removed, then created anew.
A lease file being written (empty or partial) counts as held until its mtime plus the
lease time.

A lease only saves work: it keeps a second worker from calling the extractor for a session
the first is distilling. It is not what keeps a session from being distilled twice: a
worker that stalls past its lease may find the session taken over, and its commit is
refused by the store's watermark check (memory_store.store, the fence).
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from shared.layout import PRIVATE_FILE_MODE, make_private_dirs


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease held: its file, worker and token."""

    path: Path
    worker: str
    token: str


def _holder(path: Path, lease_seconds: float) -> tuple[str, float] | None:
    """(worker, expires_at) of a lease file, or None when there is none."""
    try:
        data = path.read_bytes()
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    try:
        held = orjson.loads(data)
        return str(held["worker"]), float(held["expires_at"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return "", status.st_mtime + lease_seconds  # being written


def holder_gone(worker: str) -> bool:
    """Whether ``worker`` is of the default form ``<host>:<pid>``, names this host, and no process
    has that pid (a pid reused since counts as alive: the lease then runs out its time)."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        return False
    return False


def acquire(
    folder: Path, name: str, worker: str, lease_seconds: float, clock: Callable[[], float]
) -> Lease | None:
    """Take the lease ``name`` in ``folder`` for ``worker``; None while another worker holds it.

    Raises OSError when the folder cannot be written.
    """
    make_private_dirs(folder)
    path = folder / f"{name}.lease"
    for _ in range(2):
        token = uuid.uuid4().hex
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        except FileExistsError:
            holder = _holder(path, lease_seconds)
            if (
                holder is not None
                and holder[0] != worker
                and holder[1] > clock()
                and not holder_gone(holder[0])
            ):
                return None
            aside = path.with_name(f"{path.name}.broken-{token}")
            try:
                os.rename(path, aside)
            except FileNotFoundError:
                continue  # another breaker won, or the holder released it
            if _holder(aside, lease_seconds) != holder:
                # Another breaker made a fresh lease between our look and our rename: put it back.
                with contextlib.suppress(FileExistsError):
                    os.link(aside, path)
                os.unlink(aside)
                return None
            os.unlink(aside)
            continue
        try:
            os.write(
                fd, orjson.dumps({"worker": worker, "token": token, "expires_at": clock() + lease_seconds})
            )
            os.fsync(fd)
        finally:
            os.close(fd)
        return Lease(path, worker, token)
    return None


def held(lease: Lease) -> bool:
    """Whether ``lease`` is still its holder's (its file names its token)."""
    try:
        return bool(orjson.loads(lease.path.read_bytes()).get("token") == lease.token)
    except (FileNotFoundError, orjson.JSONDecodeError, AttributeError):
        return False


def release(lease: Lease) -> None:
    """Give the lease up (its file is removed only while it is still this holder's)."""
    if held(lease):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lease.path)
