"""The OpenAI Agents SDK's own session tests, run against LedgerSession.

The SDK's source package (``openai_agents-<version>.tar.gz``, the version the ``dev`` extra pins)
holds its tests. scripts/test.sh downloads it once into .cache/peer-suites/ (see
:data:`FETCH`); without it this test fails, it never skips. The tests/ folder and pyproject.toml
(their pytest settings) are extracted into a temporary folder, and pytest runs the session files
(:data:`FILES`) there in one process, with tests/client/peer_plugin/ledger_session_swap.py loaded
first: it swaps ``SQLiteSession`` and ``AsyncSQLiteSession`` for classes of the same constructors
that build a LedgerSession on this test's writer and reader, and runs only the cases that use
one. Their assertions are untouched. The cases that cannot apply to any store but SQLite are
deselected, each with its reason, in :data:`DESELECTED`; every other case must pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import REPO

#: The SDK version whose tests run (the one installed: the dev extra pins it) and its source package.
SDK_VERSION = "0.24.0"
SDIST = REPO / ".cache" / "peer-suites" / f"openai_agents-{SDK_VERSION}.tar.gz"
SDIST_SHA256 = "4b4b285f4fed81fdf1b4ac426a9101658d9cd29b4fb1aaeee18f639b77e704e3"
FETCH = (
    f".venv/bin/python -m pip download openai-agents=={SDK_VERSION} --no-binary :all: --no-deps"
    f" -d {SDIST.parent.relative_to(REPO)}"
)
PLUGIN_DIR = Path(__file__).resolve().parent / "peer_plugin"

#: Their files that construct a SQLiteSession (or AsyncSQLiteSession): the session, limit and
#: async-store tests, and the Runner, compaction, encrypted-session and resume tests using one.
FILES = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/extensions/memory/test_async_sqlite_session.py",
    "tests/extensions/memory/test_encrypt_session.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/memory/test_compaction_suffix.py",
    "tests/memory/test_openai_responses_compaction_session.py",
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_max_turns.py",
    "tests/test_native_tool_failure_history.py",
    "tests/test_programmatic_tool_calling.py",
    "tests/test_run_impl_resume_paths.py",
    "tests/test_soft_cancel.py",
    "tests/test_tool_batch_failure_history.py",
    "tests/test_tool_failure_boundaries.py",
)

CONNECTIONS = (
    "SQLiteSession internals: the test reads or replaces the store's sqlite3 connections"
    " (_connections, _get_connection, _locked_connection) to count, pause, fail or close them"
)
FILE_LOCK = "SQLiteSession internals: its process-local lock per database file (_lock, _file_locks)"
SQL_ROWS = (
    "SQL-inserted rows: the test writes rows (corrupt JSON, equal timestamps) into the store's"
    " tables through its connection"
)
SQL_FILE = (
    "SQL on the database file: the test opens db_path with sqlite3 (drops tables, adds a failing"
    " trigger, reads rows, takes the write lock)"
)
INSERT = (
    "SQLiteSession internals: the test replaces the store's _insert_items to pause or fail the SQL insert"
)
AIOSQLITE = (
    "AsyncSQLiteSession internals: opening its aiosqlite connection (WAL set-up, retries,"
    " a failed or cancelled initialization)"
)
ENCRYPTED_POP = (
    "EncryptedSession authenticates an item inside the store's pop only when the store is the"
    " SDK's own SQLiteSession class (a type check in encrypt_session.pop_item); with any other"
    " store it pops, then authenticates (its documented path), so a wrong key cannot leave the item"
)

_SESSION = "tests/memory/test_session.py::"
_ASYNC = "tests/extensions/memory/test_async_sqlite_session.py::"
_ENCRYPT = "tests/extensions/memory/test_encrypt_session.py::"
_SUFFIX = "tests/memory/test_compaction_suffix.py::"
_RESPONSES = (
    "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::"
)

#: Cases that cannot apply to a store other than SQLite, with the reason (a test function's id
#: stands for all its parametrizations). The plugin refuses an entry that names no case.
DESELECTED = {
    _SESSION + "test_sqlite_session_close_closes_worker_thread_connections": CONNECTIONS,
    _SESSION + "test_sqlite_session_reaps_connections_from_exited_worker_threads": CONNECTIONS,
    _SESSION + "test_sqlite_session_closes_retired_connections_before_the_next_allocation": CONNECTIONS,
    _SESSION + "test_sqlite_session_keeps_connections_of_live_worker_threads": CONNECTIONS,
    _SESSION + "test_sqlite_session_rollback_failure_evicts_connection": CONNECTIONS,
    _SESSION + "test_sqlite_session_close_retries_quarantined_connection": CONNECTIONS,
    _SESSION + "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": CONNECTIONS,
    _SESSION + "test_sqlite_session_file_lock_is_shared_across_instances": FILE_LOCK,
    _SESSION + "test_sqlite_session_pop_item_skips_corrupt_most_recent": SQL_ROWS,
    _SESSION + "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": SQL_ROWS,
    _SESSION + "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": SQL_ROWS,
    _SESSION + "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": SQL_ROWS,
    _SESSION + "test_sqlite_session_failed_add_items_releases_write_lock": SQL_FILE,
    _SESSION + "test_sqlite_session_failed_clear_session_rolls_back": SQL_FILE,
    _SESSION + "test_sqlite_session_failed_pop_item_releases_write_lock": SQL_FILE,
    _ASYNC + "test_async_sqlite_session_get_items_limit_skips_corrupt_newest_rows": SQL_ROWS,
    _ASYNC + "test_async_sqlite_session_get_items_same_timestamp_consistent_order": SQL_ROWS,
    _ASYNC + "test_async_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": SQL_ROWS,
    _ASYNC + "test_async_sqlite_session_pop_item_same_timestamp_returns_latest": SQL_ROWS,
    _ASYNC + "test_async_sqlite_session_pop_item_skips_corrupt_most_recent": SQL_ROWS,
    _ASYNC + "test_cancelled_add_items_rolls_back_write_transaction": CONNECTIONS,
    _ASYNC + "test_cancelled_close_finishes_cleanup_and_propagates_cancellation": CONNECTIONS,
    _ASYNC + "test_close_retries_connection_quarantined_after_rollback_failure": CONNECTIONS,
    _ASYNC + "test_failed_add_items_rolls_back_and_reuses_connection": CONNECTIONS,
    _ASYNC + "test_operation_failure_then_cancellation_during_rollback": CONNECTIONS,
    _ASYNC + "test_post_commit_cancellation_propagates_after_known_mutation_outcome": CONNECTIONS,
    _ASYNC + "test_rollback_failure_closes_and_evicts_connection": CONNECTIONS,
    _ASYNC + "test_failed_clear_session_rolls_back": SQL_FILE,
    _ASYNC + "test_failed_pop_item_releases_write_lock": SQL_FILE,
    _ASYNC + "test_cancelled_connect_closes_eventually_acquired_connection": AIOSQLITE,
    _ASYNC + "test_cancelled_initialization_finishes_candidate_close": AIOSQLITE,
    _ASYNC + "test_cancelled_wal_retry_closes_startup_connection": AIOSQLITE,
    _ASYNC + "test_close_retries_quarantined_failed_initialization_candidate": AIOSQLITE,
    _ASYNC + "test_failed_initialization_closes_candidate_connection": AIOSQLITE,
    _ASYNC + "test_initialization_does_not_retry_unrecoverable_wal_errors": AIOSQLITE,
    _ASYNC + "test_initialization_failure_then_cancellation_during_candidate_close": AIOSQLITE,
    _ASYNC + "test_initialization_retries_transient_wal_lock": AIOSQLITE,
    _ENCRYPT + "test_encrypted_pop_wrong_key_preserves_recoverable_history": ENCRYPTED_POP,
    _ENCRYPT + "test_encrypted_pop_rechecks_authentication_after_expired_tail": ENCRYPTED_POP,
    _ENCRYPT + "test_encrypted_pop_cancellation_waits_for_authentication_rollback": ENCRYPTED_POP,
    _ENCRYPT + "test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations": SQL_FILE,
    _ENCRYPT + "test_encrypted_pop_wrong_key_preserves_row_identity": SQL_FILE,
    _SUFFIX + "test_suffix_transaction_rolls_back_failed_insert": SQL_FILE,
    _SUFFIX + "test_failed_encrypted_suffix_transaction_preserves_original_tokens": SQL_FILE,
    _SUFFIX + "test_cancelled_suffix_transaction_settles_before_newer_append": INSERT,
    _RESPONSES + "test_settled_pop_failure_invalidates_response_chain": CONNECTIONS,
    _RESPONSES + "test_settled_clear_failure_invalidates_response_chain": CONNECTIONS,
    "tests/test_run_impl_resume_paths.py::test_handoff_resume_after_cancelled_compaction_commits": INSERT,
}


@pytest.fixture(scope="module")
def sdk_tests(tmp_path_factory) -> Path:
    """The SDK's tests/ and pyproject.toml, extracted from its source package into a temporary folder."""
    if version("openai-agents") != SDK_VERSION:
        pytest.fail(
            f"openai-agents {version('openai-agents')} is installed, these peer tests are of {SDK_VERSION}:"
            " pin the new source package's sha256 here and review DESELECTED"
        )
    if not SDIST.is_file():
        pytest.fail(
            f"the SDK's source package is missing: {SDIST}. Fetch it with `{FETCH}` (scripts/test.sh does)"
        )
    digest = hashlib.sha256(SDIST.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        pytest.fail(
            f"{SDIST} has sha256 {digest}, not {SDIST_SHA256}: delete it and fetch it again with `{FETCH}`"
        )
    root = tmp_path_factory.mktemp("sdk")
    prefix = f"openai_agents-{SDK_VERSION}/"
    with tarfile.open(SDIST) as archive:
        members = [
            member
            for member in archive.getmembers()
            if member.name == prefix + "pyproject.toml" or member.name.startswith(prefix + "tests/")
        ]
        archive.extractall(root, members=members, filter="data")
    return root / prefix


def _run_suite(sdk: Path, client_kind: str, writer: str, reader: str, work: Path) -> dict:
    """Run :data:`FILES` with the swap; the plugin's report (per case: outcome, first failure line)."""
    plan, report = work / "plan.json", work / "report.json"
    plan.write_text(json.dumps({"deselect": DESELECTED}))
    (work / "home").mkdir()
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")},
        "PYTHONPATH": str(PLUGIN_DIR),
        "HOME": str(work / "home"),
        "ROLLOUT_PEER_WRITER": writer,
        "ROLLOUT_PEER_READER": reader,
        "ROLLOUT_PEER_CLIENT": client_kind,
        "ROLLOUT_PEER_PLAN": str(plan),
        "ROLLOUT_PEER_REPORT": str(report),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "ledger_session_swap",
        f"--basetemp={work / 'basetemp'}",
        "--timeout=240",
        *FILES,
    ]
    run = subprocess.run(command, cwd=sdk, env=env, capture_output=True, text=True, timeout=1500, check=False)
    if run.returncode not in (0, 1) or not report.is_file():  # 1: some case failed; others: an error
        pytest.fail(
            f"their pytest ended with exit {run.returncode}:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
        )
    return json.loads(report.read_text())


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("client_kind", ["blocking", "async"])
def test_the_sdk_session_tests_pass_against_ledger_session(
    sdk_tests, client_kind, writer_process, reader_process, tmp_path
) -> None:
    """The SDK's session cases pass on LedgerSession, but for those listed as SQLite's alone."""
    report = _run_suite(sdk_tests, client_kind, writer_process.address, reader_process.address, tmp_path)
    cases = report["cases"]
    outcomes = Counter(case["outcome"] for case in cases.values())
    failed = {nodeid: case["failure"] for nodeid, case in cases.items() if case["outcome"] == "failed"}
    by_reason = Counter(report["deselected"].values())
    summary = (
        f"{client_kind} client: {dict(outcomes)}; deselected {sum(by_reason.values())} by reason:"
        f" {json.dumps(by_reason, indent=1)}"
    )
    print(summary)
    assert not failed, f"{summary}\nfailed:\n" + "\n".join(f"{k}: {v}" for k, v in sorted(failed.items()))
    assert outcomes["skipped"] == 0, [
        nodeid for nodeid, case in cases.items() if case["outcome"] == "skipped"
    ]
    # The selection found their session cases (374 of the 387 of 0.24.0 build a ledger session).
    assert sum(1 for case in cases.values() if case["ledger_sessions"]) >= 350, summary
