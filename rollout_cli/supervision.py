"""Serving the pair: ``rollout serve`` (writer and reader as two supervised processes),
``rollout serve-writer`` and ``rollout serve-reader``, and their signal handling.

* A service runs until SIGINT or SIGTERM, then drains (:func:`serve_until_signal`); the
  handlers go in before it starts, and further stop signals are ignored once it stopped.
* ``rollout serve`` launches both services (``python -m rollout_cli.main serve-<kind>``),
  forwards a stop to them as SIGTERM, and stops the other when one exits on its own (half
  a pair never keeps running). Each launched service ignores SIGINT (``serve`` forwards a
  Ctrl-C) and gets SIGTERM from the kernel when ``serve`` dies, even by SIGKILL
  (``prctl(PR_SET_PDEATHSIG)``, Linux).
* A command started with SIGINT ignored keeps ignoring it and stops on SIGTERM alone
  (:func:`stop_signals`): a shell script's background job (``rollout serve &``) is not
  meant to end with the Ctrl-C of the script's foreground command, as POSIX shells,
  Python's own ``KeyboardInterrupt`` and the loading ``rollout`` console script have it.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reader_service.limits import (
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_READ_BUDGET_BYTES,
    DEFAULT_REPLAY_CACHE_BYTES,
    MiB,
)
from rollout_cli.serve_options import ServeOptions, pair_options, reloading_tokens, service_options
from rollout_client import DEFAULT_READER, DEFAULT_WRITER
from serving.server import BindError, split_address
from shared.records import DEFAULT_MAX_RECORD_BYTES
from shared.shards import DEFAULT_SHARDS, MAX_SHARDS, ClusterFileError
from writer_service.committer import CommitConfig, Durability, RoundSync, SyncCall
from writer_service.refusal_pacing import DEFAULT_RATE as DEFAULT_UNKNOWN_ID_RATE

if TYPE_CHECKING:
    from writer_service.ownership import ServedOwnership
    from writer_service.sessions import WriterConfig

log = logging.getLogger(__name__)

DEFAULT_DATA_DIR = "rollout-data"

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=lambda: os.environ.get("ROLLOUT_DATA_DIR", DEFAULT_DATA_DIR),
    help=f"Data root holding the session files (env ROLLOUT_DATA_DIR, else {DEFAULT_DATA_DIR}).",
)

# Writer options that `serve` also takes and hands to its writer: declared once for both.
durability_option = click.option(
    "--durability",
    type=click.Choice([d.value for d in Durability]),
    default="fsync",
    show_default=True,
    help="fsync: an ack survives power loss; unsafe_no_fsync: process crash only.",
)
sync_call_option = click.option(
    "--sync-call",
    type=click.Choice([c.value for c in SyncCall]),
    default="pwritev2",
    show_default=True,
    help="fsync mode only: pwritev2 = one pwritev2(RWF_DSYNC) call per batch (write + fdatasync"
    " where refused); fdatasync = always write then fdatasync. Same promise either way.",
)
round_sync_option = click.option(
    "--round-sync",
    type=click.Choice([r.value for r in RoundSync]),
    default="syncfs",
    show_default=True,
    help="fsync mode only: how a durability round of several sessions is synced. syncfs = one"
    " syncfs() of the data root's file system (also flushes other files on it: best on a volume of"
    " its own); per_file = each session file by its own call, in turn. Same promise either way.",
)
retain_stopped_days_option = click.option(
    "--retain-stopped-days",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Delete stopped sessions last written more than this many days ago (checked at start, then"
    " hourly; open sessions are never deleted). Each deletion leaves a deletion record and is"
    ' counted in rollout_deleted_sessions_total{cause="retention"}. Default: keep every session.',
)
metrics_port_option = click.option(
    "--metrics-port", type=int, default=None, help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics."
)


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop this service or pair: SIGTERM, and SIGINT (Ctrl-C) unless this
    process was started with SIGINT ignored (call it before installing any handler).

    A parent that ignores SIGINT (a shell running ``rollout serve &`` from a script, ``trap ''
    INT``, ``rollout serve`` for its services) passes the ignore on through fork and exec, and
    means it: a Ctrl-C aimed at the foreground command must not stop this process. SIGTERM
    (``kill``, systemd, Kubernetes, ``serve`` forwarding a Ctrl-C) always stops it.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return (signal.SIGTERM,)
    return (signal.SIGINT, signal.SIGTERM)


def _ignore_stop_signals() -> None:
    """Once everything has stopped: a further stop request has nothing left to stop, and must
    not kill the process (or raise KeyboardInterrupt) while the interpreter shuts down, which
    first resets the handlers it installed."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


async def serve_until_signal(start: Any, label: str) -> None:
    """Await ``start`` (a coroutine giving a running service), announce it, serve until SIGTERM,
    or SIGINT when it was not ignored at start (:func:`stop_signals`).

    The signal handlers go in before the service starts: a stop request that arrives while it
    starts, or just after it says it listens, drains it like any other instead of killing it
    with the default SIGTERM action (exit status -15 and an unclean ``rollout serve``). Once the
    service has stopped, further SIGINT/SIGTERM are ignored: there is nothing left to drain, and
    a repeated Ctrl-C must not raise KeyboardInterrupt while the process shuts down.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = stop_signals()
    for sig in handled:
        loop.add_signal_handler(sig, stop.set)
    running = await start
    click.echo(f"rollout {label} listening on {running.address}", err=False)
    sys.stdout.flush()
    drained = getattr(running, "wait_drained", None)  # a writer of a cluster may be drained from outside
    waits = [asyncio.ensure_future(stop.wait())]
    if drained is not None:
        waits.append(asyncio.ensure_future(drained()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        wait.cancel()
    log.info("%s: stopping (draining queued work)", label)
    await running.stop()
    for sig in handled:
        loop.remove_signal_handler(sig)
    _ignore_stop_signals()


@click.command("serve-writer")
@data_dir_option
@click.option("--address", default=DEFAULT_WRITER, show_default=True, help="host:port to bind (port 0: any).")
@durability_option
@sync_call_option
@round_sync_option
@click.option("--batch-max-records", default=32, show_default=True, help="Records per group-commit batch.")
@click.option(
    "--batch-max-wait-ms",
    default=20.0,
    show_default=True,
    help="Upper bound on --linger-ms (ms).",
)
@click.option(
    "--linger-ms",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="How long a partly filled batch waits for company before its sync (ms); 0: the previous"
    " sync is the only wait.",
)
@metrics_port_option
@click.option(
    "--max-record-bytes",
    type=click.IntRange(1024, 1024 * 1024 * 1024),
    default=DEFAULT_MAX_RECORD_BYTES,
    show_default=True,
    help="Largest stored line (bytes); larger records are refused, never truncated. Clients replaying"
    " such records need a gRPC receive limit above it.",
)
@click.option(
    "--unknown-id-rate",
    type=click.FloatRange(0),
    default=DEFAULT_UNKNOWN_ID_RATE,
    show_default=True,
    help="Appends to unknown session ids answered per second per connection once a burst of 200 is"
    " spent (later ones are answered late, never dropped); 0: no pacing.",
)
@click.option(
    "--repair-retry-seconds",
    type=click.FloatRange(0.1),
    default=5.0,
    show_default=True,
    help="How often a session whose file could not be repaired at start-up (a full disk) is tried"
    " again; it is also tried at each call on it.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, MAX_SHARDS),
    default=DEFAULT_SHARDS,
    show_default=True,
    help="Shards of a data root this writer creates (recorded in its cluster.json, never changed);"
    " an existing data root keeps its own.",
)
@click.option(
    "--etcd",
    default=None,
    metavar="HOST:PORT[,...]",
    help="Join a cluster of writers sharing this data root, owning shards through leases in this"
    " etcd (docs/cluster.md); without it the writer owns every shard alone. Not with --static-shard-map.",
)
@click.option("--cluster", "cluster_name", default=None, help="The cluster's name in etcd (with --etcd).")
@click.option(
    "--lease-ttl",
    type=click.IntRange(1, 3600),
    default=10,
    show_default=True,
    help="Seconds of the writer's lease (with --etcd): a writer that stops renewing it loses its"
    " shards this long after its last renewal, and stops acknowledging a little earlier.",
)
@click.option(
    "--advertise",
    default=None,
    metavar="HOST:PORT",
    help="The address clients reach this writer at, stored in etcd for routing (with --etcd;"
    " default: the bound address, unless it is a wildcard host such as 0.0.0.0).",
)
@retain_stopped_days_option
@click.option(
    "--static-shard-map",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    hidden=True,
    help="Testing: own the shards this JSON map gives --address, beside other writers on the same"
    " data root (writer_service.ownership.StaticOwnership).",
)
@service_options
def serve_writer(
    data_dir: Path,
    address: str,
    durability: str,
    sync_call: str,
    round_sync: str,
    batch_max_records: int,
    batch_max_wait_ms: float,
    linger_ms: float,
    metrics_port: int | None,
    max_record_bytes: int,
    unknown_id_rate: float,
    repair_retry_seconds: float,
    shards: int,
    etcd: str | None,
    cluster_name: str | None,
    lease_ttl: int,
    advertise: str | None,
    retain_stopped_days: float | None,
    static_shard_map: Path | None,
    serving: ServeOptions,
) -> None:
    """Run the writer service alone (one per data root), or as one writer of a cluster (--etcd)."""
    from writer_service.ownership import DataRootLockedError, OwnershipStartError, StaticShardMapError
    from writer_service.server import start_writer
    from writer_service.sessions import WriterConfig

    settings = serving.begin("writer", metrics_port)
    if sync_call != SyncCall.PWRITEV2 and durability == Durability.UNSAFE_NO_FSYNC:
        click.echo(
            "note: --sync-call has no effect with --durability unsafe_no_fsync (nothing is synced)", err=True
        )

    config = WriterConfig(
        data_dir=data_dir,
        commit=CommitConfig(
            batch_max_records,
            batch_max_wait_ms,
            linger_ms=linger_ms,
            durability=Durability(durability),
            sync_call=SyncCall(sync_call),
            round_sync=RoundSync(round_sync),
        ),
        max_record_bytes=max_record_bytes,
        unknown_id_rate=unknown_id_rate,
        repair_retry_seconds=repair_retry_seconds,
        shards=shards,
        retain_stopped_days=retain_stopped_days,
        static_shard_map=static_shard_map,
    )
    try:
        ownership = _cluster_ownership(config, etcd, cluster_name, lease_ttl, advertise)
        running = start_writer(config, address, settings, ownership)
        asyncio.run(serve_until_signal(reloading_tokens(running, settings), "writer"))
    except (
        DataRootLockedError,
        ClusterFileError,
        BindError,
        OwnershipStartError,
        StaticShardMapError,
    ) as exc:
        raise click.ClickException(str(exc)) from exc


def _cluster_ownership(
    config: WriterConfig, etcd: str | None, cluster_name: str | None, lease_ttl: int, advertise: str | None
) -> ServedOwnership | None:
    """The ownership of a writer of a cluster (``--etcd``: the data root created if new and its
    lock held shared), or None for the embedded default; click.UsageError for options that do
    not go together or a bad cluster name, DataRootLockedError when a single writer holds the root."""
    cluster_only = {"--cluster": cluster_name, "--advertise": advertise}
    if etcd is not None and config.static_shard_map is not None:
        raise click.UsageError(
            "--etcd and --static-shard-map do not go together: a writer owns shards through leases"
            " in etcd (a cluster) or by a fixed map (testing), not both; drop one"
        )
    if etcd is None:
        given = [name for name, value in cluster_only.items() if value is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)} needs --etcd (a writer of a cluster)")
        return None
    if cluster_name is None:
        raise click.UsageError("--etcd needs --cluster NAME (the cluster's name in etcd)")
    from shared.layout import DataRoot
    from writer_service.cluster_ownership import ClusterSettings, EtcdOwnership
    from writer_service.ownership import SharedRootLock

    try:
        settings = ClusterSettings(etcd, cluster_name, lease_ttl, advertise)
        EtcdOwnership(settings, 1)  # the name and TTL checked before anything is made
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    root = DataRoot(config.data_dir)
    root.create(config.shards)
    return EtcdOwnership(settings, root.shards, SharedRootLock.claim(root))


@click.command("serve-reader")
@data_dir_option
@click.option("--address", default=DEFAULT_READER, show_default=True, help="host:port to bind (port 0: any).")
@click.option(
    "--max-reply-bytes",
    type=click.IntRange(1024),
    default=DEFAULT_MAX_REPLY_BYTES,
    show_default=True,
    help="Largest unary reply; a GetReplay or GetMemoryView of a larger session is refused"
    " (RESOURCE_EXHAUSTED) before it is read: stream it.",
)
@click.option(
    "--replay-cache-mb",
    type=click.IntRange(0),
    default=DEFAULT_REPLAY_CACHE_BYTES // MiB,
    show_default=True,
    help="Memory for rendered replays of recently read sessions (MiB; 0: none).",
)
@click.option(
    "--read-budget-mb",
    type=click.IntRange(1),
    default=DEFAULT_READ_BUDGET_BYTES // MiB,
    show_default=True,
    help="Memory heavy reads in flight may hold together (MiB); more wait their turn.",
)
@click.option(
    "--search-index-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of this reader's content index (a cache rebuilt from the files; one reader per"
    " folder). Default: a temporary folder, built again at each start.",
)
@click.option(
    "--search/--no-search",
    default=True,
    show_default=True,
    help="Keep a content index for SearchSessions (off: SearchSessions is UNAVAILABLE).",
)
@click.option(
    "--follow-poll-ms",
    type=click.IntRange(0, 60_000),
    default=1000,
    show_default=True,
    help="WatchSession looks at every followed file this often besides inotify, which does not see"
    " writes made on another host of a shared volume (0: inotify alone; one host only).",
)
@click.option(
    "--writers",
    envvar="ROLLOUT_READER_WRITERS",
    default="",
    help="host:port[,...] of the cluster's writers (env ROLLOUT_READER_WRITERS). A session whose file"
    " this reader does not see is NOT_FOUND only once its shard's owner does not hold it either;"
    " else UNAVAILABLE, retry (a new file can take a while to show on another host of a shared"
    " volume). Empty: NOT_FOUND from the files alone.",
)
@click.option(
    "--writers-tls-ca",
    envvar="ROLLOUT_READER_WRITERS_TLS_CA",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="PEM roots to trust for the --writers (TLS; default: plaintext).",
)
@service_options
def serve_reader(
    data_dir: Path,
    address: str,
    max_reply_bytes: int,
    replay_cache_mb: int,
    read_budget_mb: int,
    search_index_dir: Path | None,
    search: bool,
    follow_poll_ms: int,
    writers: str,
    writers_tls_ca: Path | None,
    serving: ServeOptions,
) -> None:
    """Run a reader service (any number may serve one data root; it never writes to it)."""
    from reader_service.server import ReaderConfig, start_reader

    settings = serving.begin("reader")
    config = ReaderConfig(
        data_dir=data_dir,
        max_reply_bytes=max_reply_bytes,
        replay_cache_bytes=replay_cache_mb * MiB,
        read_budget_bytes=read_budget_mb * MiB,
        search=search,
        search_index_dir=search_index_dir,
        follow_poll_seconds=follow_poll_ms / 1000,
        writers=tuple(address.strip() for address in writers.split(",") if address.strip()),
        writers_tls_ca=writers_tls_ca,
    )
    try:
        asyncio.run(
            serve_until_signal(reloading_tokens(start_reader(config, address, settings), settings), "reader")
        )
    except (ClusterFileError, BindError) as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:  # the content index's folder: not made, or another reader's
        if search_index_dir is None or exc.filename != str(search_index_dir):
            raise
        raise click.ClickException(f"--search-index-dir: {exc.strerror}: {exc.filename}") from exc


_PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal this process gets when its parent dies


def _service_preparation(serve_pid: int) -> Callable[[], None]:
    """What each service `serve` launches runs after fork, before exec (Linux).

    - SIGINT is ignored, for good (:func:`stop_signals`): a terminal's Ctrl-C reaches the
      whole process group and would otherwise end a loading service with a KeyboardInterrupt
      traceback; `serve` forwards the stop as SIGTERM instead.
    - The kernel sends the service SIGTERM when `serve` dies, even by SIGKILL: the service
      drains and exits instead of living on unsupervised (a writer would keep the data root
      locked against the next `serve`). A `serve` that died before the request took effect is
      caught by comparing the parent id.

    libc is loaded here, in `serve` (single-threaded), never in the forked child.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def prepare() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != serve_pid:
            os._exit(1)

    return prepare


def _check_pair_addresses(writer_address: str, reader_address: str) -> None:
    """Refuse (click usage errors, before either service starts) an address that is not host:port,
    and one address given to both services (port 0, any free port, excepted)."""
    parsed = []
    for option, address in (("--writer-address", writer_address), ("--reader-address", reader_address)):
        try:
            parsed.append(split_address(address))
        except BindError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None
    if parsed[0] == parsed[1] and parsed[0][1] != "0":
        raise click.UsageError(
            f"the writer and the reader cannot both bind {writer_address}: give one of them another port"
        )


@click.command()
@data_dir_option
@click.option(
    "--writer-address", default=DEFAULT_WRITER, show_default=True, help="host:port the writer binds."
)
@click.option(
    "--reader-address", default=DEFAULT_READER, show_default=True, help="host:port the reader binds."
)
@durability_option
@sync_call_option
@round_sync_option
@metrics_port_option
@retain_stopped_days_option
@pair_options
def serve(
    data_dir: Path,
    writer_address: str,
    reader_address: str,
    durability: str,
    sync_call: str,
    round_sync: str,
    metrics_port: int | None,
    retain_stopped_days: float | None,
    serving: ServeOptions,
) -> None:
    """Run the writer and a reader as two processes on a local data root; Ctrl-C stops both
    (unless started with SIGINT ignored: then SIGTERM does)."""
    _check_pair_addresses(writer_address, reader_address)
    base = [sys.executable, "-m", "rollout_cli.main"]
    writer_options = ["--durability", durability, "--sync-call", sync_call, "--round-sync", round_sync]
    if metrics_port is not None:
        writer_options += ["--metrics-port", str(metrics_port)]
    if retain_stopped_days is not None:
        writer_options += ["--retain-stopped-days", repr(retain_stopped_days)]
    serving.checked_files()  # refuse bad TLS or token files here, before either service starts
    writer_serving, reader_serving = serving.pair_arguments()
    writer_options += writer_serving
    launches = [
        [*base, "serve-writer", "--data-dir", str(data_dir), "--address", writer_address, *writer_options],
        [*base, "serve-reader", "--data-dir", str(data_dir), "--address", reader_address, *reader_serving],
    ]
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop_all(_signum: int = 0, _frame: Any = None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    prepare_service = _service_preparation(os.getpid())
    # Handlers before the launch: a Ctrl-C at any moment stops whatever already runs, and never
    # leaves a service behind a `serve` that died of KeyboardInterrupt.
    for sig in stop_signals():
        signal.signal(sig, stop_all)
    click.echo(f"data root: {data_dir.resolve()}")
    for argv in launches:
        if not stopping:
            children.append(subprocess.Popen(argv, preexec_fn=prepare_service))
    if stopping:
        stop_all()  # a child launched while the request arrived has not been told yet
    # If either service exits on its own (a locked data root, a port in use), stop the other:
    # half a pair must not keep running.
    while not stopping and all(child.poll() is None for child in children):
        time.sleep(0.2)
    stop_requested = stopping
    if not stop_requested:
        click.echo("a service exited on its own; stopping the other", err=True)
        stop_all()
    codes = [child.wait() for child in children]
    _ignore_stop_signals()
    # A service our SIGTERM reached before it could install its handlers (a stop while it starts)
    # dies of it (-15); it had not served anything yet, so that is a clean stop too. (SIGINT
    # cannot end one: it is ignored.) A service that ended unasked, even cleanly (someone sent
    # it SIGTERM), ends the pair as a failure, so a supervisor restarts it.
    clean_codes = {0, -signal.SIGTERM}
    if not stop_requested or any(code not in clean_codes for code in codes):
        raise SystemExit(1)
