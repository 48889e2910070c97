"""The Node.js example client (examples/node) against a live pair: it creates, appends exactly once,
decodes two rich errors, stops and replays, and the Python client sees the same session.

Node.js and npm are required (CI has both): without them this test fails, it never skips. The
example is copied to a temporary folder and installed there with ``npm ci`` from its lock file
(packages from the npm registry; the npm cache lives under .venv, never in $HOME).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from rollout_client import assistant, tool_call, tool_result, user
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "node"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is not installed: the Node.js example needs Node.js 18+ and npm"
            " (Debian: apt-get install nodejs npm)"
        )
    return found


def test_the_node_example_runs_against_a_live_pair(client, writer_process, reader_process, tmp_path) -> None:
    """node client.js creates, appends, decodes BadRequest and PreconditionFailure, stops and replays."""
    node, npm = _tool("node"), _tool("npm")
    work = tmp_path / "node"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("node_modules"))
    env = {
        **os.environ,
        "npm_config_cache": str(REPO / ".venv" / "npm-cache"),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
        "ROLLOUT_PROTOS": str(REPO / "protos"),
    }
    install = subprocess.run(
        [npm, "ci", "--ignore-scripts"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert install.returncode == 0, f"npm ci failed:\n{install.stdout}\n{install.stderr}"
    run = subprocess.run(
        [node, "client.js", writer_process.address, reader_process.address],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)

    assert report["appended"] == {"seqs": [1, 3, 4, 5], "next_seq": 6}
    assert report["retried"] == report["appended"]  # same request id: the first answer
    (bad,) = report["bad_request"]["details"]
    assert report["bad_request"]["code"] == "INVALID_ARGUMENT"
    assert bad["type"] == "google.rpc.BadRequest"
    assert bad["field_violations"][0]["field"] == "records[0].message.tool_call_id"
    (failure,) = report["precondition"]["details"]
    assert report["precondition"]["code"] == "FAILED_PRECONDITION"
    assert failure["type"] == "google.rpc.PreconditionFailure"
    assert failure["violations"][0]["description"] == "next_seq=6"
    assert report["replay"]["digest_status"] == "DIGEST_STATUS_VERIFIED"
    assert report["stop_facts"] == {"stop_kind": "paused", "reason": "waiting for review", "replayable": True}

    session = client.session(report["session_id"])
    assert session.replay().messages == [
        user("Where is the config parsed?"),
        assistant(
            "Searching.",
            tool_calls=[tool_call("call_1", "grep", '{"q":"config"}')],
            reasoning={"content": "grep for the loader first"},
        ),
        tool_result("call_1", "src/config.py:12: def parse(path):"),
        assistant("In src/config.py, line 12."),
    ]
    assert session.verify().records == 8  # meta, 5 appended lines, checkpoint, stop: nothing twice
