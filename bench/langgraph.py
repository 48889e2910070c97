"""LedgerSaver side by side with LangGraph's SqliteSaver and PostgresSaver, in one run.

    .venv/bin/python bench/langgraph.py [--lengths 10,100,1000] [--threads 10] [--steps 10]
                                        [--rounds 5] [--message-bytes 1000] [--no-postgres]
                                        [--baseline CHECKOUT]

Starts a writer and a reader (subprocesses, a temporary data root), a file-backed SqliteSaver
(LangGraph's own setup: WAL journal, SQLite's default synchronous=FULL) and, when PostgreSQL's
server programs are installed (Debian's ``postgresql``: /usr/lib/postgresql/N/bin), a throwaway
cluster in a temporary folder (initdb, pg_ctl; as the ``postgres`` user when run as root,
through runuser; fsync and synchronous_commit at their defaults, on) for a PostgresSaver.
Without them the PostgresSaver column says "absent".

For each history length H, each saver gets ``--threads`` fresh threads seeded (untimed) with a
checkpoint of H LangChain messages (alternating HumanMessage / AIMessage of ``--message-bytes``
characters). Then each thread takes ``--steps`` steps as LangGraph's loop sends them: the node's
pending writes (``put_writes``: one new message) then the next checkpoint (``put``: the messages
channel at a new version, the list one message longer, made as ``add_messages`` makes it, from
the same message objects). The savers run in turn (the order rotating over the rounds), each
after an ``os.sync()``; a saver's lengths and threads are stepped interleaved. Figures per saver
and length, medians over ``--rounds``:

* steps/s: steps over the time spent in ``put_writes`` + ``put``;
* bytes per step: what the store grew by over the steps (the threads' session files for the
  ledger; the length's database file after a WAL checkpoint for SQLite; the length's
  database's tables with their TOAST and indexes, ``pg_total_relation_size``, for
  PostgreSQL), over the steps;
* get_tuple: the median latency of reading the newest checkpoint of a thread (ms).

``--baseline CHECKOUT`` (another checkout, e.g. a worktree of main) adds its LedgerSaver
(``CHECKOUT/rollout_client/langgraph.py``, over this checkout's client and the same writer) as
"LedgerSaver@base", and the ratio of this checkout's steps/s to it at each length.

Targets (issue 25): at 1,000 messages the ledger's steps/s >= 3x SqliteSaver's and its bytes
per step <= 1/20 of SqliteSaver's; at every length the ledger's steps/s >= PostgresSaver's; the
ledger's steps/s at the longest length >= 0.8x its steps/s at the shortest.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# This file's name is the package's, a namespace package, which any langgraph.py on sys.path
# hides: run as a script, this folder leads the path. It leaves the path until the package's
# modules are imported, then comes back (for _support).
BENCH = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

from rollout_client import RetryPolicy, RolloutClient  # noqa: E402
from rollout_client.langgraph import LedgerSaver  # noqa: E402

sys.path.append(str(BENCH))
from _support import start_service  # noqa: E402

SAVERS = ("LedgerSaver", "LedgerSaver@base", "SqliteSaver", "PostgresSaver")


def baseline_saver(checkout: Path) -> type[LedgerSaver]:
    """The LedgerSaver class of another checkout's ``rollout_client/langgraph.py`` (loaded under a
    name of its own; the rest of the client is this checkout's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "baseline_langgraph", checkout / "rollout_client" / "langgraph.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.LedgerSaver  # type: ignore[no-any-return]


def history(count: int, size: int, tag: str) -> list[BaseMessage]:
    text = ("the agent read the module, ran the failing test and proposed a patch; " * 40)[:size]
    return [
        (HumanMessage if index % 2 == 0 else AIMessage)(f"{tag} {index}: {text}", id=f"{tag}-{index}")
        for index in range(count)
    ]


def checkpoint(messages: list[BaseMessage], version: Any, step: int) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(UTC).isoformat(),
        channel_values={"messages": messages},
        channel_versions={"messages": version},
        versions_seen={"agent": {"messages": version}},
        updated_channels=["messages"],
    )


@dataclass
class Store:
    """One saver at one history length, its threads and what it has measured."""

    name: str
    length: int
    saver: BaseCheckpointSaver[Any]
    stored_bytes: Callable[[list[str]], int]  # the store's size; the ledger's: of these threads
    heads: list[tuple[dict[str, Any], list[BaseMessage], Any]] = field(default_factory=list)
    spent: float = 0.0
    steps: int = 0
    reads: list[float] = field(default_factory=list)

    def thread_ids(self) -> list[str]:
        return [config["configurable"]["thread_id"] for config, _, _ in self.heads]

    def seed(self, threads: int, size: int, run: str) -> None:
        """Threads holding a checkpoint of ``length`` messages each (not timed)."""
        self.heads = []
        for thread in range(threads):
            tag = f"{run}-{self.name}-{self.length}-{thread}"
            messages = history(self.length, size, tag)
            version = self.saver.get_next_version(None, None)
            config = {"configurable": {"thread_id": tag, "checkpoint_ns": ""}}
            stored = self.saver.put(
                config,
                checkpoint(messages, version, -1),
                {"source": "input", "step": -1},
                {"messages": version},
            )
            self.heads.append((stored, messages, version))

    def step(self, index: int, step: int, size: int) -> None:
        """One step of thread ``index`` as the loop sends it: its writes, then its checkpoint (timed)."""
        config, messages, version = self.heads[index]
        new = (AIMessage if (len(messages) % 2) else HumanMessage)(
            f"step {step}: " + "x" * size, id=f"{config['configurable']['thread_id']}-step-{step}"
        )
        grown = [*messages, new]  # as add_messages makes it: the same message objects, one more
        next_version = self.saver.get_next_version(version, None)
        started = time.perf_counter()
        self.saver.put_writes(config, [("messages", [new])], str(uuid.uuid4()))
        config = self.saver.put(
            config,
            checkpoint(grown, next_version, step),
            {"source": "loop", "step": step},
            {"messages": next_version},
        )
        self.spent += time.perf_counter() - started
        self.steps += 1
        self.heads[index] = (config, grown, next_version)

    def read(self, index: int) -> None:
        """Time one get_tuple of thread ``index``'s newest checkpoint."""
        latest = {
            "configurable": {
                "thread_id": self.heads[index][0]["configurable"]["thread_id"],
                "checkpoint_ns": "",
            }
        }
        started = time.perf_counter()
        assert self.saver.get_tuple(latest) is not None
        self.reads.append(time.perf_counter() - started)


def one_round(
    stores: list[Store], args: Any, run: str, round_no: int
) -> dict[tuple[str, int], tuple[float, float, float]]:
    """Each saver in turn (the order rotates with ``round_no``): seed its stores, then step them
    interleaved (thread by thread, length by length), so that the machine's load falls on its
    lengths alike. ``os.sync()`` before each saver's steps: dirty pages another saver left in
    the page cache (PostgreSQL writes its tables lazily) would otherwise be flushed by this
    saver's first syncs. The two LedgerSavers of a ``--baseline`` run are one turn, stepped
    interleaved store by store: the load falls on both alike, and the ratio of the two is
    measured under it. (steps/s, bytes per step, get_tuple median seconds) per (saver, length)."""
    names = list(dict.fromkeys(store.name.split("@")[0] for store in stores))
    names = names[round_no % len(names) :] + names[: round_no % len(names)]
    figures = {}
    for name in names:
        mine = [store for store in stores if store.name.split("@")[0] == name]
        if round_no % 2:
            mine.reverse()  # which of a turn's savers steps first alternates
        before = {}
        for store in mine:
            store.seed(args.threads, args.message_bytes, run)
            store.spent, store.steps, store.reads = 0.0, 0, []
            before[(store.name, store.length)] = store.stored_bytes(store.thread_ids())
        os.sync()
        for step in range(args.steps):
            for index in range(args.threads):
                for store in mine:
                    store.step(index, step, args.message_bytes)
        for _ in range(5):
            for index in range(args.threads):
                for store in mine:
                    store.read(index)
        for store in mine:
            grown = store.stored_bytes(store.thread_ids()) - before[(store.name, store.length)]
            figures[(store.name, store.length)] = (
                store.steps / store.spent,
                grown / store.steps,
                statistics.median(store.reads),
            )
    return figures


# -- stores ------------------------------------------------------------------------------------


def sqlite_bytes(connection: sqlite3.Connection) -> int:
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    return int(pages * connection.execute("PRAGMA page_size").fetchone()[0])


def postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@contextlib.contextmanager
def postgres_cluster() -> Iterator[str | None]:
    """A throwaway PostgreSQL cluster in a temporary folder of its own: its connection string
    (None when the server programs are absent). Removed afterwards."""
    programs = postgres_bin()
    if programs is None:
        yield None
        return
    with (
        tempfile.TemporaryDirectory(prefix="bench-pg-") as scratch_name,
        cluster_in(programs, Path(scratch_name)) as url,
    ):
        yield url


@contextlib.contextmanager
def cluster_in(programs: Path, scratch: Path) -> Iterator[str]:
    data, sockets = scratch / "pgdata", scratch / "pgsock"
    sockets.mkdir()
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: the cluster runs as the postgres user
        shutil.chown(scratch, "postgres")
        shutil.chown(sockets, "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_postgres, str(programs / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
        check=True,
        capture_output=True,
    )
    with socket_port() as port:
        options = f"-p {port} -k {sockets} -c listen_addresses=''"
        subprocess.run(
            [
                *as_postgres,
                str(programs / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-w",
                "-l",
                str(scratch / "pg.log"),
                "start",
            ],
            check=True,
            capture_output=True,
        )
    try:
        yield f"postgresql://postgres@/postgres?host={sockets}&port={port}"
    finally:
        subprocess.run(
            [*as_postgres, str(programs / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
            capture_output=True,
        )


@contextlib.contextmanager
def socket_port() -> Iterator[int]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield port


def postgres_bytes(connection: Any) -> int:
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    return sum(
        connection.execute(f"SELECT pg_total_relation_size('{table}') AS size").fetchone()["size"]
        for table in tables
    )  # type: ignore[index]


# -- the run -----------------------------------------------------------------------------------


def session_files_bytes(client: RolloutClient, data: Path) -> Callable[[list[str]], int]:
    """The size of the threads' session files (each thread is one session; its id in the name)."""

    def measure(thread_ids: list[str]) -> int:
        total = 0
        for thread_id in thread_ids:
            session_id, _ = client.resolve_session(thread_id)
            total += sum(path.stat().st_size for path in data.rglob(f"*{session_id}*") if path.is_file())
        return total

    return measure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="10,100,1000")
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--message-bytes", type=int, default=1000)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    lengths = [int(length) for length in args.lengths.split(",")]
    print("command:", " ".join([".venv/bin/python", *sys.argv]))
    figures: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        data = scratch / "data"
        data.mkdir()
        writer = start_service("writer", data, scratch / "writer.log")
        reader = start_service("reader", data, scratch / "reader.log")
        cluster = contextlib.nullcontext(None) if args.no_postgres else postgres_cluster()
        try:
            with (
                RolloutClient(writer.address, reader.address, retry=RetryPolicy(deadline=120.0)) as client,
                cluster as pg_url,
                contextlib.ExitStack() as stack,
            ):
                ledger = LedgerSaver(client)
                stores = [
                    Store("LedgerSaver", length, ledger, session_files_bytes(client, data))
                    for length in lengths
                ]
                if args.baseline is not None:
                    base = baseline_saver(args.baseline)(client)
                    stores += [
                        Store("LedgerSaver@base", length, base, session_files_bytes(client, data))
                        for length in lengths
                    ]
                for length in lengths:  # a database file per length: its growth is that length's
                    connection = sqlite3.connect(scratch / f"sqlite-{length}.db", check_same_thread=False)
                    stack.callback(connection.close)
                    sqlite = SqliteSaver(connection)
                    sqlite.setup()
                    stores.append(
                        Store("SqliteSaver", length, sqlite, lambda _, c=connection: sqlite_bytes(c))
                    )
                synchronous = connection.execute("PRAGMA synchronous").fetchone()[0]
                print(f"SqliteSaver: a file per length, journal WAL, synchronous={synchronous} (2 = FULL)")
                if pg_url is None:
                    why = "--no-postgres" if args.no_postgres else "no /usr/lib/postgresql/*/bin/initdb"
                    print(f"PostgresSaver: absent ({why})")
                else:
                    for length in lengths:  # a database per length
                        with PostgresSaver.from_conn_string(pg_url) as admin:
                            admin.conn.execute(f"CREATE DATABASE h{length}")
                        saver = stack.enter_context(
                            PostgresSaver.from_conn_string(pg_url.replace("/postgres?", f"/h{length}?"))
                        )
                        saver.setup()
                        stores.append(
                            Store("PostgresSaver", length, saver, lambda _, s=saver: postgres_bytes(s.conn))
                        )
                    version = saver.conn.execute("SHOW server_version").fetchone()
                    print(
                        f"PostgresSaver: PostgreSQL {version['server_version']}, a throwaway cluster, a database"
                        " per length (fsync on, synchronous_commit on)"
                    )
                for round_no in range(args.rounds):
                    for key, measured in one_round(stores, args, f"r{round_no}", round_no).items():
                        figures.setdefault(key, []).append(measured)
        finally:
            writer.stop()
            reader.stop()
    report(figures, lengths, args)
    return 0


def report(
    figures: dict[tuple[str, int], list[tuple[float, float, float]]], lengths: list[int], args: Any
) -> None:
    names = [name for name in SAVERS if any(key[0] == name for key in figures)]
    print(
        f"{args.threads} threads x {args.steps} steps per length, messages of {args.message_bytes} characters,"
        f" {args.rounds} rounds (medians)"
    )
    print(f"{'history':>8} {'saver':16} {'steps/s':>9} {'bytes/step':>12} {'get_tuple ms':>13}")
    medians: dict[tuple[str, int], tuple[float, float, float]] = {}
    for length in lengths:
        for name in names:
            runs = figures[(name, length)]
            medians[(name, length)] = (
                statistics.median(run[0] for run in runs),
                statistics.median(run[1] for run in runs),
                statistics.median(run[2] for run in runs),
            )
            rate, size, read = medians[(name, length)]
            print(f"{length:>8} {name:16} {rate:>9.1f} {size:>12.0f} {read * 1000:>13.2f}")
    longest, shortest = max(lengths), min(lengths)
    ledger_long, sqlite_long = medians[("LedgerSaver", longest)], medians[("SqliteSaver", longest)]
    checks = [
        (f"steps/s at {longest}: ledger / SqliteSaver", ledger_long[0] / sqlite_long[0], ">=", 3.0),
        (f"bytes/step at {longest}: ledger / SqliteSaver", ledger_long[1] / sqlite_long[1], "<=", 1 / 20),
        (
            f"steps/s ledger at {longest} / at {shortest}",
            ledger_long[0] / medians[("LedgerSaver", shortest)][0],
            ">=",
            0.8,
        ),
    ]
    if "LedgerSaver@base" in names:
        for length in lengths:
            ratio = medians[("LedgerSaver", length)][0] / medians[("LedgerSaver@base", length)][0]
            checks.append((f"steps/s at {length}: ledger / ledger@base", ratio, ">=", 1.0))
    if "PostgresSaver" in names:
        for length in lengths:
            ratio = medians[("LedgerSaver", length)][0] / medians[("PostgresSaver", length)][0]
            checks.append((f"steps/s at {length}: ledger / PostgresSaver", ratio, ">=", 1.0))
    for label, ratio, sign, target in checks:
        met = ratio >= target if sign == ">=" else ratio <= target
        print(f"{label:48} {ratio:>8.3f}  target {sign} {target:.3f}  {'met' if met else 'NOT MET'}")


if __name__ == "__main__":
    raise SystemExit(main())
