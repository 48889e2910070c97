#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the checks: ruff, mypy (strict, product code), then the
# test suite in parallel (it includes the stub drift test and the 30-point crash harness).
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"
# The OpenAI Agents SDK's own session tests run against LedgerSession
# (tests/client/test_agents_peer_suite.py): its source package, fetched once.
if [ ! -f .cache/peer-suites/openai_agents-0.24.0.tar.gz ]; then
  .venv/bin/python -m pip download -q --disable-pip-version-check openai-agents==0.24.0 \
    --no-binary :all: --no-deps -d .cache/peer-suites
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy shared serving memory_store writer_service reader_service rollout_cli rollout_client rollout_memory
.venv/bin/python -m pytest -n 2 "$@"
