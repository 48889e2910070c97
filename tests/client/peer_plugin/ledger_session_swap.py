"""A pytest plugin that runs the OpenAI Agents SDK's own session tests against LedgerSession.

Loaded with ``-p ledger_session_swap`` (this folder on PYTHONPATH) by
tests/client/test_agents_peer_suite.py, in a pytest run over files of the SDK's source package.
Before any of their modules is imported it puts stand-ins in place of ``agents.SQLiteSession``,
``agents.memory.SQLiteSession`` and ``agents.extensions.memory.AsyncSQLiteSession`` (also in
``agents.extensions.memory.async_sqlite_session``): classes of the same names and constructors
that build a :class:`rollout_client.agents.LedgerSession` on the live writer and reader the test
started. The SDK's own modules keep the real classes (so its code never treats a LedgerSession
as a SQLiteSession).

A SQLite database is a namespace of session ids; here it is a tenant of the ledger: an object on
the in-memory database (the default) gets a tenant of its own, so it is fresh and private as
SQLite's in-memory database is; objects on the same file and tables share the tenant derived
from them, so the same session id names one ledger session, as SQLite shares its rows. The
session id stays the caller's, as given.

Environment: ``ROLLOUT_PEER_WRITER`` / ``ROLLOUT_PEER_READER`` (host:port, required),
``ROLLOUT_PEER_CLIENT`` (``blocking``: one RolloutClient for the run, the default; ``async``: an
AsyncRolloutClient per session object), ``ROLLOUT_PEER_PLAN`` (a JSON file: ``{"deselect":
{nodeid: reason}}``), ``ROLLOUT_PEER_REPORT`` (where the JSON report is written: per selected
case, its outcome, its first failure line and the ledger sessions it built).

Which cases run: those whose test function, or a fixture it uses (directly or through other
fixtures), names one of the session classes swapped here; minus the deselected ones.

Their hang guards are given patience (:func:`_patient_hang_guards`): the timeouts their test code
passes to ``asyncio.wait_for`` and ``asyncio.wait`` are multiplied by :data:`HANG_GUARD_FACTOR`.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import os
import sys
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rollout_client import AsyncRolloutClient, RetryPolicy, RolloutClient
from rollout_client.agents import LedgerSession

#: Names of the swapped classes: a case whose source names one of them is a session case.
SWAPPED = ("SQLiteSession", "AsyncSQLiteSession")
#: Generous: their tests wait on nothing of ours, but a loaded machine may be slow.
_RETRY = RetryPolicy(deadline=60.0, initial_backoff=0.02, max_backoff=0.5)

_blocking: RolloutClient | None = None
_blocking_lock = threading.Lock()


def _client() -> RolloutClient | AsyncRolloutClient:
    """The client a new session object uses (see ``ROLLOUT_PEER_CLIENT``)."""
    global _blocking
    writer, reader = os.environ["ROLLOUT_PEER_WRITER"], os.environ["ROLLOUT_PEER_READER"]
    if os.environ.get("ROLLOUT_PEER_CLIENT", "blocking") == "async":
        return AsyncRolloutClient(writer, reader, retry=_RETRY)
    with _blocking_lock:
        if _blocking is None:
            _blocking = RolloutClient(writer, reader, retry=_RETRY)
        return _blocking


def _database_tenant(db_path: str | Path, *tables: str) -> str:
    """The tenant standing for one SQLite database: private for ``:memory:``, else one per file
    (resolved as SQLiteSession resolves it) and table names."""
    if str(db_path) == ":memory:":
        return f"sqlite-memory-{uuid.uuid4().hex}"
    where = "\x00".join((str(Path(db_path).expanduser().resolve()), *tables))
    return f"sqlite-file-{hashlib.blake2b(where.encode(), digest_size=16).hexdigest()}"


class _OnDatabase(LedgerSession):
    """A LedgerSession built with the constructor the SDK's SQLite stores share."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        client = _client()
        super().__init__(
            session_id,
            client=client,
            session_settings=session_settings,
            tenant=_database_tenant(db_path, sessions_table, messages_table),
        )
        self._own_client = client if isinstance(client, AsyncRolloutClient) else None
        _REPORT.note_built()


class SQLiteSession(_OnDatabase):
    """Stands for ``agents.SQLiteSession`` (same constructor; see the module doc)."""


class AsyncSQLiteSession(_OnDatabase):
    """Stands for ``agents.extensions.memory.AsyncSQLiteSession``, whose ``close`` is awaited (it
    closes this object's own AsyncRolloutClient too)."""

    async def close(self) -> None:
        super().close()
        if self._own_client is not None:
            await self._own_client.close()


def _swap() -> None:
    import agents
    import agents.extensions.memory
    import agents.extensions.memory.async_sqlite_session
    import agents.memory

    agents.SQLiteSession = SQLiteSession
    agents.memory.SQLiteSession = SQLiteSession
    agents.extensions.memory.AsyncSQLiteSession = AsyncSQLiteSession
    agents.extensions.memory.async_sqlite_session.AsyncSQLiteSession = AsyncSQLiteSession


#: Their tests bound waits with ``asyncio.wait_for`` / ``asyncio.wait`` timeouts of 1 to 5 s: hang
#: guards sized for a SQLite file in the test's own process. Here each session call is an RPC to a
#: writer and a reader that share the machine with the rest of our suite and whatever else loads
#: it: a Runner turn of 0.07 s on an idle machine has taken over 2 s under load. Their assertions
#: are unchanged; a case that hangs still ends (and pytest-timeout bounds each case).
HANG_GUARD_FACTOR = 30


def _patient_hang_guards(tests_dir: Path) -> None:
    """Multiply by :data:`HANG_GUARD_FACTOR` the timeout of ``asyncio.wait_for`` and
    ``asyncio.wait`` when called from a file under ``tests_dir`` (their test code); calls from
    anywhere else (the SDK, our client's attempt timeouts) are passed on unchanged. A test that
    patches either function itself replaces this for its duration."""
    wait_for, wait = asyncio.wait_for, asyncio.wait
    folder = str(tests_dir) + os.sep

    def patient(timeout: float | None) -> float | None:
        called_from_tests = sys._getframe(2).f_code.co_filename.startswith(folder)
        return timeout * HANG_GUARD_FACTOR if called_from_tests and timeout is not None else timeout

    def patient_wait_for(awaitable: Any, timeout: float | None) -> Any:
        return wait_for(awaitable, patient(timeout))

    def patient_wait(
        fs: Any, *, timeout: float | None = None, return_when: str = asyncio.ALL_COMPLETED
    ) -> Any:
        return wait(fs, timeout=patient(timeout), return_when=return_when)

    asyncio.wait_for = patient_wait_for  # type: ignore[assignment]
    asyncio.wait = patient_wait  # type: ignore[assignment]


def _plan() -> Mapping[str, str]:
    """``{case or test function id: reason}`` of the cases to deselect (``ROLLOUT_PEER_PLAN``)."""
    path = os.environ.get("ROLLOUT_PEER_PLAN")
    return dict(json.loads(Path(path).read_text())["deselect"]) if path else {}


def _source(function: Any) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _names_a_session(item: pytest.Item) -> bool:
    """Whether the case's test function, or a fixture it uses, names a swapped class."""
    if any(name in _source(getattr(item, "function", None)) for name in SWAPPED):
        return True
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs if info is not None else {}
    return any(
        name in _source(definition.func)
        for fixture in item.fixturenames
        for definition in definitions.get(fixture, ())
        for name in SWAPPED
    )


class _Report:
    """Per selected case: outcome (passed, failed, skipped), the first line of its failure and the
    ledger sessions it built; and the deselected cases with their reasons."""

    def __init__(self) -> None:
        self.cases: dict[str, dict[str, Any]] = {}
        self.deselected: dict[str, str] = {}
        self.current: str | None = None
        self.built: dict[str, int] = {}

    def note_built(self) -> None:
        if self.current is not None:
            self.built[self.current] = self.built.get(self.current, 0) + 1

    def add(self, report: pytest.TestReport) -> None:
        case = self.cases.setdefault(report.nodeid, {"outcome": "passed", "failure": ""})
        if report.failed and case["outcome"] != "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            text = crash.message if crash is not None else str(report.longrepr)
            case.update(outcome="failed", when=report.when, failure=text.strip().splitlines()[0][:300])
        elif report.skipped and case["outcome"] == "passed":
            case.update(outcome="skipped", failure=str(report.longrepr)[-300:])

    def write(self, path: Path) -> None:
        for nodeid, case in self.cases.items():
            case["ledger_sessions"] = self.built.get(nodeid, 0)
        path.write_text(json.dumps({"cases": self.cases, "deselected": self.deselected}, indent=1))


_REPORT = _Report()


def pytest_configure(config: pytest.Config) -> None:
    _swap()
    _patient_hang_guards(config.rootpath / "tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    plan = _plan()
    used: set[str] = set()
    kept, dropped = [], []
    for item in items:
        key = next((k for k in (item.nodeid, item.nodeid.split("[")[0]) if k in plan), None)
        if key is not None:
            used.add(key)
            _REPORT.deselected[item.nodeid] = plan[key]
        (kept if key is None and _names_a_session(item) else dropped).append(item)
    stale = sorted(set(plan) - used)
    if stale:
        raise pytest.UsageError(f"deselected cases that the suite does not have: {stale}")
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _REPORT.current = item.nodeid
    try:
        return (yield)
    finally:
        _REPORT.current = None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _REPORT.add(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("ROLLOUT_PEER_REPORT")
    if path:
        _REPORT.write(Path(path))
    if _blocking is not None:
        _blocking.close()
