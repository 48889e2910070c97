"""Fixtures for the writer's tests: which durable-write path the committer takes."""

from __future__ import annotations

import pytest

import writer_service.committer as committer

#: The two ways a batch is made durable (writer_service.committer._write).
SYNC_PATHS = ("pwritev2", "write+fdatasync")


@pytest.fixture(params=SYNC_PATHS)
def sync_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per durable-write path: one pwritev2(RWF_DSYNC) call, or write + fdatasync."""
    path: str = request.param
    if path == "pwritev2" and not committer._dsync_writes:
        pytest.skip("this kernel or file system refuses pwritev2(RWF_DSYNC)")
    monkeypatch.setattr(committer, "_dsync_writes", path == "pwritev2")
    return path
