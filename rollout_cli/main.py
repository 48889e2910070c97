"""The ``rollout`` command line: serve the pair, import sessions, look at them.

Commands: ``serve`` (both services, as two processes), ``serve-writer``,
``serve-reader`` (:mod:`rollout_cli.supervision`), ``import codex|claude``, ``ls``,
``search``, ``replay``, ``tail``, ``stop-facts``, ``verify``, ``stop``, ``resume``, ``fork``, ``rm``,
``loadtest``, ``memory run|ls|show|forget`` (:mod:`rollout_cli.memory_commands`), ``cluster
status|drain`` (:mod:`rollout_cli.cluster_commands`). Client commands reach the services at
``--writer`` / ``--reader`` (or the ``ROLLOUT_WRITER`` / ``ROLLOUT_READER`` environment variables) through
:mod:`rollout_client`, as any agent would: addresses, ``--token`` and ``--tls-ca`` are resolved
with the environment by :func:`rollout_client.client_settings`, as ``RolloutClient()`` resolves
them (:mod:`rollout_cli.service_calls`, shared with the memory commands); :mod:`rollout_cli.session_view` shows
the answers. Two commands keep their own gRPC stubs: ``import`` streams whole files
through ``ImportSessions`` (all or nothing, with source times: not an agent's call),
and ``loadtest`` times each raw ``Append`` from many threads (the client's
exactly-once machinery and event loop would be part of what it measures).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from rollout_cli import session_view
from rollout_cli.cluster_commands import cluster_group
from rollout_cli.loadtest import LoadtestConfig
from rollout_cli.memory_commands import memory
from rollout_cli.service_calls import (
    Credentials,
    command_settings,
    reader_option,
    service_client,
    writer_option,
)
from rollout_cli.supervision import serve, serve_reader, serve_writer
from rollout_client import (
    SessionPage,
    SessionSummary,
)
from shared.naming import is_session_id
from shared.records import DEFAULT_MAX_RECORD_BYTES, format_timestamp, normalize_timestamp
from shared.stop_kinds import StopKind


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@click.group()
@click.version_option(package_name="rollout-ledger", prog_name="rollout")
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail to stderr.")
@click.option(
    "--token",
    default=None,
    help="Bearer token of client commands, sent as 'authorization: Bearer <token>' (env ROLLOUT_TOKEN);"
    " over a non-loopback address it needs --tls-ca.",
)
@click.option(
    "--tls-ca",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="CA certificate file (PEM) of the services' TLS; client commands then use TLS (env ROLLOUT_TLS_CA).",
)
@click.pass_context
def cli(context: click.Context, verbose: bool, token: str | None, tls_ca: Path | None) -> None:
    """The rollout ledger: the durable, append-only record of agent sessions."""
    _setup_logging(verbose)
    context.obj = Credentials(token, tls_ca)


cli.add_command(serve_writer)
cli.add_command(serve_reader)
cli.add_command(serve)
cli.add_command(cluster_group)
cli.add_command(memory)


# -- clients ------------------------------------------------------------------------


def _session_id(_context: click.Context, _parameter: click.Parameter, value: str) -> str:
    """Session ids as typed by people: surrounding blanks dropped, case folded to lowercase."""
    return value.strip().lower()


def _session_ref(_context: click.Context, _parameter: click.Parameter, value: str) -> str:
    """A session as typed by people: an id, a unique beginning of one, or a title (blanks dropped)."""
    return value.strip()


#: Candidates named when a session reference is ambiguous.
_CANDIDATES_SHOWN = 20


def _session_of(reference: str, reader: str | None) -> str:
    """The session id ``reference`` names: itself when it is an id; else the one session whose id
    begins with it or whose title is it (case aside), looked up in the listing (every page).
    ClickException naming what to do when none does, or listing the candidates when several do."""
    if is_session_id(reference.lower()):
        return reference.lower()
    prefix, folded = reference.lower(), reference.casefold()
    found: list[SessionSummary] = []
    with service_client("reader", reader) as client:
        for page in client.list_sessions(page_size=1000):
            found += [
                summary
                for summary in page.sessions
                if summary.session_id.startswith(prefix)
                or (summary.title and summary.title.casefold() == folded)
            ]
    if len(found) == 1:
        return found[0].session_id
    if not found:
        raise click.ClickException(
            f"no session has an id beginning with {reference!r} or the title {reference!r}"
            " (`rollout ls --all` lists them, `rollout search WORDS` finds one by its content)"
        )
    shown = "\n".join(
        f"  {summary.session_id}  {session_view.printable(summary.cwd) or '-'}"
        f"  {session_view.printable(summary.title or summary.preview) or '-'}"
        for summary in found[:_CANDIDATES_SHOWN]
    )
    more = f"\n  (and {len(found) - _CANDIDATES_SHOWN} more)" if len(found) > _CANDIDATES_SHOWN else ""
    raise click.ClickException(
        f"{reference!r} names {len(found)} sessions; give more of the id, or the whole id:\n{shown}{more}"
    )


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
    command = click.option(
        "--tenant",
        default="",
        help="Tenant of the imported sessions on a writer without authentication (empty: 'default');"
        " with a token the token's tenant, always.",
    )(command)
    command = click.option(
        "--max-line-bytes",
        type=click.IntRange(1024, 1024 * 1024 * 1024),
        default=DEFAULT_MAX_RECORD_BYTES,
        show_default=True,
        help="Longest source line read (bytes); a longer line fails its file, named with the line."
        " The default is the writer's default --max-record-bytes; raise both together.",
    )(command)
    return click.option("--json", "as_json", is_flag=True, help="One JSON object per file, no table.")(
        command
    )


@import_group.command("codex")
@_import_options
def import_codex(
    paths: tuple[Path, ...], writer: str | None, tenant: str, as_json: bool, max_line_bytes: int
) -> None:
    """Import Codex CLI rollouts (files, or folders such as ~/.codex/sessions), one session each."""
    from rollout_cli.importers.command import run_import

    settings = command_settings(writer=writer)
    raise SystemExit(
        run_import(
            "codex", paths, settings.writer, tenant, as_json, settings.token, settings.tls_ca, max_line_bytes
        )
    )


@import_group.command("claude")
@_import_options
def import_claude(
    paths: tuple[Path, ...], writer: str | None, tenant: str, as_json: bool, max_line_bytes: int
) -> None:
    """Import Claude Code transcripts (files, or folders such as ~/.claude/projects).

    A transcript becomes a session; each sub-agent run in it becomes a child
    session whose delegation coordinates are the session and its Task call.
    """
    from rollout_cli.importers.command import run_import

    settings = command_settings(writer=writer)
    raise SystemExit(
        run_import(
            "claude", paths, settings.writer, tenant, as_json, settings.token, settings.tls_ca, max_line_bytes
        )
    )


@cli.command("ls")
@reader_option
@click.option(
    "--page-size",
    type=click.IntRange(0, 1000),
    default=50,
    show_default=True,
    help="Sessions per page (1-1000; 0: 50).",
)
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
@click.option(
    "--cwd",
    "folder",
    default=None,
    help="Only sessions run in this folder or below it. Default: the current folder's sessions"
    " when it has any, else every session.",
)
@click.option("--all", "every", is_flag=True, help="Every session, whatever folder it ran in.")
def list_command(
    reader: str | None,
    page_size: int,
    page_token: str,
    tenant: str,
    agent_name: str,
    parent: str,
    stop_state: str,
    created_after: str,
    created_before: str,
    folder: str | None,
    every: bool,
) -> None:
    """List sessions, newest first: when each last changed, its git branch, stop state, whether it
    may be resumed, its message records and its title or first prompt (`rollout stop-facts ID`
    says why). Without --cwd or --all, the current folder's sessions when it has any."""
    if every and folder is not None:
        raise click.UsageError("give --cwd DIR or --all, not both")
    # The current folder by default on a first page; a next page names its --cwd (below).
    cwd = "" if every or (folder is None and page_token) else os.path.abspath(folder or ".")
    with service_client("reader", reader) as client:

        def first_page(cwd: str) -> SessionPage:
            pages = client.list_sessions(
                page_size=page_size,
                page_token=page_token,
                tenant=tenant,
                agent_name=agent_name,
                parent_session_id=parent.strip().lower(),
                stop_state=stop_state,
                created_after=created_after,
                created_before=created_before,
                cwd=cwd,
            )
            page = next(pages)
            pages.close()
            return page

        page = first_page(cwd)
        if cwd and folder is None and not page.sessions and not page_token:
            page, cwd = first_page(""), ""  # no session here: every one
    if cwd:
        click.echo(f"sessions in {cwd} (every folder's: --all)")
    filtered = any((tenant, agent_name, parent, stop_state, created_after, created_before, cwd))
    if page.sessions:
        session_view.print_sessions(page.sessions, datetime.now(UTC))
    elif page.scan_capped:
        pass  # the line below says more may match
    elif page_token:
        click.echo("no more sessions after this page token")
    else:
        click.echo("no session matches these filters" if filtered else "no sessions")
    if page.scan_capped:
        click.echo(f"(this page stopped after examining {page.scanned} sessions; more may match)")
    if page.next_page_token:
        extra = ["--cwd", cwd] if cwd and folder is None else []
        click.echo(f"more: {_next_page_command(page.next_page_token, extra)}")


_WITHIN = re.compile(r"(\d+)\s*(m|min|h|d|w)")
_WITHIN_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _within(_context: click.Context, _parameter: click.Parameter, value: str | None) -> str:
    """``--within 30d`` as the RFC 3339 time that long ago ("" when not given); an RFC 3339 time
    is taken as it is (the next-page command repeats the time the first page used)."""
    if not value:
        return ""
    with contextlib.suppress(ValueError):
        return normalize_timestamp(value)
    match = _WITHIN.fullmatch(value.strip())
    if match is None:
        raise click.BadParameter(f"{value!r} is not a duration such as 90m, 12h, 30d or 2w")
    try:
        since = datetime.now(UTC) - timedelta(**{_WITHIN_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError:  # longer than the calendar: every session
        return ""
    return format_timestamp(since)


@cli.command("search", context_settings={"ignore_unknown_options": True})
@click.argument("query")
@reader_option
@click.option("--cwd", default="", help="Only sessions run in this folder or below it (e.g. '.').")
@click.option("--branch", default="", help="Only sessions last on this git branch.")
@click.option("--agent-name", default="", help="Only sessions of this agent.")
@click.option(
    "--within",
    "since",
    default=None,
    callback=_within,
    help="Only sessions changed this recently (90m, 12h, 30d, 2w; or since an RFC 3339 time).",
)
@click.option("--tenant", default="", help="Only this tenant's sessions (with authentication: your own).")
@click.option(
    "--page-size", type=click.IntRange(0, 100), default=10, show_default=True, help="Sessions shown."
)
@click.option("--page-token", default="", help="Continue from a previous page.")
def search_command(
    query: str,
    reader: str | None,
    cwd: str,
    branch: str,
    agent_name: str,
    since: str,
    tenant: str,
    page_size: int,
    page_token: str,
) -> None:
    """Find sessions by words said or printed in them (messages, tool calls and outputs, reasoning,
    titles), best and most recent first, each with its matching records' seq and words around
    them. QUERY is literal text: every word must appear; "quoted words" are a phrase; word* a prefix;
    it may begin with '-' (or follow `--`)."""
    folder = os.path.abspath(cwd) if cwd else ""
    with service_client("reader", reader) as client:
        pages = client.search(
            query,
            cwd=folder,
            branch=branch,
            agent_name=agent_name,
            since=since,
            tenant=tenant,
            page_size=page_size,
            page_token=page_token,
        )
        page = next(pages)
        pages.close()
    if page.hits:
        session_view.print_hits(page.hits, datetime.now(UTC))
    else:
        click.echo("no session matches" if not page_token else "no more sessions after this page token")
    if page.pending:
        click.echo(f"({page.pending} sessions changed and are not indexed yet: search again shortly)")
    if page.capped:
        click.echo("(these words are in very many records: only the most recent sessions were ranked)")
    if page.next_page_token:
        click.echo(f"more: {_next_page_command(page.next_page_token)}")


def _next_page_command(token: str, extra: list[str] | None = None) -> str:
    """The ``rollout ls`` command for the next page: this call's options, with the new token.

    The token holds a position only, so the filters and page size are repeated
    (without them the next page would list every session).
    """
    context = click.get_current_context()
    words = ["rollout", context.command.name or "ls"]
    words += [str(argument) for name, argument in context.params.items() if name == "query"]
    for parameter in context.command.params:
        name = parameter.name
        if name is None or name == "page_token" or not isinstance(parameter, click.Option):
            continue
        if context.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            words += [parameter.opts[0], str(context.params[name])]
    return shlex.join([*words, *(extra or []), "--page-token", token])


@cli.command()
@click.argument("session_id", callback=_session_ref)
@reader_option
@click.option("--token-budget", default=0, help="Estimated tokens allowed (0: none).")
@click.option(
    "--width",
    type=click.IntRange(min=0),
    default=400,
    show_default=True,
    help="Characters shown per message (0: all).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='JSON lines: each message as its canonical JSON (the digest\'s form), then {"summary": {...}}.',
)
@click.option(
    "--rounds",
    "by_round",
    is_flag=True,
    help="Group the messages by round, each under a header with its status and metrics (read in one"
    " reply: a session too large for it is refused; use the plain replay).",
)
def replay(
    session_id: str, reader: str | None, token_budget: int, width: int, as_json: bool, by_round: bool
) -> None:
    """Show the exact rebuilt message sequence of a session (streamed: any size). SESSION_ID may be
    a unique beginning of an id, or a session's title."""
    session_id = _session_of(session_id, reader)
    if by_round:
        _replay_by_round(session_id, reader, width, as_json)
        return
    with service_client("reader", reader) as client:
        stream = client.session(session_id).stream_replay(token_budget or None)
        for index, message in enumerate(stream):
            if as_json:
                click.echo(session_view.replay_json_line(message))
            else:
                session_view.print_message(index, message, width)
    if stream.summary is None:
        raise click.ClickException("the replay stream ended without its summary")
    if as_json:
        click.echo(session_view.replay_summary_json_line(stream.summary))
    else:
        session_view.print_replay_summary(stream.summary)


def _replay_by_round(session_id: str, reader: str | None, width: int, as_json: bool) -> None:
    """``rollout replay --rounds``: the rebuilt view with each message's origin (GetRecentMessages),
    each message under the round whose seq range holds its origin (ListRounds; shared.rounds),
    a header whenever the round changes (messages before the first round have none)."""
    with service_client("reader", reader) as client:
        session = client.session(session_id)
        found = session.rounds()
        view = session.recent_messages(0)
    starts = [one.start_seq for one in found]
    shown = -1
    for index, (message, origin) in enumerate(zip(view.messages, view.origins, strict=True)):
        at = bisect.bisect_right(starts, origin.seq) - 1
        if at != shown and at >= 0:
            click.echo(
                session_view.round_json_line(found[at]) if as_json else session_view.round_header(found[at])
            )
        shown = at
        if as_json:
            click.echo(session_view.replay_json_line(message))
        else:
            session_view.print_message(index, message, width)
    if not as_json:
        rounds_word = "round" if len(found) == 1 else "rounds"
        click.echo(f"-- {len(view.messages)} messages in {len(found)} {rounds_word}")


@cli.command()
@click.argument("session_id", callback=_session_id)
@reader_option
@click.option(
    "-f", "--follow", is_flag=True, help="Go on printing records as they land, until the session stops."
)
@click.option(
    "-n",
    "--lines",
    "count",
    type=click.IntRange(0),
    default=10,
    show_default=True,
    help="Records shown from before now.",
)
def tail(session_id: str, reader: str | None, follow: bool, count: int) -> None:
    """Show a session's last records, one line each; with -f, follow it live (Ctrl-C ends)."""
    width = session_view.terminal_width()
    with service_client("reader", reader) as client:
        session = client.session(session_id)
        written = session.stop_facts().next_seq
        records = session.watch(max(0, written - count))
        try:
            for record in records:
                if not follow and record.seq >= written:
                    break
                click.echo(session_view.record_line(record, width))
                if not follow and record.seq == written - 1:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            records.close()


@cli.command()
@click.argument("session_id", callback=_session_id)
@reader_option
def rounds(session_id: str, reader: str) -> None:
    """A session as question-and-answer rounds: #, status, started, duration, tokens, tool calls
    and failures, and the first line of each question (shared.rounds decides them)."""
    with service_client("reader", reader) as client:
        found = client.session(session_id).rounds()
    if found:
        session_view.print_rounds(found)
    else:
        click.echo("no rounds yet")


@cli.command("stop-facts")
@click.argument("session_id", callback=_session_ref)
@reader_option
def stop_facts(session_id: str, reader: str) -> None:
    """Why and where a session stopped, and whether it may be continued. SESSION_ID may be a
    unique beginning of an id, or a session's title."""
    session_id = _session_of(session_id, reader)
    with service_client("reader", reader) as client:
        facts = client.session(session_id).stop_facts()
    session_view.print_stop_facts(session_id, facts)


@cli.command()
@click.argument("session_id", callback=_session_id)
@reader_option
def verify(session_id: str, reader: str) -> None:
    """Check one session in full: every line, seq continuity, the last checkpoint's digest."""
    with service_client("reader", reader) as client:
        report = client.session(session_id).verify()
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
def stop_command(session_id: str, writer: str | None, kind: str, reason: str) -> None:
    """Stop a session: checkpoint over the whole file, then the stop record."""
    with service_client("writer", writer) as client:
        result = client.session(session_id).stop(kind, reason)
    click.echo(
        f"{session_id}: stopped ({kind}) at seq {result.stop_seq}; checkpoint of {result.message_count}"
        f" messages, {result.digest}"
    )


@cli.command()
@click.argument("session_id", callback=_session_ref)
@writer_option
@reader_option
@click.option(
    "--force",
    is_flag=True,
    help="Re-open even a session whose stop kind is not replayable as-is, or whose file is damaged"
    " (recorded in the session; damage stays reported).",
)
def resume(session_id: str, writer: str | None, reader: str | None, force: bool) -> None:
    """Re-open a paused or cancelled session for appending (closes calls left without an output).
    SESSION_ID may be a unique beginning of an id, or a session's title (looked up in the reader)."""
    session_id = _session_of(session_id, reader)
    with service_client("writer", writer) as client:
        result = client.session(session_id).resume(force)
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
@click.option(
    "--before-user",
    type=click.IntRange(min=1),
    default=None,
    help="Keep everything before the Nth user message (1: the first).",
)
def fork(session_id: str, writer: str | None, at_seq: int | None, before_user: int | None) -> None:
    """Start a new session from a session's history up to a fork point."""
    if (at_seq is None) == (before_user is None):
        raise click.UsageError("give exactly one of --at-seq and --before-user")
    with service_client("writer", writer) as client:
        forked = client.session(session_id).fork(at_seq=at_seq, before_user_message=before_user)
    origin = forked.forked_from
    assert origin is not None  # set on every session fork() returns
    click.echo(f"forked {session_id} at seq {origin.seq} into {forked.id} ({origin.digest})")


@cli.command("rm")
@click.argument("session_id", callback=_session_id)
@writer_option
@click.option("-y", "--yes", is_flag=True, help="Delete without asking first.")
def remove_command(session_id: str, writer: str | None, yes: bool) -> None:
    """Delete a session for good: its file and everything derived from it; its id is never used
    again. Its forks and children stay. A deletion record says who deleted it and when."""
    if not yes:
        click.confirm(f"delete session {session_id} for good? It cannot be undone", abort=True)
    with service_client("writer", writer) as client:
        result = client.delete_session(session_id)
    if result.already_deleted:
        click.echo(f"{session_id}: already deleted (at {result.deleted_at})")
    else:
        click.echo(f"deleted {session_id} at {result.deleted_at}")


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
    writer: str | None,
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
    sessions it creates (tenant "loadtest", or the token's tenant with --token); every one is stopped
    at the end.
    """
    from rollout_cli.loadtest_view import show_loadtest

    settings = command_settings(writer=writer)
    config = LoadtestConfig(
        settings.writer,
        sessions,
        duration,
        records_per_append,
        think_ms,
        delegate_every,
        seed,
        token=settings.token,
        tls_ca=settings.tls_ca,
    )
    show_loadtest(config, as_json)


if __name__ == "__main__":
    cli()
