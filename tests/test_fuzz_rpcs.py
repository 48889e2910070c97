"""The fuzz run of both services' RPCs (scripts/fuzz_rpcs.py), CI-sized: nothing outside the protos."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from types import ModuleType

import pytest

from rollout.v1 import reader_pb2, writer_pb2
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "fuzz_rpcs.py"
#: Requests of the CI run (~10 s); the long run is reported by hand (see the script's doc).
CI_REQUESTS = 2500


def fuzz_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_rpcs", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_documented_statuses_are_read_from_the_protos_per_rpc(tmp_path) -> None:
    """Each RPC's allowed statuses are the codes its proto comment names plus the file's "Every RPC:"
    paragraph; "Same status codes as X" / "exactly as X" inherit X's, "without C" removes C."""
    fuzz = fuzz_module()
    proto = tmp_path / "example.proto"
    proto.write_text(
        "// Every RPC: UNAVAILABLE when the file cannot be read;\n"
        "// and INVALID_ARGUMENT for a malformed id.\n"
        "//\n"
        "// Retry advice: DEADLINE_EXCEEDED is not named for every RPC.\n"
        "service S {\n"
        "  // NOT_FOUND: unknown. ALREADY_EXISTS: taken.\n"
        "  rpc A(R) returns (R);\n"
        "  // Each request is handled exactly as\n"
        "  // A, in order. DATA_LOSS: damaged.\n"
        "  rpc B(R) returns (R);\n"
        "  // Same status codes as A, without ALREADY_EXISTS.\n"
        "  rpc C(R) returns (R);\n"
        "}\n"
    )
    found = fuzz.documented_statuses(proto)
    every = {"OK", "UNAVAILABLE", "INVALID_ARGUMENT"}
    assert found["A"] == {*every, "NOT_FOUND", "ALREADY_EXISTS"}
    assert found["B"] == {*every, "NOT_FOUND", "ALREADY_EXISTS", "DATA_LOSS"}
    assert found["C"] == {*every, "NOT_FOUND"}

    writer = fuzz.documented_statuses(fuzz.PROTOS / "writer.proto")
    reader = fuzz.documented_statuses(fuzz.PROTOS / "reader.proto")
    assert set(writer) == {method.name for method in fuzz.SERVICES["writer"].methods}
    assert set(reader) == {method.name for method in fuzz.SERVICES["reader"].methods}
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "DATA_LOSS", "UNAVAILABLE"} <= writer["Resume"]
    assert writer["Append"] <= writer["AppendStream"]
    assert reader["GetReplay"] <= reader["StreamReplay"]
    assert all(
        "INTERNAL" not in codes and "UNKNOWN" not in codes for codes in [*writer.values(), *reader.values()]
    )


@pytest.mark.timeout(900)  # beyond the run's own 600 s bound, so that bound is the one reported
def test_a_ci_sized_fuzz_run_finds_no_crash_no_internal_and_no_undocumented_status() -> None:
    """Random bytes, random fields, hostile strings and flipped bytes to every RPC of both services:
    0 crashes, 0 INTERNAL/UNKNOWN, 0 statuses the protos do not document, every file still verifies."""
    seed = random.randrange(1_000_000)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--requests", str(CI_REQUESTS), "--seed", str(seed), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert done.stdout, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["crashes"] == [], summary["command"]
    assert summary["findings"] == [], summary["command"]
    assert summary["requests"] == CI_REQUESTS
    assert done.returncode == 0, summary["command"]
    statuses = summary["statuses"]
    every_rpc = {
        f"{service.name}/{method.name}"
        for service in (
            writer_pb2.DESCRIPTOR.services_by_name["RolloutWriter"],
            reader_pb2.DESCRIPTOR.services_by_name["RolloutReader"],
        )
        for method in service.methods
    }
    assert set(statuses) == every_rpc, "every RPC of both services was called"
    # Draws may miss an RPC's success; the run's closing sweep of valid requests then shows one.
    sweep = summary["valid_sweep"]
    assert all(statuses[rpc].get("OK") or sweep.get(rpc, {}).get("OK") for rpc in every_rpc), (
        "every RPC also succeeded at times",
        sweep,
    )
