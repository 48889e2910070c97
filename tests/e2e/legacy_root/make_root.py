"""Write the legacy data root fixture (root.tar.gz beside this file) with a writer of the version
before shards, so that tests run today's services on a root that version really wrote.

    git worktree add /tmp/rollout-before-shards 1de248c
    .venv/bin/python tests/e2e/legacy_root/make_root.py --writer-repo /tmp/rollout-before-shards

The writer runs from ``--writer-repo`` (its own code, this interpreter); this script drives it
over gRPC: a director session with a tool call and its output, a child delegated by that call
(stopped paused), a fork of the director, an open session holding a request id, a completed
session of another tenant, and twelve small sessions of two tenants; then SIGTERM (the writer
saves its states). ``manifest.json`` beside the archive names each session. Creation times
are fixed, so listings have a known order.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tarfile
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc  # noqa: E402
from shared.records import format_timestamp  # noqa: E402
from tests.processes import start_service  # noqa: E402

BASE = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
REQUEST_ID = "legacy-request-1"


def message(
    role: str, text: str = "", calls: tuple[str, ...] = (), answers: str = ""
) -> writer_pb2.AppendRecord:
    chat = records_pb2.ChatMessage(role=role, text=text)
    if answers:
        chat.tool_call_id = answers
    for call_id in calls:
        chat.tool_calls.add(
            id=call_id, type="function", function=records_pb2.FunctionCall(name="delegate", arguments="{}")
        )
    return writer_pb2.AppendRecord(message=chat)


def created(seconds: int) -> str:
    return format_timestamp(BASE + timedelta(seconds=seconds))


def write_sessions(stub: writer_pb2_grpc.RolloutWriterStub) -> dict[str, object]:
    def create(seconds: int, **fields: object) -> str:
        request = writer_pb2.CreateSessionRequest(created_at=created(seconds), **fields)  # type: ignore[arg-type]
        return str(stub.CreateSession(request).session_id)

    root = writer_pb2.SESSION_ROLE_ROOT
    director = create(0, tenant="acme", agent_name="director", role=root)
    stub.Append(
        writer_pb2.AppendRequest(
            session_id=director,
            records=[
                message("system", "You direct."),
                message("user", "Review the patch."),
                message("assistant", calls=("call_1",)),
                message("tool", "looks fine", answers="call_1"),
                message("assistant", "Done."),
            ],
        )
    )
    child = create(1, tenant="acme", agent_name="coder", parent_session_id=director, delegation_id="call_1")
    stub.Append(writer_pb2.AppendRequest(session_id=child, records=[message("user", "Check the tests.")]))
    stub.Stop(
        writer_pb2.StopRequest(
            session_id=child, stop_kind=records_pb2.StopKind.Value("STOP_KIND_PAUSED"), reason="waiting"
        )
    )
    fork = str(stub.Fork(writer_pb2.ForkRequest(session_id=director, at_seq=2)).session_id)
    open_session = create(2, tenant="acme", agent_name="writer", role=root)
    answer = stub.Append(
        writer_pb2.AppendRequest(
            session_id=open_session,
            records=[message("user", "first"), message("assistant", "second")],
            request_id=REQUEST_ID,
        )
    )
    completed = create(3, tenant="beta", role=root)
    stub.Append(writer_pb2.AppendRequest(session_id=completed, records=[message("user", "hello")]))
    stub.Stop(
        writer_pb2.StopRequest(
            session_id=completed, stop_kind=records_pb2.StopKind.Value("STOP_KIND_COMPLETED"), reason="done"
        )
    )
    small = [create(10 + number, tenant="acme" if number % 2 else "beta") for number in range(12)]
    return {
        "director": director,
        "child": child,
        "fork": fork,
        "open": open_session,
        "open_request": {"request_id": REQUEST_ID, "seqs": list(answer.seqs), "next_seq": answer.next_seq},
        "completed": completed,
        "small": small,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--writer-repo", type=Path, required=True, help="checkout of the version that writes")
    parser.add_argument("--out", type=Path, default=HERE / "root.tar.gz", help="archive to write")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        writer = start_service("writer", data_dir, Path(tmp) / "writer.log", repo=args.writer_repo.resolve())
        try:
            with grpc.insecure_channel(writer.address) as channel:
                manifest = write_sessions(writer_pb2_grpc.RolloutWriterStub(channel))
        finally:
            code = writer.stop(signal.SIGTERM)
        if code != 0:
            raise SystemExit(f"the writer exited with {code}:\n{writer.log()}")
        if (data_dir / "cluster.json").exists() or not (data_dir / "sessions").is_dir():
            raise SystemExit(f"{args.writer_repo} wrote a sharded root: give a checkout from before shards")
        with tarfile.open(args.out, "w:gz") as archive:
            archive.add(data_dir, arcname="data", filter=_without_owner)
    (args.out.parent / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {args.out} and manifest.json")
    return 0


def _without_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


if __name__ == "__main__":
    raise SystemExit(main())
