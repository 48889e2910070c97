"""The ``rollout`` command line: serve the pair, import sessions, look at them.

Commands: ``serve`` (both services, as two processes), ``serve-writer``,
``serve-reader``, ``import codex``, ``ls``, ``replay``, ``stop-facts``,
``verify``, ``stop``, ``resume``, ``fork``, ``loadtest``. Client
commands reach the services at ``--writer`` / ``--reader`` (or the
``ROLLOUT_WRITER`` / ``ROLLOUT_READER`` environment variables).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import grpc

from rollout.v1 import reader_pb2, reader_pb2_grpc, records_pb2, writer_pb2, writer_pb2_grpc
from rollout_cli.loadtest import LoadtestConfig
from shared.records import DEFAULT_MAX_RECORD_BYTES, parse_timestamp
from shared.status import BindError
from shared.stop_kinds import StopKind
from shared.wire import stop_kind_to_proto
from writer_service.committer import CommitConfig, Durability, RoundSync, SyncCall

DEFAULT_DATA_DIR = "rollout-data"
DEFAULT_WRITER = "127.0.0.1:50051"
DEFAULT_READER = "127.0.0.1:50052"
CLIENT_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
]


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail to stderr.")
def cli(verbose: bool) -> None:
    """The rollout ledger: the durable, append-only record of agent sessions."""
    _setup_logging(verbose)


# -- serving ------------------------------------------------------------------------

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=lambda: os.environ.get("ROLLOUT_DATA_DIR", DEFAULT_DATA_DIR),
    show_default=DEFAULT_DATA_DIR,
    help="Data root holding the session files (env ROLLOUT_DATA_DIR).",
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
metrics_port_option = click.option(
    "--metrics-port", type=int, default=None, help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics."
)


#: The signals that stop a service or the pair: SIGINT (Ctrl-C) and SIGTERM.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore_stop_signals() -> None:
    """Once everything has stopped: a further stop request has nothing left to stop, and must
    not kill the process (or raise KeyboardInterrupt) while the interpreter shuts down, which
    first resets the handlers it installed."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


async def _serve_until_signal(start: Any, label: str) -> None:
    """Await ``start`` (a coroutine giving a running service), announce it, serve until SIGINT/SIGTERM.

    The signal handlers go in before the service starts: a stop request that arrives while it
    starts, or just after it says it listens, drains it like any other instead of killing it
    with the default SIGTERM action (exit status -15 and an unclean ``rollout serve``). Once the
    service has stopped, further SIGINT/SIGTERM are ignored: there is nothing left to drain, and
    a repeated Ctrl-C must not raise KeyboardInterrupt while the process shuts down.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    running = await start
    host = "127.0.0.1"
    click.echo(f"rollout {label} listening on {host}:{running.port}", err=False)
    sys.stdout.flush()
    await stop.wait()
    logging.getLogger("rollout_cli.main").info("%s: stopping (draining queued work)", label)
    await running.stop()
    for sig in _STOP_SIGNALS:
        loop.remove_signal_handler(sig)
    _ignore_stop_signals()


@cli.command("serve-writer")
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
    "--repair-retry-seconds",
    type=click.FloatRange(0.1),
    default=5.0,
    show_default=True,
    help="How often a session whose file could not be repaired at start-up (a full disk) is tried"
    " again; it is also tried at each call on it.",
)
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
    repair_retry_seconds: float,
) -> None:
    """Run the writer service alone (one per data root)."""
    from prometheus_client import start_http_server

    from writer_service.server import DataRootLockedError, start_writer
    from writer_service.sessions import WriterConfig

    if metrics_port is not None:
        try:
            start_http_server(metrics_port, addr="127.0.0.1")
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve metrics on 127.0.0.1:{metrics_port} ({exc.strerror}); is the port in use?"
            ) from exc
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
        repair_retry_seconds=repair_retry_seconds,
    )
    try:
        asyncio.run(_serve_until_signal(start_writer(config, address), "writer"))
    except (DataRootLockedError, BindError) as exc:
        raise click.ClickException(str(exc)) from exc


@cli.command("serve-reader")
@data_dir_option
@click.option("--address", default=DEFAULT_READER, show_default=True, help="host:port to bind (port 0: any).")
@click.option(
    "--max-reply-bytes",
    type=click.IntRange(1024),
    default=256 * 1024 * 1024,
    show_default=True,
    help="Largest unary reply; a GetReplay or GetMemoryView of a larger session is refused"
    " (RESOURCE_EXHAUSTED) before it is read: stream it.",
)
@click.option(
    "--replay-cache-mb",
    type=click.IntRange(0),
    default=256,
    show_default=True,
    help="Memory for rendered replays of recently read sessions (MiB; 0: none).",
)
@click.option(
    "--read-budget-mb",
    type=click.IntRange(1),
    default=512,
    show_default=True,
    help="Memory heavy reads in flight may hold together (MiB); more wait their turn.",
)
def serve_reader(
    data_dir: Path, address: str, max_reply_bytes: int, replay_cache_mb: int, read_budget_mb: int
) -> None:
    """Run a reader service (any number may serve one data root)."""
    from reader_service.server import ReaderConfig, start_reader

    data_dir.mkdir(parents=True, exist_ok=True)
    config = ReaderConfig(
        data_dir=data_dir,
        max_reply_bytes=max_reply_bytes,
        replay_cache_bytes=replay_cache_mb * 1024 * 1024,
        read_budget_bytes=read_budget_mb * 1024 * 1024,
    )
    try:
        asyncio.run(_serve_until_signal(start_reader(config, address), "reader"))
    except BindError as exc:
        raise click.ClickException(str(exc)) from exc


_PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal this process gets when its parent dies


def _service_preparation(serve_pid: int) -> Callable[[], None]:
    """What each service `serve` launches runs after fork, before exec (Linux).

    - SIGINT is ignored until the service installs its own handlers: a terminal's Ctrl-C
      reaches the whole process group and would otherwise end a loading service with a
      KeyboardInterrupt traceback; `serve` forwards the stop as SIGTERM instead.
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


@cli.command()
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
def serve(
    data_dir: Path,
    writer_address: str,
    reader_address: str,
    durability: str,
    sync_call: str,
    round_sync: str,
    metrics_port: int | None,
) -> None:
    """Run the writer and a reader as two processes on a local data root; Ctrl-C stops both."""
    base = [sys.executable, "-m", "rollout_cli.main"]
    writer_options = ["--durability", durability, "--sync-call", sync_call, "--round-sync", round_sync]
    if metrics_port is not None:
        writer_options += ["--metrics-port", str(metrics_port)]
    launches = [
        [*base, "serve-writer", "--data-dir", str(data_dir), "--address", writer_address, *writer_options],
        [*base, "serve-reader", "--data-dir", str(data_dir), "--address", reader_address],
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
    for sig in _STOP_SIGNALS:
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
    # cannot end one: it is ignored until the handlers are in.) A service that ended unasked,
    # even cleanly (someone sent it SIGTERM), ends the pair as a failure, so a supervisor
    # restarts it.
    clean_codes = {0, -signal.SIGTERM}
    if not stop_requested or any(code not in clean_codes for code in codes):
        raise SystemExit(1)


# -- clients ------------------------------------------------------------------------


def _session_id(_context: click.Context, _parameter: click.Parameter, value: str) -> str:
    """Session ids as typed by people: surrounding blanks dropped, case folded to lowercase."""
    return value.strip().lower()


writer_option = click.option(
    "--writer",
    default=lambda: os.environ.get("ROLLOUT_WRITER", DEFAULT_WRITER),
    show_default=DEFAULT_WRITER,
    help="Writer address (env ROLLOUT_WRITER).",
)
reader_option = click.option(
    "--reader",
    default=lambda: os.environ.get("ROLLOUT_READER", DEFAULT_READER),
    show_default=DEFAULT_READER,
    help="Reader address (env ROLLOUT_READER).",
)


def _call(service: str, address: str, rpc: str, request: Any) -> Any:
    """One unary call to the writer or reader at ``address``; failures become a one-line ClickException."""
    with grpc.insecure_channel(address, options=CLIENT_OPTIONS) as channel:
        stub_class = (
            writer_pb2_grpc.RolloutWriterStub if service == "writer" else reader_pb2_grpc.RolloutReaderStub
        )
        try:
            return getattr(stub_class(channel), rpc)(request)
        except grpc.RpcError as exc:
            raise _fail(exc, service, address) from exc


def _fail(exc: grpc.RpcError, service: str = "", address: str = "") -> click.ClickException:
    """A one-line error for a failed call: the status, or what to do when the service is not there."""
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE and address and "connect" in (exc.details() or ""):
        option = "--writer / ROLLOUT_WRITER" if service == "writer" else "--reader / ROLLOUT_READER"
        return click.ClickException(
            f"cannot reach the {service} at {address}. Is it running (bash deploy/local/serve.sh)?"
            f" Point {option} at it."
        )
    if code == grpc.StatusCode.UNIMPLEMENTED and address:
        return click.ClickException(
            f"{address} does not serve the rollout {service} (is it the other service?)"
        )
    return click.ClickException(f"{code.name}: {exc.details()}")


@cli.group("import")
def import_group() -> None:
    """Import sessions recorded by other tools, through the writer's gRPC API.

    Each PATH is a session file or a folder to walk; with none, the tool's own
    folder. Every file goes in all or nothing; running the same import again
    skips what is already in the ledger.
    """


def _import_options(command: Callable[..., None]) -> Callable[..., None]:
    command = click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))(command)
    command = writer_option(command)
    command = click.option("--tenant", default="default", show_default=True)(command)
    return click.option("--json", "as_json", is_flag=True, help="One JSON object per file, no table.")(
        command
    )


@import_group.command("codex")
@_import_options
def import_codex(paths: tuple[Path, ...], writer: str, tenant: str, as_json: bool) -> None:
    """Import Codex CLI rollouts (files, or folders such as ~/.codex/sessions), one session each."""
    from rollout_cli.importers.command import run_import

    raise SystemExit(run_import("codex", paths, writer, tenant, as_json))


@import_group.command("claude")
@_import_options
def import_claude(paths: tuple[Path, ...], writer: str, tenant: str, as_json: bool) -> None:
    """Import Claude Code transcripts (files, or folders such as ~/.claude/projects).

    A transcript becomes a session; each sub-agent run in it becomes a child
    session whose delegation coordinates are the session and its Task call.
    """
    from rollout_cli.importers.command import run_import

    raise SystemExit(run_import("claude", paths, writer, tenant, as_json))


@cli.command("ls")
@reader_option
@click.option("--page-size", default=50, show_default=True, help="Sessions per page (1-1000).")
@click.option("--page-token", default="", help="Continue from a previous page.")
@click.option("--tenant", default="", help="Only this tenant's sessions.")
@click.option("--agent-name", default="", help="Only sessions of this agent.")
@click.option("--parent", default="", help="Only the delegated children of this session (not its forks).")
@click.option(
    "--stop-state",
    default="",
    help="unknown, stopped, replayable, not_replayable, or a stop kind (paused, completed, ...).",
)
@click.option("--created-after", default="", help="RFC 3339 time, inclusive (e.g. 2026-01-01T00:00:00Z).")
@click.option("--created-before", default="", help="RFC 3339 time, inclusive (e.g. 2026-12-31T23:59:59Z).")
def list_command(
    reader: str,
    page_size: int,
    page_token: str,
    tenant: str,
    agent_name: str,
    parent: str,
    stop_state: str,
    created_after: str,
    created_before: str,
) -> None:
    """List sessions, newest first: when each last changed, its stop state, whether it may be
    resumed, its message records and its first prompt (`rollout stop-facts ID` says why)."""
    page = _call(
        "reader",
        reader,
        "ListSessions",
        reader_pb2.ListSessionsRequest(
            page_size=page_size,
            page_token=page_token,
            tenant=tenant,
            agent_name=agent_name,
            parent_session_id=parent.strip().lower(),
            stop_state=stop_state,
            created_after=created_after,
            created_before=created_before,
        ),
    )
    _print_sessions(page.sessions, datetime.now(UTC))
    if page.scan_capped:
        click.echo(f"(this page stopped after examining {page.scanned} sessions; more may match)")
    if page.next_page_token:
        click.echo(f"more: {_next_page_command(page.next_page_token)}")


def relative_time(moment: str, now: datetime) -> str:
    """How long before ``now`` an RFC 3339 time was, as a session picker says it ("3 min ago")."""
    try:
        then = parse_timestamp(moment)
    except ValueError:
        return moment or "-"
    seconds = (now - then).total_seconds()
    if seconds < 0:
        return then.strftime("%Y-%m-%d %H:%M")
    for limit, unit, size in (
        (60, "s", 1),
        (3600, "min", 60),
        (86400, "h", 3600),
        (30 * 86400, "days", 86400),
    ):
        if seconds < limit:
            count = int(seconds // size)
            return "just now" if unit == "s" and count < 10 else f"{count} {unit} ago"
    return then.strftime("%Y-%m-%d")


def _print_sessions(sessions: Any, now: datetime) -> None:
    """One row per session, like a session picker: when it last changed, its state and first prompt.

    The session id is never shortened; the preview is cut to what the terminal's width
    leaves (160 columns when the output is not a terminal).
    """
    from rich.console import Console  # here: the other commands start without loading it
    from rich.table import Table

    header = ("UPDATED", "SESSION", "AGENT", "STATE", "RESUME", "MSGS")
    rows = []
    for summary in sessions:
        facts = summary.stop_facts
        rows.append(
            (
                relative_time(summary.updated_at or summary.created_at, now),
                summary.session_id,
                summary.agent_name or "-",
                (facts.stop_kind or "legacy") if facts.found else "unknown",
                "yes" if facts.resume.replayable else "no",
                str(summary.message_count),
                summary.preview or "-",
            )
        )
    width = shutil.get_terminal_size((160, 24)).columns
    used = sum(max(len(row[column]) for row in [header, *rows]) + 2 for column in range(len(header)))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in header:
        table.add_column(name, no_wrap=True, justify="right" if name == "MSGS" else "left")
    table.add_column("PREVIEW", no_wrap=True, overflow="ellipsis", max_width=max(width - used, 12))
    for row in rows:
        table.add_row(*row)
    Console(width=max(width, used + 12), highlight=False, soft_wrap=False).print(table)


def _next_page_command(token: str) -> str:
    """The ``rollout ls`` command for the next page: this call's options, with the new token.

    The token holds a position only, so the filters and page size are repeated
    (without them the next page would list every session).
    """
    context = click.get_current_context()
    words = ["rollout", "ls"]
    for parameter in context.command.params:
        name = parameter.name
        if name is None or name == "page_token" or not isinstance(parameter, click.Option):
            continue
        if context.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            words += [parameter.opts[0], str(context.params[name])]
    return shlex.join([*words, "--page-token", token])


def _message_text(message: records_pb2.ChatMessage) -> str:
    kind = message.WhichOneof("content")
    if kind == "text":
        return message.text
    if kind == "parts":
        texts = []
        for part in message.parts.values:
            fields = part.struct_value.fields
            texts.append(
                fields["text"].string_value if "text" in fields else f"[{fields['type'].string_value}]"
            )
        return "\n".join(texts)
    return ""


@cli.command()
@click.argument("session_id", callback=_session_id)
@reader_option
@click.option("--token-budget", default=0, help="Estimated tokens allowed (0: none).")
@click.option("--width", default=400, show_default=True, help="Characters shown per message (0: all).")
def replay(session_id: str, reader: str, token_budget: int, width: int) -> None:
    """Show the exact rebuilt message sequence of a session (streamed: any size)."""
    summary = None
    with grpc.insecure_channel(reader, options=CLIENT_OPTIONS) as channel:
        stub = reader_pb2_grpc.RolloutReaderStub(channel)
        try:
            for chunk in stub.StreamReplay(
                reader_pb2.ReplayRequest(session_id=session_id, token_budget=token_budget)
            ):
                for offset, message in enumerate(chunk.messages):
                    _print_message(chunk.first_index + offset, message, width)
                if chunk.HasField("summary"):
                    summary = chunk.summary
        except grpc.RpcError as exc:
            raise _fail(exc, "reader", reader) from exc
    if summary is None:
        raise click.ClickException("the replay stream ended without its summary")
    status = reader_pb2.DigestStatus.Name(summary.digest_status).removeprefix("DIGEST_STATUS_").lower()
    click.echo(
        f"-- {summary.message_count} messages, ~{summary.estimated_tokens} tokens,"
        f" superseded outputs {summary.superseded_outputs}, checkpoint {status}"
    )
    for entry in summary.degraded:
        click.echo(f"-- degraded {entry.kind} (line {entry.line}, byte {entry.offset}): {entry.detail}")
    if summary.HasField("too_large"):
        click.echo(
            f"-- REPLAY_TOO_LARGE: ~{summary.too_large.estimated_tokens} tokens over the budget of"
            f" {summary.too_large.token_budget}"
        )


def _print_message(index: int, message: records_pb2.ChatMessage, width: int) -> None:
    head = f"[{index}] {message.role}"
    if message.HasField("tool_call_id"):
        head += f" (answers {message.tool_call_id})"
    if message.synthetic:
        head += " (synthetic)"
    click.echo(click.style(head, bold=True))
    blocks = list(message.reasoning_blocks) or ([message.reasoning] if message.HasField("reasoning") else [])
    for number, block in enumerate(blocks, 1):
        label = "reasoning" if len(blocks) == 1 else f"reasoning {number}/{len(blocks)}"
        click.echo(textwrap.indent(f"{label}: {_shorten(block.content, width)}", "  "))
    text = _message_text(message)
    if text:
        click.echo(textwrap.indent(_shorten(text, width), "  "))
    for call in message.tool_calls:
        click.echo(f"  call {call.id}: {call.function.name}({_shorten(call.function.arguments, width)})")


def _shorten(text: str, width: int) -> str:
    return text if not width or len(text) <= width else text[:width] + f"… [{len(text)} chars]"


@cli.command("stop-facts")
@click.argument("session_id", callback=_session_id)
@reader_option
def stop_facts(session_id: str, reader: str) -> None:
    """Why and where a session stopped, and whether it may be continued."""
    facts = _call("reader", reader, "GetStopFacts", reader_pb2.StopFactsRequest(session_id=session_id))
    if not facts.found:
        click.echo(f"{session_id}: unknown (no stop facts in the tail: running, or killed before any Stop)")
        return
    click.echo(f"session:     {session_id}")
    click.echo(f"stop kind:   {facts.stop_kind or '(none: legacy stop record)'}")
    click.echo(f"reason:      {facts.reason}")
    if facts.HasField("error"):
        click.echo(f"error:       {facts.error.category}: {facts.error.message}")
    if facts.HasField("checkpoint"):
        cp = facts.checkpoint
        click.echo(f"checkpoint:  seq {cp.seq}, {cp.message_count} messages, covers seq ≤ {cp.covers_seq}")
        click.echo(f"digest:      {cp.digest}")
    if not facts.has_stop_record:
        click.echo("stop record: missing (killed between checkpoint and stop): still a stopped session")
    for entry in facts.damage:
        click.echo(f"DAMAGE:      {entry.kind} at byte {entry.offset}: {entry.detail}")
    verdict = "may be continued exactly" if facts.resume.replayable else "may not be continued as-is"
    click.echo(f"resume:      {verdict}: {facts.resume.reason}")
    click.echo(f"tail read:   {facts.tail_bytes_read} bytes")


@cli.command()
@click.argument("session_id", callback=_session_id)
@reader_option
def verify(session_id: str, reader: str) -> None:
    """Check one session in full: every line, seq continuity, the last checkpoint's digest."""
    report = _call("reader", reader, "VerifySession", reader_pb2.VerifyRequest(session_id=session_id))
    click.echo(f"{session_id}: {'OK' if report.ok else 'PROBLEMS FOUND'}")
    for finding in report.findings:
        click.echo(f"  - {finding}")
    if not report.ok:
        raise SystemExit(1)


@cli.command("stop")
@click.argument("session_id", callback=_session_id)
@writer_option
@click.option(
    "--kind",
    type=click.Choice([kind.value for kind in StopKind]),
    default=StopKind.PAUSED.value,
    show_default=True,
    help="Why the run stops (paused and cancelled may be resumed as-is).",
)
@click.option("--reason", default="stopped from the command line", show_default=True)
def stop_command(session_id: str, writer: str, kind: str, reason: str) -> None:
    """Stop a session: checkpoint over the whole file, then the stop record."""
    result = _call(
        "writer",
        writer,
        "Stop",
        writer_pb2.StopRequest(
            session_id=session_id,
            stop_kind=stop_kind_to_proto(kind),
            reason=reason,
        ),
    )
    click.echo(
        f"{session_id}: stopped ({kind}) at seq {result.stop_seq}; checkpoint of {result.message_count}"
        f" messages, {result.digest}"
    )


@cli.command()
@click.argument("session_id", callback=_session_id)
@writer_option
@click.option(
    "--force",
    is_flag=True,
    help="Re-open even a session whose stop kind is not replayable as-is, or whose file is damaged"
    " (recorded in the session; damage stays reported).",
)
def resume(session_id: str, writer: str, force: bool) -> None:
    """Re-open a paused or cancelled session for appending (closes calls left without an output)."""
    result = _call("writer", writer, "Resume", writer_pb2.ResumeRequest(session_id=session_id, force=force))
    was = result.previous_stop_kind or "open"
    closed = ", ".join(result.closed_call_ids) or "none"
    click.echo(
        f"{session_id}: resumed (was {was}); calls closed with a synthetic output: {closed};"
        f" next seq {result.next_seq}"
    )


@cli.command()
@click.argument("session_id", callback=_session_id)
@writer_option
@click.option("--at-seq", type=int, default=None, help="Keep the records with seq <= this.")
@click.option("--before-user", type=int, default=None, help="Keep everything before the Nth user message.")
def fork(session_id: str, writer: str, at_seq: int | None, before_user: int | None) -> None:
    """Start a new session from a session's history up to a fork point."""
    if (at_seq is None) == (before_user is None):
        raise click.UsageError("give exactly one of --at-seq and --before-user")
    request = writer_pb2.ForkRequest(session_id=session_id)
    if at_seq is not None:
        request.at_seq = at_seq
    else:
        request.before_user_message = before_user or 0
    result = _call("writer", writer, "Fork", request)
    click.echo(
        f"forked {session_id} at seq {result.forked_at_seq} into {result.session_id} ({result.digest})"
    )


@cli.command()
@writer_option
@click.option(
    "--sessions",
    type=click.IntRange(1, 10_000),
    default=16,
    show_default=True,
    help="Simulated parent agents.",
)
@click.option(
    "--duration", type=click.FloatRange(0.1), default=10.0, show_default=True, help="Seconds to run."
)
@click.option(
    "--records-per-append",
    type=click.IntRange(1, 1000),
    default=1,
    show_default=True,
    help="Each Append carries 1 to this many records.",
)
@click.option(
    "--think-ms", type=click.FloatRange(0), default=0.0, show_default=True, help="Pause between Appends (ms)."
)
@click.option(
    "--delegate-every",
    type=click.IntRange(0),
    default=4,
    show_default=True,
    help="Every Nth tool call delegates to a child session (0: never).",
)
@click.option("--seed", default=1, show_default=True, help="Seed of the simulated record mix.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON (progress goes to stderr).")
def loadtest(
    writer: str,
    sessions: int,
    duration: float,
    records_per_append: int,
    think_ms: float,
    delegate_every: int,
    seed: int,
    as_json: bool,
) -> None:
    """Simulate agent sessions (parents delegating to children) against a running writer.

    Prints throughput, ack latency percentiles and errors. Writes only to the
    sessions it creates (tenant "loadtest"); every one is stopped at the end.
    """
    from rollout_cli.loadtest_view import show_loadtest

    show_loadtest(
        LoadtestConfig(writer, sessions, duration, records_per_append, think_ms, delegate_every, seed),
        as_json,
    )


if __name__ == "__main__":
    cli()
