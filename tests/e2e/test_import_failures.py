"""An import that fails midway names the file and the line, and leaves nothing behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc

from rollout.v1 import reader_pb2, reader_pb2_grpc
from tests.conftest import CORPUS, run_rollout, start_service
from tests.data_roots import session_files


def test_a_refused_record_names_file_and_line_and_nothing_of_the_file_is_kept(data_dir, tmp_path) -> None:
    """A tool output over the writer's limit at line N: exit 1, "file:N" on stderr, no session, the next file goes in."""
    source = CORPUS / "codex" / "real-2026-02-desktop-small-redacted.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines()
    call_line = next(
        number
        for number, raw in enumerate(lines, 1)
        if json.loads(raw).get("payload", {}).get("type") in ("function_call", "custom_tool_call")
    )
    call = json.loads(lines[call_line - 1])["payload"]
    big_output = {
        "timestamp": json.loads(lines[call_line - 1])["timestamp"],
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": call["call_id"], "output": "z" * 100_000},
    }
    lines.insert(call_line, json.dumps(big_output))
    broken = tmp_path / "rollout-broken.jsonl"
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    good = CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl"

    writer = start_service("writer", data_dir, "--max-record-bytes", "65536")
    reader = start_service("reader", data_dir)
    try:
        result = run_rollout(
            "import", "codex", "--writer", writer.address, str(broken), str(good), timeout=120
        )
        assert result.returncode == 1, result.stdout
        assert f"{broken}:{call_line + 1}: INVALID_ARGUMENT" in result.stderr
        assert result.stderr.count(str(broken)) == 1  # named once, not once per layer
        assert "over the limit of 65536 bytes" in result.stderr
        assert "1 imported, 0 skipped (already in the ledger), 1 failed" in result.stdout
        with grpc.insecure_channel(reader.address) as channel:
            listed = reader_pb2_grpc.RolloutReaderStub(channel).ListSessions(reader_pb2.ListSessionsRequest())
        [only] = listed.sessions
        assert (
            json.loads(good.read_text(encoding="utf-8").splitlines()[0])["payload"]["id"] == only.session_id
        )
        assert session_files(data_dir, ".*") == []
    finally:
        writer.stop()
        reader.stop()


def test_a_folder_is_walked_and_each_file_reported(writer_process, tmp_path: Path) -> None:
    """Importing a folder finds the session files under it (sub-folders too, one named like a file
    included) and reports each once."""
    folder = tmp_path / "sessions" / "2026" / "06" / "x.jsonl"
    folder.mkdir(parents=True)
    for path in sorted((CORPUS / "codex").glob("*.jsonl"))[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    result = run_rollout(
        "import", "codex", "--json", "--writer", writer_process.address, str(tmp_path), timeout=120
    )
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(Path(report["file"]).name for report in reports) == sorted(p.name for p in folder.iterdir())
    assert {report["status"] for report in reports} == {"imported"}


def test_an_import_that_cannot_reach_the_writer_exits_1_and_says_how_to_point_it(tmp_path: Path) -> None:
    """No writer: exit 1 like every other command, one error line naming the address and the option."""
    source = CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl"
    result = run_rollout("import", "codex", "--writer", "127.0.0.1:1", str(source), timeout=120)
    assert result.returncode == 1
    assert "Error: cannot reach the writer at 127.0.0.1:1." in result.stderr
    assert f"{source}: not imported (nothing of it kept)" in result.stderr
    assert "Traceback" not in result.stderr


def test_importing_again_counts_nothing_kept_for_the_skipped_files(writer_process) -> None:
    """The summary counts the source records kept as events only for the files imported now."""
    source = CORPUS / "codex" / "synthetic-2026-modern-demo.jsonl"
    arguments = ("import", "codex", "--writer", writer_process.address, str(source))
    first = run_rollout(*arguments, timeout=120)
    assert first.returncode == 0, first.stderr
    assert (
        "1 imported, 0 skipped (already in the ledger), 0 failed; 1 source record kept as events"
        in first.stdout
    )
    again = run_rollout(*arguments, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (
        "0 imported, 1 skipped (already in the ledger), 0 failed; 0 source records kept as events"
        in again.stdout
    )


def test_a_line_nested_past_protobufs_limit_is_kept_and_its_transcript_imported(
    writer_process, reader_process, tmp_path: Path
) -> None:
    """A Claude Code record nested deeper than a record can hold no longer fails its transcript: the
    file is imported with that line kept as a claude.unrepresentable_line event (its text), as the
    Codex importer keeps such a line, and the next file is imported too."""
    lines = (CORPUS / "claude" / "claude-code-small.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    deep: object = "x"
    for _ in range(150):
        deep = {"a": deep}
    record["toolUseResult"] = deep
    broken = tmp_path / "a-deep.jsonl"
    broken.write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]) + "\n", encoding="utf-8")
    good = tmp_path / "b-good.jsonl"
    good.write_bytes((CORPUS / "claude" / "claude-code-1.0.98-a.jsonl").read_bytes())
    result = run_rollout(
        "import", "claude", "--json", "--writer", writer_process.address, str(broken), str(good), timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    reports = {Path(report["file"]).name: report for report in map(json.loads, result.stdout.splitlines())}
    assert reports["a-deep.jsonl"]["status"] == "imported"
    assert reports["a-deep.jsonl"]["kept_as_event"]["claude.unrepresentable_line"] == 1
    assert reports["b-good.jsonl"]["status"] == "imported"
    [session] = reports["a-deep.jsonl"]["sessions"]
    with grpc.insecure_channel(reader_process.address) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)
        replay = stub.GetReplay(reader_pb2.ReplayRequest(session_id=session["session_id"]))
    assert replay.digest_status == reader_pb2.DIGEST_STATUS_VERIFIED
    assert replay.messages[0].role == "assistant"  # line 2, the prompt, is the kept text
    assert record["message"]["content"] not in [message.text for message in replay.messages]


def test_a_pipe_and_a_device_are_refused_by_name_and_the_other_files_go_on(
    writer_process, tmp_path: Path
) -> None:
    """A named pipe no process writes to and a link to /dev/zero are refused by name at once (no
    blocking, no endless read); the file after them is imported; exit 1."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    good = CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl"
    result = run_rollout(
        "import", "codex", "--writer", writer_process.address, str(fifo), str(zero), str(good), timeout=120
    )
    assert result.returncode == 1, result.stdout
    assert f"{fifo}: a named pipe (FIFO): only regular files are read; nothing imported" in result.stderr
    assert f"{zero}: a character device (/dev/zero): only regular files are read" in result.stderr
    assert "1 imported, 0 skipped (already in the ledger), 2 failed" in result.stdout
    assert "Traceback" not in result.stderr


def test_a_line_over_the_limit_fails_its_file_naming_the_line(writer_process, tmp_path: Path) -> None:
    """With --max-line-bytes 4096, a Codex rollout whose third line is longer fails as file:3 before
    anything is sent; the next file is imported; exit 1."""
    lines = (CORPUS / "codex" / "real-2026-06-exec-redacted.jsonl").read_text(encoding="utf-8").splitlines()
    long_line = json.dumps(
        {"timestamp": "2026-06-01T00:00:00Z", "type": "event_msg", "payload": {"a": "z" * 5000}}
    )
    broken = tmp_path / "long.jsonl"
    broken.write_text("\n".join([*lines[:2], long_line, *lines[2:]]) + "\n", encoding="utf-8")
    good = CORPUS / "codex" / "real-2026-02-desktop-small-redacted.jsonl"  # lines under 1 KB
    result = run_rollout(
        "import",
        "codex",
        "--max-line-bytes",
        "4096",
        "--writer",
        writer_process.address,
        str(broken),
        str(good),
        timeout=120,
    )
    assert result.returncode == 1, result.stdout
    assert f"{broken}:3: the line is longer than 4096 bytes" in result.stderr
    assert "1 imported, 0 skipped (already in the ledger), 1 failed" in result.stdout


def test_a_transcript_with_null_uuids_is_imported_as_its_conversation(
    writer_process, reader_process, tmp_path: Path
) -> None:
    """Records whose uuid is null are imported in file order (never "skipped, already in the
    ledger"): the replay holds every message."""
    records = [
        json.loads(raw)
        for raw in (CORPUS / "claude" / "claude-code-small.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    for record in records:
        if "uuid" in record:
            record["uuid"] = None
            record["parentUuid"] = None
    source = tmp_path / "null-uuids.jsonl"
    source.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    result = run_rollout("import", "claude", "--writer", writer_process.address, str(source), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 imported, 0 skipped (already in the ledger), 0 failed" in result.stdout
    with grpc.insecure_channel(reader_process.address) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)
        [listed] = stub.ListSessions(reader_pb2.ListSessionsRequest()).sessions
        replay = stub.GetReplay(reader_pb2.ReplayRequest(session_id=listed.session_id))
    users = [record for record in records if record.get("type") == "user"]
    assert [m.role for m in replay.messages].count("user") >= len(
        [u for u in users if isinstance(u["message"]["content"], str)]
    )
    assert replay.messages[0].text == "Create a hello world function"
    assert replay.messages[-1].role == "assistant"


def test_a_transcript_of_titles_only_is_reported_empty_not_skipped(writer_process, tmp_path: Path) -> None:
    """A Claude Code file holding only summary lines says it has no conversation: status empty,
    exit 0, never counted as already in the ledger."""
    titles = tmp_path / "titles.jsonl"
    titles.write_text(json.dumps({"type": "summary", "summary": "a title", "leafUuid": "x"}) + "\n")
    result = run_rollout("import", "claude", "--writer", writer_process.address, str(titles), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "0 imported, 0 skipped (already in the ledger), 0 failed, 1 empty (no conversation in it)" in (
        result.stdout
    )
    json_result = run_rollout(
        "import", "claude", "--json", "--writer", writer_process.address, str(titles), timeout=120
    )
    [report] = map(json.loads, json_result.stdout.splitlines())
    assert (report["status"], report["detail"]) == (
        "empty",
        "no conversation in it (lines: summary ×1); nothing imported",
    )
