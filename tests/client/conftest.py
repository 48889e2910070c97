"""Fixtures of the client tests: a live writer and reader (their own data root, free ports) and
clients of both kinds connected to them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rollout_client import RetryPolicy, RolloutClient

#: Short enough for tests that wait out a deadline, long enough for a writer restart.
TEST_RETRY = RetryPolicy(deadline=20.0, initial_backoff=0.02, max_backoff=0.5)


@pytest.fixture
def client(writer_process, reader_process) -> Iterator[RolloutClient]:
    """A blocking client of the test's writer and reader."""
    with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as rollout:
        yield rollout
