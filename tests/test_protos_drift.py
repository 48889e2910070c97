"""The checked-in stubs under rollout/v1 are exactly what scripts/gen_protos.sh generates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _generated_files(root):
    """The files under ``root/rollout`` (relative paths), bytecode caches left out."""
    base = root / "rollout"
    return {
        path.relative_to(base)
        for path in base.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_checked_in_stubs_match_a_fresh_generation(tmp_path):
    """Regenerating the stubs gives byte-identical files and no checked-in stub is missing."""
    subprocess.run(
        ["bash", str(REPO / "scripts" / "gen_protos.sh"), str(tmp_path)],
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    fresh = _generated_files(tmp_path)
    checked_in = _generated_files(REPO)
    assert any(path.parts[0] == "v1" and path.name.endswith("_pb2.py") for path in fresh)
    assert sorted(checked_in - fresh) == [], "checked-in stubs that the generator no longer makes"
    assert sorted(fresh - checked_in) == [], "generated stubs that are not checked in"
    drifted = [
        str(path)
        for path in sorted(fresh)
        if (tmp_path / "rollout" / path).read_bytes() != (REPO / "rollout" / path).read_bytes()
    ]
    assert drifted == [], "stubs differ from scripts/gen_protos.sh output; rerun it"


def test_no_rpc_takes_or_returns_a_file_path():
    """Clients hold session ids only (docs/spec.md §6): no message field names a path, file or directory."""
    from rollout.v1 import reader_pb2, records_pb2, writer_pb2

    def fields(descriptor):
        for field in descriptor.fields:
            yield descriptor.full_name, field.name
        for nested in descriptor.nested_types:
            yield from fields(nested)

    names = [
        (message, field)
        for module in (records_pb2, writer_pb2, reader_pb2)
        for descriptor in module.DESCRIPTOR.message_types_by_name.values()
        for message, field in fields(descriptor)
    ]
    assert len(names) > 50
    assert [n for n in names if any(word in n[1] for word in ("path", "file", "dir"))] == []


def test_the_readmes_services_table_names_every_rpc() -> None:
    """README's "The services" table lists each service's RPCs as the protos define them."""
    from rollout.v1 import reader_pb2, writer_pb2

    rows = {
        line.split("|")[1].strip(" `"): [name.strip() for name in line.split("|")[2].split(",")]
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("| `rollout.v1.Rollout")
    }
    for module, service in ((writer_pb2, "RolloutWriter"), (reader_pb2, "RolloutReader")):
        defined = [method.name for method in module.DESCRIPTOR.services_by_name[service].methods]
        assert rows[f"rollout.v1.{service}"] == defined
