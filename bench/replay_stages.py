"""Where a cold replay's time goes: each stage of GetReplay's rendering, against a raw parse.

Writes one running session of about ``--messages`` rebuilt messages (the record mix
of bench/_support.py) and times, in this process, in thread CPU time, per round:

* raw: ``Path.read_bytes()``, ``split(b"\\n")`` and ``orjson.loads`` of every line
  (the baseline of bench/replay.py);
* read + split: the first two alone;
* parse + rules: :class:`shared.rebuild.Rebuilder` over those lines, its sequence
  holding nothing (every line parsed and every rule applied, no message kept);
* canonical: :func:`shared.digest.framed_canonical` of every returned message
  (payloads fresh from a rebuild, as the replay cache meets them);
* entries: :func:`reader_service.wire.message_entry` of the same messages, after
  their canonical form (the order the replay cache renders them in);
* digest: :func:`shared.digest.digest_of_framed` of the framed canonical bytes;
* reply: :func:`reader_service.wire.replay_reply` joining the entries;
* compiled floor: what every cold replay runs that is compiled code already, with no
  rule and no rendering around it: read + split, ``orjson.loads`` of every line, the
  CRC32C line check of every line, ``orjson.dumps`` (sorted keys) of every message
  payload and sha256 over those bytes. Nothing written in Python can make a cold
  replay cheaper than this; a served one adds gRPC and the client's parse on top
  (bench/replay.py's "unchanged" figure is that part alone);
* cold render: ``ReplayCache.rendered`` of a file it never saw, then
  ``replay_reply``: the work of a cold GetReplay on the reader's heavy thread. The
  caches stay alive across rounds, as a reader keeps its entries (each round's
  rendered messages take fresh memory).

Each figure is the median over ``--rounds`` with its ratio to the same rounds' raw
time. The stages do not add up to the cold render exactly (the pass keeps what it
renders, caches and memory differ); the line "cold render - stages" shows by how much.
What a served cold GetReplay adds on top (gRPC, the reply on the wire, the client's
parse) is bench/replay.py's cold figure minus this cold render.

    .venv/bin/python bench/replay_stages.py [--messages 1000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from _support import MB, HelpFormatter, write_session
from replay import raw_parse, turns_for_messages

from reader_service import wire
from reader_service.replay_cache import ReplayCache
from shared.digest import digest_of_framed, framed_canonical
from shared.rebuild import PendingReasoning, Rebuilder, collector_paused, crc32c, rebuild
from shared.records import LINE_CHECK_MARK, RecordType


class _Discarding(Rebuilder):
    """The rule set with a sequence that holds nothing (what parse + rules cost alone)."""

    keeps_payloads = False

    def keep(self, payload: dict[str, Any], offset: int, index: int, reasoning: PendingReasoning) -> Any:
        return None


def cpu_ms(function: Callable[[], object]) -> float:
    started = time.thread_time()
    function()
    return (time.thread_time() - started) * 1000


def read_and_split(path: Path) -> list[bytes]:
    lines = path.read_bytes().split(b"\n")
    lines.pop()
    return lines


def compiled_floor(path: Path) -> str:
    """Read, split, parse and line-check every line, dump and hash every message payload
    (the compiled calls of a cold replay, nothing else); returns the hash (hex)."""
    loads, dumps, sort_keys = orjson.loads, orjson.dumps, orjson.OPT_SORT_KEYS
    mark, message = LINE_CHECK_MARK, RecordType.MESSAGE.value
    hasher = hashlib.sha256()
    for line in read_and_split(path):
        record = loads(line)
        crc32c(line[: line.rfind(mark)])
        if record["type"] == message:
            hasher.update(dumps(record["payload"], option=sort_keys))
    return hasher.hexdigest()


def measure_round(path: Path, kept: list[ReplayCache]) -> dict[str, float]:
    """One round's CPU milliseconds of every stage."""
    times = {"raw": cpu_ms(lambda: raw_parse(path))}
    times["read + split"] = cpu_ms(lambda: read_and_split(path))
    lines = read_and_split(path)
    with collector_paused():
        times["parse + rules"] = cpu_ms(lambda: _Discarding().run(lines))
        messages = rebuild(path.read_bytes()).messages
        framed: list[bytes] = []
        times["canonical"] = cpu_ms(lambda: framed.extend(map(framed_canonical, messages)))
        entries: list[bytes] = []
        times["entries"] = cpu_ms(lambda: entries.extend(map(wire.message_entry, messages)))
    times["digest"] = cpu_ms(lambda: digest_of_framed(framed, len(framed)))
    cache = ReplayCache(1 << 30)
    kept.append(cache)
    rendered = cache.rendered(path)
    assert rendered is not None
    times["reply"] = cpu_ms(lambda: wire.replay_reply("s", rendered.entries, rendered.facts, 0))
    times["compiled floor"] = cpu_ms(lambda: compiled_floor(path))
    cache = ReplayCache(1 << 30)
    kept.append(cache)

    def cold() -> None:
        answer = cache.rendered(path)
        assert answer is not None
        wire.replay_reply("s", answer.entries, answer.facts, 0)

    times["cold render"] = cpu_ms(cold)
    return times


STAGES = ("read + split", "parse + rules", "canonical", "entries", "digest", "reply")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--messages", type=int, default=1000, help="session size, in rebuilt messages")
    parser.add_argument("--rounds", type=int, default=15, help="rounds (medians are taken over them)")
    args = parser.parse_args(argv)
    print("command:", shlex.join(sys.orig_argv))
    with tempfile.TemporaryDirectory(prefix="rollout-bench-stages-", dir="/tmp") as folder:
        created = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
        info = write_session(
            Path(folder), turns=turns_for_messages(args.messages), created_at=created, stop_kind=""
        )
        kept: list[ReplayCache] = []
        rounds = [measure_round(info.path, kept) for _ in range(args.rounds)]
    print(
        f"\nsession of {info.messages:,} messages ({info.bytes / MB:.2f} MB, {info.records:,} records);"
        f" {args.rounds} rounds; thread CPU time"
    )
    print("                     ms: median   ratio to raw: median  (min-max)")

    def line(name: str, values: list[float]) -> str:
        ratios = [value / one["raw"] for value, one in zip(values, rounds, strict=True)]
        return (
            f"  {name:22s} {statistics.median(values):8.2f}  {statistics.median(ratios):14.2f}"
            f"  ({min(ratios):.2f}-{max(ratios):.2f})"
        )

    for name in ("raw", *STAGES, "compiled floor", "cold render"):
        print(line(name, [one[name] for one in rounds]))
    print(
        line(
            "cold render - stages", [one["cold render"] - sum(one[name] for name in STAGES) for one in rounds]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
