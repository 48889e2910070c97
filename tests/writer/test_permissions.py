"""Everything the writer creates under a data root is private to its user (shared.layout): files
0600, folders 0700, created so, under any umask."""

from __future__ import annotations

import os
import stat
import uuid

import grpc

from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from shared.layout import make_private_dirs
from tests.conftest import start_service
from tests.data_roots import session_files

PAUSED = records_pb2.StopKind.Value("STOP_KIND_PAUSED")
#: Loaded by every Python process started with it on PYTHONPATH: records each chmod to a file.
AUDIT_CHMOD = """
import os, sys
_out = os.environ["CHMOD_AUDIT_FILE"]
def _hook(event, args):
    if event == "os.chmod":
        with open(_out, "a") as log:
            log.write(f"{args[0]!r} {oct(args[1])}\\n")
sys.addaudithook(_hook)
"""


def _exercise(address: str) -> None:
    """Every kind of file the writer makes: a session, a child (delegation marker), a fork,
    an import of a parent and child (staging files, markers), a stop."""
    with grpc.insecure_channel(address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        parent = stub.CreateSession(
            writer_pb2.CreateSessionRequest(role=writer_pb2.SESSION_ROLE_ROOT)
        ).session_id
        message = records_pb2.ChatMessage(role="user", text="x" * 100)
        stub.Append(
            writer_pb2.AppendRequest(session_id=parent, records=[writer_pb2.AppendRecord(message=message)])
        )
        stub.CreateSession(
            writer_pb2.CreateSessionRequest(
                agent_name="helper",
                parent_session_id=parent,
                delegation_id="call_1",
                role=writer_pb2.SESSION_ROLE_CHILD,
            )
        )
        stub.Fork(writer_pb2.ForkRequest(session_id=parent, at_seq=1))
        stub.Stop(writer_pb2.StopRequest(session_id=parent, stop_kind=PAUSED))
        imported_parent = str(uuid.uuid4())
        stub.ImportSessions(
            iter(
                [
                    writer_pb2.ImportSessionsRequest(
                        create=writer_pb2.CreateSessionRequest(session_id=imported_parent)
                    ),
                    writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(stop_kind=PAUSED)),
                    writer_pb2.ImportSessionsRequest(
                        create=writer_pb2.CreateSessionRequest(
                            session_id=str(uuid.uuid4()),
                            agent_name="helper",
                            parent_session_id=imported_parent,
                            delegation_id="call_2",
                            role=writer_pb2.SESSION_ROLE_CHILD,
                        )
                    ),
                    writer_pb2.ImportSessionsRequest(stop=writer_pb2.StopRequest(stop_kind=PAUSED)),
                ]
            )
        )


def test_files_and_folders_the_writer_creates_have_no_group_or_other_permissions(
    tmp_path, monkeypatch
) -> None:
    """Under umask 0, the data root, its shard record and shard folders, sessions, markers and their
    folders, saved states, the locks and a torn tail set aside at start-up are all 0600 (files) or
    0700 (folders), and no chmod made them so (the lock file's library sets the mode it created it with)."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT_CHMOD)
    audit = tmp_path / "chmod.log"
    monkeypatch.setenv("PYTHONPATH", str(hooks))
    monkeypatch.setenv("CHMOD_AUDIT_FILE", str(audit))
    data = tmp_path / "data"  # made by the writer (its log goes beside it)
    previous = os.umask(0)
    try:
        writer = start_service("writer", data)
        _exercise(writer.address)
        assert writer.stop() == 0  # saves the writer's states of open sessions
        session = session_files(data)[0]
        with session.open("ab") as handle:  # a torn tail, set aside by the next start
            handle.write(b'{"v":1,"seq":99,"ty')
        writer = start_service("writer", data)
        assert writer.stop() == 0
    finally:
        os.umask(previous)
    made = sorted(data.rglob("*"))
    names = {path.name for path in made}
    assert any(name.endswith(".torn-1") for name in names)
    assert {"cluster.json", "shards", "writer.lock", "sessions", "delegations", "writer-state"} <= names
    assert any(path.parent.name == "writer-state" for path in made)
    assert sum(1 for path in made if path.parent.parent.name == "delegations") == 2
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in [data, *made]}
    assert {
        str(path): oct(mode) for path, mode in modes.items() if mode != (0o700 if path.is_dir() else 0o600)
    } == {}
    chmods = audit.read_text().splitlines() if audit.exists() else []
    assert all(line.split()[1] == "0o600" and not line.startswith("'") for line in chmods), chmods


def test_missing_parent_folders_are_made_private_and_existing_ones_left_alone(tmp_path) -> None:
    """make_private_dirs creates every missing level 0700 and changes no folder that exists."""
    tmp_path.chmod(0o755)
    previous = os.umask(0)
    try:
        make_private_dirs(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(previous)
    assert [oct(stat.S_IMODE((tmp_path / name).stat().st_mode)) for name in ("", "a", "a/b", "a/b/c")] == [
        "0o755",
        "0o700",
        "0o700",
        "0o700",
    ]
