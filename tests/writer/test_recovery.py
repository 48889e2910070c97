"""Start-up repair of torn tails (docs/spec.md §2.10): damage moved aside, never lost; appends resume cleanly."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import grpc
import orjson
import pytest

import writer_service.atomic_files
from rollout.v1 import records_pb2, writer_pb2, writer_pb2_grpc
from shared.errors import StorageWriteError
from shared.layout import PRIVATE_FILE_MODE, DataRoot
from shared.rebuild import rebuild
from shared.records import encode_line
from tests.conftest import start_service
from tests.data_roots import session_file
from writer_service.atomic_files import create_file, create_temporary
from writer_service.recovery import repair_torn_tail
from writer_service.saved_state import STATE_DIR
from writer_service.session_index import build_index

TS = "2026-11-30T10:00:00.000000Z"


def user(text: str) -> writer_pb2.AppendRecord:
    return writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))


def torn_record(path: Path) -> bytes:
    """60 % of a record, no newline: a write cut short by a crash."""
    line = encode_line(3, TS, "message", {"role": "user", "content": "never acknowledged " * 10})
    return line[: len(line) * 6 // 10]


def nul_padding(path: Path) -> bytes:
    """A run of NUL bytes: space the file system allocated but never filled."""
    return b"\x00" * 4096


def invalid_last_line(path: Path) -> bytes:
    """A complete line that is not JSON."""
    return b'{"v":1,"seq":3,"ts":"x","type":"message","payload":{"role":\n'


def not_a_record(path: Path) -> bytes:
    """Valid JSON that is no record: the writer would append after it and the file stay malformed."""
    return b"{}\n"


def failed_line_check(path: Path) -> bytes:
    """A complete record line whose bytes changed after its check was computed."""
    return encode_line(3, TS, "message", {"role": "user", "content": "three"}).replace(b"three", b"thref")


def seq_that_does_not_follow(path: Path) -> bytes:
    """A valid record that is not the session's next one (its seq repeats the last)."""
    return encode_line(2, TS, "message", {"role": "user", "content": "again"})


@pytest.mark.parametrize(
    "damage",
    [torn_record, nul_padding, invalid_last_line, not_a_record, failed_line_check, seq_that_does_not_follow],
    ids=lambda f: f.__name__,
)
def test_damaged_tail_is_moved_aside_and_the_next_append_lands_on_its_own_line(
    data_dir, damage: Callable[[Path], bytes]
) -> None:
    """After a crash-like tail, restart repairs: bytes kept in a sidecar, file cut back, appends continue."""
    writer = start_service("writer", data_dir)
    with grpc.insecure_channel(writer.address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        sid = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
        stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("one"), user("two")]))
    assert writer.stop() == 0
    path = session_file(data_dir, sid)
    good = path.read_bytes()
    bad = damage(path)
    path.write_bytes(good + bad)

    writer = start_service("writer", data_dir)
    try:
        with grpc.insecure_channel(writer.address) as channel:
            stub = writer_pb2_grpc.RolloutWriterStub(channel)
            ack = stub.Append(writer_pb2.AppendRequest(session_id=sid, records=[user("three")]))
    finally:
        writer.stop()
    assert list(ack.seqs) == [3]
    data = path.read_bytes()
    assert data.startswith(good)
    assert [orjson.loads(line)["payload"].get("content") for line in data.splitlines()[1:]] == [
        "one",
        "two",
        "three",
    ]
    assert not [e for e in rebuild(data).degraded if e.kind != "no_checkpoint"]
    (sidecar,) = path.parent.glob(path.name + ".torn-*")
    assert sidecar.read_bytes() == bad
    assert "repaired torn tail" in writer.log()


def test_damage_in_the_middle_is_not_repaired(tmp_path) -> None:
    """A bad line followed by good records is left in place for the reader to report."""
    path = tmp_path / "s.jsonl"
    body = encode_line(0, TS, "session_meta", {"session_id": "x"}) + b"garbage\n"
    body += encode_line(1, TS, "message", {"role": "user", "content": "after"})
    path.write_bytes(body)
    assert repair_torn_tail(path) == 0
    assert path.read_bytes() == body
    assert not list(tmp_path.glob("*.torn-*"))


def test_clean_file_is_untouched(tmp_path) -> None:
    """A file ending in a complete record needs no repair."""
    path = tmp_path / "s.jsonl"
    body = encode_line(0, TS, "session_meta", {"session_id": "x"})
    path.write_bytes(body)
    assert repair_torn_tail(path) == 0
    assert path.read_bytes() == body


def test_a_second_repair_keeps_the_first_sidecar(tmp_path) -> None:
    """Each repair writes its own sidecar; earlier set-aside bytes are never overwritten."""
    path = tmp_path / "s.jsonl"
    head = encode_line(0, TS, "session_meta", {"session_id": "x"})
    path.write_bytes(head + b"first torn")
    repair_torn_tail(path)
    path.write_bytes(head + b"second torn")
    repair_torn_tail(path)
    sidecars = sorted(p.read_bytes() for p in tmp_path.glob("s.jsonl.torn-*"))
    assert sidecars == [b"first torn", b"second torn"]


def test_sigterm_with_a_full_queue_loses_nothing_acknowledged(data_dir) -> None:
    """SIGTERM mid-stream: the writer drains, fsyncs and exits 0; every acknowledged record is in the file."""
    import signal
    import threading

    writer = start_service("writer", data_dir)
    acked: list[tuple[int, str]] = []
    stream_ended = threading.Event()
    with grpc.insecure_channel(writer.address) as channel:
        stub = writer_pb2_grpc.RolloutWriterStub(channel)
        sid = stub.CreateSession(writer_pb2.CreateSessionRequest()).session_id
        texts = [f"r{i}" for i in range(200_000)]

        def requests():
            for start in range(0, len(texts), 32):
                yield writer_pb2.AppendRequest(
                    session_id=sid, records=[user(t) for t in texts[start : start + 32]]
                )

        def consume() -> None:
            try:
                for ack in stub.AppendStream(requests()):
                    acked.extend(zip(ack.seqs, texts[ack.seqs[0] - 1 : ack.seqs[-1]], strict=True))
            except grpc.RpcError:
                pass
            finally:
                stream_ended.set()

        consumer = threading.Thread(target=consume)
        consumer.start()
        while len(acked) < 2000:
            assert not stream_ended.is_set(), writer.log()
            stream_ended.wait(0.01)
        assert writer.stop(signal.SIGTERM, timeout=60) == 0
        consumer.join(60)
    path = session_file(data_dir, sid)
    records = {
        r["seq"]: r["payload"].get("content") for r in map(orjson.loads, path.read_bytes().splitlines())
    }
    assert acked
    assert all(records.get(seq) == text for seq, text in acked)
    assert not [e for e in rebuild(path.read_bytes()).degraded if e.kind != "no_checkpoint"]


def test_start_up_removes_what_a_crash_left_under_temporary_names_and_nothing_else(tmp_path) -> None:
    """A crash between creating a temporary file and linking or renaming it leaves it behind:
    a session creation's and an import staging's in a shard's ``sessions/``, a saved state's in a
    shard's ``writer-state/``. Start-up removes those (never acknowledged), in every shard, and keeps
    every other file, session files and saved states included."""
    root = DataRoot(tmp_path)
    root.create(shards=2)
    sessions = root.sessions_folder(0)
    sessions.mkdir(parents=True)
    root.sessions_folder(1).mkdir(parents=True)
    session = sessions / "kept.jsonl"
    session.write_bytes(encode_line(0, TS, "session_meta", {"session_id": "x"}))
    creation, fd = create_temporary(sessions / "2026-new.jsonl")
    os.close(fd)
    staging, fd = create_temporary(root.sessions_folder(1) / "2026-imported.jsonl", os.O_APPEND)
    os.close(fd)
    states = root.shard_dir(1) / STATE_DIR
    states.mkdir()
    saved = states / "kept.json"
    saved.write_bytes(b"{}")
    save, fd = create_temporary(saved)
    os.close(fd)
    assert oct(creation.stat().st_mode & 0o777) == oct(PRIVATE_FILE_MODE)
    assert creation.name.startswith(".2026-new.jsonl.tmp-")
    # Names that only resemble a temporary's, and a folder and a link that have one, are kept.
    lookalikes = []
    for folder in (sessions, states):
        for name in (
            ".notes",
            ".notes.tmp-keep",
            ".notes.tmp-0123ABCD",
            ".notes.tmp-0123abc",
            ".notes.tmp-0123abcde",
            ".notes.tmp-ghijklmn",
            ".backup.tmp-0123abcd.json",
            "notes.tmp-0123abcd",
        ):
            (folder / name).write_bytes(b"kept")
            lookalikes.append(folder / name)
        (folder / ".folder.tmp-0123abcd").mkdir()
        (folder / ".link.tmp-4567cdef").symlink_to(session)
        lookalikes += [folder / ".folder.tmp-0123abcd", folder / ".link.tmp-4567cdef"]
    agent_session = sessions / "2026-agent.tmp-0123abcd.jsonl"
    agent_session.write_bytes(session.read_bytes())

    build_index(root)

    assert not creation.exists()
    assert not staging.exists()
    assert not save.exists()
    assert session.exists()
    assert saved.exists()
    assert agent_session.exists()
    assert [path for path in lookalikes if not os.path.lexists(path)] == []


def test_a_temporary_that_cannot_be_removed_is_logged_and_start_up_goes_on(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Start-up never fails over a stale temporary it may not remove: it says so and goes on."""
    root = DataRoot(tmp_path)
    root.create(shards=1)
    root.sessions_folder(0).mkdir(parents=True)
    stuck, fd = create_temporary(root.sessions_folder(0) / "2026-new.jsonl")
    os.close(fd)
    gone, fd = create_temporary(root.sessions_folder(0) / "2026-other.jsonl")
    os.close(fd)
    real_unlink = os.unlink

    def refusing_unlink(path: str | os.PathLike[str], *args: object, **options: object) -> None:
        if os.fspath(path) == os.fspath(stuck):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        real_unlink(path, *args, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", refusing_unlink)
    build_index(root)
    assert stuck.exists()
    assert not gone.exists()
    assert f"could not remove {stuck.name}" in caplog.text


@pytest.mark.parametrize("failing", ["write_all", "link"])
def test_a_session_file_the_disk_refuses_leaves_no_temporary_behind(
    tmp_path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A creation the disk refuses (full while writing, or the link failing) raises StorageWriteError
    naming the errno and removes its temporary at once: nothing waits for the next start-up."""
    root = DataRoot(tmp_path)
    root.create(shards=1)

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer_service.atomic_files if failing == "write_all" else os, failing, full)
    with pytest.raises(StorageWriteError) as caught:
        create_file(root.sessions_folder(0) / "2026-new.jsonl", b"line\n", "new")
    assert (caught.value.errno_name, caught.value.operation) == (
        "ENOSPC",
        "write" if failing == "write_all" else "link",
    )
    assert list(root.sessions_folder(0).iterdir()) == []
