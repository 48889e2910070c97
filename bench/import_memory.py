"""The memory of ``rollout import`` for a transcript with one long line, against a small one, as a ratio.

Starts ``rollout serve-writer`` (this checkout) on a temporary data root with the
default record limit, writes three temporary Codex rollouts (a short one: a user
message, a tool call and its output; the same with an output of ``--line-mb`` MB,
under the limit; the same with an output of ``--over-mb`` MB, over it) and the
same three as Claude Code transcripts, then runs ``rollout import codex|claude
--json`` on each in a fresh process from ``--cli-repo`` (this checkout by default:
pass another checkout to measure it the same way) and reads that process's peak
resident memory (``ru_maxrss`` of ``wait4``). It prints, per tool, the peak for
the short file (the baseline), for each long one, and the ratio of the long
file's peak above the baseline to its line's length: the bytes of memory the
import costs per byte of its longest line. A line over the record limit is
refused either way (by the writer after it was read, converted and sent, or by
the CLI's reader at the limit, naming the line); its status is printed.

    .venv/bin/python bench/import_memory.py [--line-mb 48] [--over-mb 100] [--cli-repo PATH]

Exit status: 0 whatever the figures; 2 when an import of the short or the long
file does not succeed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from _support import HelpFormatter
from fleet import Servers

REPO = Path(__file__).resolve().parent.parent
TIME = "2026-06-01T10:00:00.000Z"
#: Stands for the long output while a line is encoded; the file gets the output written in chunks,
#: so that this process stays small (a child's peak RSS counts its parent's at the fork).
FILL = "@FILL@"


def write_lines(path: Path, lines: list[dict[str, object]], output_bytes: int) -> None:
    """``lines`` as JSONL, the one ``FILL`` value replaced by ``output_bytes`` bytes of ``z``."""
    with path.open("w") as handle:
        for line in lines:
            before, marker, after = (json.dumps(line) + "\n").partition(FILL)
            handle.write(before)
            if marker:
                for start in range(0, output_bytes, 1 << 20):
                    handle.write("z" * min(1 << 20, output_bytes - start))
            handle.write(after)


def codex_rollout(path: Path, output_bytes: int) -> None:
    """A Codex rollout: a user message, a shell call, and its output of ``output_bytes`` bytes."""
    lines = [
        {"type": "session_meta", "payload": {"id": str(uuid.uuid4()), "timestamp": TIME, "cwd": "/w"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "go"}},
        {
            "type": "response_item",
            "payload": {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"},
        },
        {
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "c1", "output": FILL},
        },
    ]
    write_lines(path, [{"timestamp": TIME, **line} for line in lines], output_bytes)


def claude_transcript(path: Path, output_bytes: int) -> None:
    """A Claude Code transcript: a prompt, a Bash tool_use, and its tool_result of ``output_bytes`` bytes."""
    base = {"sessionId": str(uuid.uuid4()), "isSidechain": False, "timestamp": TIME}
    call = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": FILL}
    lines = [
        {
            **base,
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "message": {"role": "user", "content": "go"},
        },
        {
            **base,
            "type": "assistant",
            "uuid": "a1",
            "parentUuid": "u1",
            "message": {"role": "assistant", "id": "m1", "content": [call]},
        },
        {
            **base,
            "type": "user",
            "uuid": "u2",
            "parentUuid": "a1",
            "message": {"role": "user", "content": [result]},
        },
    ]
    write_lines(path, lines, output_bytes)


def peak_import(cli_repo: Path, tool: str, path: Path, writer: str) -> tuple[float, str]:
    """(peak RSS in MiB, the file's import status) of ``rollout import TOOL --json PATH`` in a fresh process."""
    argv = [sys.executable, "-m", "rollout_cli.main", "import", tool, "--json", "--writer", writer, str(path)]
    env = {**os.environ, "PYTHONPATH": str(cli_repo)}
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(argv, cwd=cli_repo, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, wait_status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(wait_status)
        out.seek(0)
        reports = [json.loads(line) for line in out.read().splitlines() if line.startswith(b"{")]
    status = reports[0]["status"] if reports else "no report"
    return usage.ru_maxrss / 1024, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument(
        "--line-mb", type=int, default=48, help="the long line's output, under the limit (MB)"
    )
    parser.add_argument("--over-mb", type=int, default=100, help="the line over the limit (MB)")
    parser.add_argument("--cli-repo", type=Path, default=REPO, help="checkout the import runs from")
    args = parser.parse_args(argv)
    print("command:", shlex.join([".venv/bin/python", "bench/import_memory.py", *sys.argv[1:]]))
    cli_repo = args.cli_repo.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="rollout-import-memory-"))
    failed = False
    try:
        (tmp / "data").mkdir()
        writer, _ = Servers(tmp, REPO).writer(tmp / "data")
        try:
            for tool, make in (("codex", codex_rollout), ("claude", claude_transcript)):
                sizes = {
                    "short": 2,
                    "long": args.line_mb * 1_000_000,
                    "over the limit": args.over_mb * 1_000_000,
                }
                peaks: dict[str, float] = {}
                for label, size in sizes.items():
                    path = tmp / f"{tool}-{label.replace(' ', '-')}.jsonl"
                    make(path, size)
                    peaks[label], status = peak_import(cli_repo, tool, path, writer.address)
                    path.unlink()
                    if label != "over the limit" and status != "imported":
                        failed = True
                    line = f"{tool:<7}{label:<16}{size / 1e6:9.1f} MB line   peak {peaks[label]:8.1f} MiB  {status}"
                    if label != "short":
                        ratio = (peaks[label] - peaks["short"]) * 1024 * 1024 / size
                        line += f"   {ratio:.2f} bytes above the short file's per byte of the line"
                    print(line)
        finally:
            writer.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
