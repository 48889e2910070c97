"""WatchSession: catch-up from a seq, then each record as it lands, once and in order; a stopped
session ends the stream; many watchers share one tail; a replaced or cut file ends it ABORTED."""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import orjson
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from reader_service import watch, wire
from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2
from shared.naming import build_file_name, new_session_id
from shared.records import RecordType, encode_line, now_timestamp, parse_timestamp
from tests.conftest import start_service
from tests.data_roots import session_file, session_path

END = object()


class Follower:
    """One WatchSession stream read on a thread: records and the end (OK or an RpcError) in a queue."""

    def __init__(self, reader: reader_pb2_grpc.RolloutReaderStub, session_id: str, from_seq: int = 0) -> None:
        self.call = reader.WatchSession(
            reader_pb2.WatchSessionRequest(session_id=session_id, from_seq=from_seq)
        )
        self.items: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        try:
            for reply in self.call:
                assert reply.records, "a reply is never empty"
                for record in reply.records:
                    self.items.put(record)
            self.items.put(END)
        except grpc.RpcError as error:
            self.items.put(error)

    def next(self) -> Any:
        """The next record, END, or the RpcError that ended the stream (60 s guard against a hang)."""
        return self.items.get(timeout=60)

    def records_until(self, seq: int) -> list[reader_pb2.WatchedRecord]:
        """Records up to and including ``seq`` (fails on an early end)."""
        found = []
        while not found or found[-1].seq < seq:
            item = self.next()
            assert isinstance(item, reader_pb2.WatchedRecord), item
            found.append(item)
        return found

    def rest(self) -> tuple[list[reader_pb2.WatchedRecord], Any]:
        """Every remaining record and how the stream ended (END or the RpcError)."""
        found = []
        while isinstance(item := self.next(), reader_pb2.WatchedRecord):
            found.append(item)
        return found, item


def _append(writer, session_id: str, *texts: str) -> None:
    writer.Append(
        writer_pb2.AppendRequest(
            session_id=session_id,
            records=[
                writer_pb2.AppendRecord(message=records_pb2.ChatMessage(role="user", text=text))
                for text in texts
            ],
        )
    )


def _seqs(records: list[reader_pb2.WatchedRecord]) -> list[int]:
    return [record.seq for record in records]


def test_watchers_started_before_during_and_after_appends_see_every_record_once_in_order(
    writer, reader, data_dir
) -> None:
    """A watcher from before the first append, one started halfway and one after the stop all
    receive seqs 0..stop exactly once, in order, each line as stored; each stream then ends OK."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    before = Follower(reader, session_id)
    assert before.next().type == "session_meta"  # it is live before anything is appended
    for number in range(10):
        _append(writer, session_id, f"early {number}")
    during = Follower(reader, session_id)
    assert during.next().seq == 0
    for number in range(10):
        _append(writer, session_id, f"late {number}", f"late {number} again")
    stop = writer.Stop(
        writer_pb2.StopRequest(session_id=session_id, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="x")
    )
    after = Follower(reader, session_id)
    expected = list(range(stop.stop_seq + 1))
    assert _seqs(before.rest()[0]) == expected[1:]
    assert _seqs(during.rest()[0]) == expected[1:]
    records, end = after.rest()
    assert end is END
    assert _seqs(records) == expected
    assert [record.type for record in records[-2:]] == ["agent_checkpoint", "stop"]
    path = session_file(data_dir, session_id)
    assert b"".join(record.line + b"\n" for record in records) == path.read_bytes()
    stored = [orjson.loads(record.line) for record in records]
    assert [(line["seq"], line["ts"], line["type"]) for line in stored] == [
        (r.seq, r.ts, r.type) for r in records
    ]
    assert stored[5]["payload"] == {"role": "user", "content": "early 4"}


def test_a_stopped_session_ends_the_stream_and_a_resumed_one_is_followed_past_its_stop(
    writer, reader
) -> None:
    """A watch of a stopped session ends after the stop record (from a seq past it: at once, with
    no record); after Resume, a watch from the stop's seq + 1 follows the re-opened file."""
    session_id = writer.CreateSession(writer_pb2.CreateSessionRequest()).session_id
    _append(writer, session_id, "hello")
    stop = writer.Stop(
        writer_pb2.StopRequest(session_id=session_id, stop_kind=records_pb2.STOP_KIND_PAUSED, reason="x")
    )
    records, end = Follower(reader, session_id, from_seq=stop.stop_seq).rest()
    assert (_seqs(records), end) == ([stop.stop_seq], END)
    assert Follower(reader, session_id, from_seq=stop.stop_seq + 1).rest() == ([], END)
    resumed = writer.Resume(writer_pb2.ResumeRequest(session_id=session_id))
    follower = Follower(reader, session_id, from_seq=stop.stop_seq + 1)
    assert follower.next().type == "event"  # the resumed event
    _append(writer, session_id, "again")
    assert follower.next().seq == resumed.next_seq
    second = writer.Stop(
        writer_pb2.StopRequest(session_id=session_id, stop_kind=records_pb2.STOP_KIND_COMPLETED, reason="y")
    )
    records, end = follower.rest()
    assert (_seqs(records), end) == ([second.checkpoint_seq, second.stop_seq], END)


def test_unknown_sessions_and_negative_seqs_are_refused(reader) -> None:
    """An unknown session is NOT_FOUND and a negative from_seq INVALID_ARGUMENT, naming the field."""
    _, end = Follower(reader, new_session_id()).rest()
    assert end.code() == grpc.StatusCode.NOT_FOUND
    _, end = Follower(reader, new_session_id(), from_seq=-1).rest()
    assert end.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "from_seq" in end.details()


# -- files written by hand (no writer): partial lines, damage, replacement, cuts ------------------


def _session_file(data_dir: Path, count: int, text: str = "x") -> tuple[str, Path]:
    """A session file of a session_meta and ``count - 1`` user messages, written directly."""
    session_id = new_session_id()
    ts = now_timestamp()
    path = session_path(data_dir, session_id, build_file_name(parse_timestamp(ts), session_id))
    lines = [encode_line(0, ts, RecordType.SESSION_META, {"session_id": session_id, "created_at": ts})]
    lines += [_message_line(seq, f"{text} {seq}") for seq in range(1, count)]
    path.write_bytes(b"".join(lines))
    return session_id, path


def _message_line(seq: int, text: str) -> bytes:
    return encode_line(seq, now_timestamp(), RecordType.MESSAGE, {"role": "user", "content": text})


def _write(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_a_line_is_sent_only_once_complete_and_a_damaged_line_is_sent_in_its_place(data_dir, reader) -> None:
    """A line written in two parts arrives once, whole; a line that is not a record arrives as
    seq -1 with its bytes, between its neighbours (never skipped)."""
    session_id, path = _session_file(data_dir, 2)
    follower = Follower(reader, session_id)
    assert _seqs(follower.records_until(1)) == [0, 1]
    line, after = _message_line(2, "split across two writes"), _message_line(3, "after the damage")
    _write(path, line[:20])
    _write(path, line[20:] + b'{"not a record\n' + after)
    records = follower.records_until(3)
    assert [(record.seq, record.type, record.line) for record in records] == [
        (2, "message", line[:-1]),
        (-1, "", b'{"not a record'),
        (3, "message", after[:-1]),
    ]


def _status_reason(error: grpc.RpcError) -> str:
    status = rpc_status.from_call(error)
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info.reason


def test_a_file_replaced_under_a_watch_ends_it_aborted(data_dir, reader) -> None:
    """Another file renamed over the session's name ends the stream with ABORTED, reason
    SESSION_FILE_REPLACED; so does removing it, and so does a symbolic link put in its place,
    even one to the same file (links are never followed)."""
    for how in ("replace", "remove", "link"):
        session_id, path = _session_file(data_dir, 3)
        follower = Follower(reader, session_id)
        assert _seqs(follower.records_until(2)) == [0, 1, 2]
        if how == "replace":
            other = path.with_suffix(".new")
            other.write_bytes(path.read_bytes())
            os.replace(other, path)
        elif how == "remove":
            path.unlink()
        else:
            aside = path.with_suffix(".aside")
            os.replace(path, aside)
            path.symlink_to(aside)
        records, end = follower.rest()
        assert records == []
        assert end.code() == grpc.StatusCode.ABORTED, end
        assert _status_reason(end) == "SESSION_FILE_REPLACED"
        assert "replaced or removed" in end.details()


def test_a_file_cut_below_what_was_read_ends_the_watch_aborted(data_dir, reader) -> None:
    """A file truncated below the lines already sent (a rolled-back write) ends the stream with
    ABORTED, reason SESSION_FILE_TRUNCATED; so does a line reusing a seq already sent."""
    session_id, path = _session_file(data_dir, 4)
    follower = Follower(reader, session_id)
    assert _seqs(follower.records_until(3)) == [0, 1, 2, 3]
    size = path.stat().st_size
    os.truncate(path, size - len(_message_line(3, "x 3")) - 5)
    _, end = follower.rest()
    assert end.code() == grpc.StatusCode.ABORTED
    assert _status_reason(end) == "SESSION_FILE_TRUNCATED"

    session_id, path = _session_file(data_dir, 4)
    follower = Follower(reader, session_id)
    assert _seqs(follower.records_until(3)) == [0, 1, 2, 3]
    _write(path, _message_line(3, "a second seq 3"))
    _, end = follower.rest()
    assert end.code() == grpc.StatusCode.ABORTED
    assert _status_reason(end) == "SESSION_FILE_TRUNCATED"


def _reader_files(pid: int, path: Path) -> tuple[int, int]:
    """(descriptors of ``path``, inotify watches of ``path``) the process ``pid`` holds (Linux
    /proc; the sessions folder's own watch is not counted)."""
    descriptors = watches = 0
    inode = f"ino:{path.stat().st_ino:x} "
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(entry)
        except FileNotFoundError:
            continue
        if target == str(path):
            descriptors += 1
        elif target == "anon_inode:inotify":
            info = Path(f"/proc/{pid}/fdinfo/{entry.name}").read_text()
            watches += sum(line.startswith("inotify wd:") and inode in line for line in info.splitlines())
    return descriptors, watches


def test_many_watchers_of_one_session_share_one_tail(data_dir, reader, reader_process) -> None:
    """Twenty watchers of one session hold one descriptor and one inotify watch in the reader,
    each sees every record once in order, and both are released when the streams end."""
    session_id, path = _session_file(data_dir, 3)
    followers = [Follower(reader, session_id) for _ in range(20)]
    for follower in followers:
        assert _seqs(follower.records_until(2)) == [0, 1, 2]
    assert _reader_files(reader_process.process.pid, path) == (1, 1)
    for seq in range(3, 50):
        _write(path, _message_line(seq, f"live {seq}"))
    for follower in followers:
        assert _seqs(follower.records_until(49)) == list(range(3, 50))
    # A stop record ends every stream; a stream's status is sent after its handler has left the
    # tail, so once all have ended the reader holds nothing of the session.
    _write(path, encode_line(50, now_timestamp(), RecordType.STOP, {"stop_kind": "paused", "reason": "x"}))
    for follower in followers:
        records, end = follower.rest()
        assert (_seqs(records), end) == ([50], END)
    # A read of the tail still running on an I/O thread when the last stream ended closes the
    # descriptor as it ends: wait for that (a generous bound: the suite runs under load).
    give_up = time.monotonic() + 120
    while _reader_files(reader_process.process.pid, path) != (0, 0) and time.monotonic() < give_up:
        time.sleep(0.02)
    assert _reader_files(reader_process.process.pid, path) == (0, 0)


def test_a_watch_from_a_seq_deep_in_a_large_file_starts_exactly_there(data_dir, reader) -> None:
    """From seq 3,000 of a 5,000-record file (bisection over the lines), the first record sent is
    seq 3,000 and every later one follows once."""
    session_id, _ = _session_file(data_dir, 5000, text="y" * 300)
    records, end = Follower(reader, session_id, from_seq=3000).records_until(4999), None
    assert end is None
    assert _seqs(records) == list(range(3000, 5000))


def test_reader_shutdown_ends_watches_unavailable(data_dir) -> None:
    """A reader told to stop ends its endless watch streams at once with UNAVAILABLE (retry from
    the last seq + 1), and exits cleanly."""
    service = start_service("reader", data_dir)
    session_id, _ = _session_file(data_dir, 1)
    with grpc.insecure_channel(service.address) as channel:
        follower = Follower(reader_pb2_grpc.RolloutReaderStub(channel), session_id)
        assert follower.next().seq == 0
        assert service.stop() == 0
        _, end = follower.rest()
    assert end.code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in end.details()


# -- the watch module in process ------------------------------------------------------------------


def test_the_start_offset_is_a_line_start_close_before_the_first_line_to_send(tmp_path) -> None:
    """For any seq, the bisection gives a line start that no record of that seq or later precedes,
    at most one scan window (64 KiB) and a line before that record."""
    _, path = _session_file(tmp_path, 4000, text="z" * 250)
    data = path.read_bytes()
    starts = [0, *[index + 1 for index, byte in enumerate(data) if byte == 10][:-1]]
    with path.open("rb") as handle:
        for from_seq in (0, 1, 17, 1999, 2000, 3998, 3999, 4000, 10_000):
            offset = watch.start_offset(handle.fileno(), from_seq, len(data))
            assert offset in starts
            exact = starts[from_seq] if from_seq < len(starts) else len(data)
            assert offset <= exact
            assert exact - offset <= 64 * 1024 + 400, (from_seq, offset, exact)


def test_a_watcher_far_behind_reads_the_file_itself_and_misses_nothing(tmp_path, monkeypatch) -> None:
    """A watcher whose queued live lines pass the limit drops them and reads the file from where
    it stands: every record still arrives once, in order, and the stream ends after the stop."""
    monkeypatch.setattr(watch, "WATCHER_QUEUE_BYTES", 2000)
    session_id, path = _session_file(tmp_path, 1)
    lines = [_message_line(seq, f"live {seq}") for seq in range(1, 100)]
    lines.append(encode_line(100, now_timestamp(), RecordType.STOP, {"stop_kind": "paused", "reason": "x"}))
    offered = watch._Watcher.offer
    dropped = []

    async def scenario() -> list[int]:
        published: asyncio.Queue[int] = asyncio.Queue()

        def offer(self: watch._Watcher, batch: watch.LiveBatch) -> None:
            offered(self, batch)
            dropped.append(not self.queue)
            published.put_nowait(batch.end)

        monkeypatch.setattr(watch._Watcher, "offer", offer)
        with ThreadPoolExecutor(2) as pool:

            async def run(function: Any, *args: Any) -> Any:
                return await asyncio.get_running_loop().run_in_executor(pool, function, *args)

            hub = watch.WatchHub(run, wire.watch_reply)
            stream = hub.follow(session_id, path, 0)
            seqs = [r.seq for r in reader_pb2.WatchSessionResponse.FromString(await anext(stream)).records]
            for line in lines:  # one live batch per line, none read by the stream yet
                _write(path, line)
                while await published.get() < path.stat().st_size:
                    pass
            async for reply in stream:
                seqs += [record.seq for record in reader_pb2.WatchSessionResponse.FromString(reply).records]
            hub.close()
        return seqs

    assert asyncio.run(scenario()) == list(range(101))
    assert any(dropped)
    assert not all(dropped)


def test_writes_no_inotify_report_reaches_arrive_through_the_poll(tmp_path, monkeypatch) -> None:
    """A writer on another host appends through its own mount: this host's inotify reports
    nothing (simulated: every report ignored). The hub's look at every followed file each
    poll_seconds still sends each record once, in order, and the stream ends after the stop."""
    monkeypatch.setattr(watch.WatchHub, "_on_events", lambda self: self._inotify.read(timeout=0))
    session_id, path = _session_file(tmp_path, 2)
    later = [_message_line(2, "written elsewhere"), _message_line(3, "and more")]
    stop = encode_line(4, now_timestamp(), RecordType.STOP, {"stop_kind": "paused", "reason": "x"})

    async def scenario() -> list[int]:
        with ThreadPoolExecutor(2) as pool:

            async def run(function: Any, *args: Any) -> Any:
                return await asyncio.get_running_loop().run_in_executor(pool, function, *args)

            hub = watch.WatchHub(run, wire.watch_reply, poll_seconds=0.02)
            seqs: list[int] = []
            async for reply in hub.follow(session_id, path, 0):
                seqs += [record.seq for record in reader_pb2.WatchSessionResponse.FromString(reply).records]
                if seqs == [0, 1]:
                    _write(path, b"".join(later))
                elif seqs == [0, 1, 2, 3]:
                    _write(path, stop)
            hub.close()
        return seqs

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]


def test_the_cli_default_follow_poll_is_the_hubs() -> None:
    """serve-reader --follow-poll-ms defaults to reader_service.watch.DEFAULT_POLL_SECONDS."""
    from rollout_cli.supervision import serve_reader

    (option,) = [param for param in serve_reader.params if param.name == "follow_poll_ms"]
    assert option.default == round(watch.DEFAULT_POLL_SECONDS * 1000)
