"""LangGraph's conformance suite for checkpointers (``langgraph-checkpoint-conformance``) over
``rollout_client.langgraph.LedgerSaver`` against a live writer and reader (issue 25): every
base capability passes, and so does every extended capability the saver implements. The
suite's report is printed (``pytest -s`` shows it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from rollout_client import AsyncRolloutClient, RolloutClient
from rollout_client.langgraph import LedgerSaver
from tests.client.conftest import TEST_RETRY

#: The extended capabilities LedgerSaver implements: all of them.
IMPLEMENTED_EXTENDED = {"copy_thread", "prune", "delete_for_runs"}


#: Base capabilities the saver does not have.
BASE_MISSING: set[str] = set()


def _check(report) -> None:
    report.print_report()
    for capability in BASE_CAPABILITIES:
        result = report.results[capability.value]
        if capability.value in BASE_MISSING:
            assert not result.detected, f"{capability.value} is implemented now: take it out of BASE_MISSING"
        else:
            assert (result.detected, result.passed) == (True, True), (capability.value, result)
    assert report.passed_all_base() == (not BASE_MISSING)
    for capability in IMPLEMENTED_EXTENDED:
        result = report.results[capability]
        assert (result.detected, result.passed) == (True, True), (capability, result)


def test_conformance_over_the_async_client(writer_process, reader_process) -> None:
    async def run():
        async with AsyncRolloutClient(
            writer_process.address, reader_process.address, retry=TEST_RETRY
        ) as client:

            @checkpointer_test(name="LedgerSaver (AsyncRolloutClient)")
            async def saver() -> AsyncGenerator[LedgerSaver, None]:
                yield LedgerSaver(client)

            return await validate(saver, progress=ProgressCallbacks.verbose())

    _check(asyncio.run(run()))


def test_conformance_over_the_blocking_client(writer_process, reader_process) -> None:
    with RolloutClient(writer_process.address, reader_process.address, retry=TEST_RETRY) as client:

        @checkpointer_test(name="LedgerSaver (RolloutClient)")
        async def saver() -> AsyncGenerator[LedgerSaver, None]:
            yield LedgerSaver(client)

        _check(asyncio.run(validate(saver, progress=ProgressCallbacks.verbose())))


@pytest.mark.parametrize("capability", sorted(IMPLEMENTED_EXTENDED))
def test_the_implemented_extensions_are_detected(capability) -> None:
    from langgraph.checkpoint.conformance.capabilities import Capability, DetectedCapabilities

    class _Probe(LedgerSaver):
        def __init__(self) -> None:  # no client needed to detect methods
            pass

    assert Capability(capability) in DetectedCapabilities.from_instance(_Probe()).detected
