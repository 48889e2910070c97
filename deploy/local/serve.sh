#!/usr/bin/env bash
# Sets up .venv (if needed) and starts the service pair on the embedded default:
# session files under ./rollout-data, writer on 127.0.0.1:50051, reader on 127.0.0.1:50052.
# Extra arguments go to `rollout serve` (e.g. --data-dir DIR). Ctrl-C stops both cleanly.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Install (or update) only when the project's dependencies changed since the last install.
if [ ! -x .venv/bin/rollout ] || [ ! -f .venv/.rollout-installed ] || [ pyproject.toml -nt .venv/.rollout-installed ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
  touch .venv/.rollout-installed
fi
exec .venv/bin/rollout serve "$@"
