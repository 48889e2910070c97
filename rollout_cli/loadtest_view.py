"""How ``rollout loadtest`` shows a run: a rich progress bar, then a table (or JSON for machines)."""

from __future__ import annotations

import sys

import click
import grpc
import orjson
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from rollout_cli.loadtest import LoadtestConfig, LoadtestReport, run_loadtest
from rollout_cli.reachability import cleartext_token_message, unreachable_message
from rollout_client import blocking_channel


def _check_reachable(config: LoadtestConfig) -> None:
    """Fail in plain words when no writer answers at the address (within 3 s)."""
    try:
        channel = blocking_channel(config.writer, token=config.token, tls_ca=config.tls_ca)
    except ValueError as exc:  # a token in clear text to a remote address
        raise click.ClickException(cleartext_token_message(exc)) from exc
    with channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=3)
        except grpc.FutureTimeoutError as exc:
            raise click.ClickException(
                unreachable_message("writer", config.writer, tls_ca_given=config.tls_ca is not None)
            ) from exc


def show_loadtest(config: LoadtestConfig, as_json: bool) -> None:
    """Run the load test with a progress bar (stderr when ``as_json``) and print its figures.

    Raises click.ClickException when the writer cannot be reached; exits 1 when
    any request failed (the errors are in the figures).
    """
    _check_reachable(config)
    console = Console(stderr=as_json)
    with Progress(
        TextColumn("[bold]loadtest[/]"),
        BarColumn(),
        TextColumn("{task.fields[records]:>8,} records  {task.fields[errors]} errors"),
        TimeRemainingColumn(),
        console=console,
        transient=as_json,
    ) as progress:
        task = progress.add_task("run", total=config.seconds, records=0, errors=0)

        def tick(elapsed: float, report: LoadtestReport) -> None:
            progress.update(
                task, completed=elapsed, records=report.records, errors=sum(report.errors.values())
            )

        report = run_loadtest(config, tick)
        progress.update(
            task, completed=config.seconds, records=report.records, errors=sum(report.errors.values())
        )
    figures = report.as_dict()
    if as_json:
        sys.stdout.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        table = Table(title=f"{config.sessions} agents, {figures['seconds']} s against {config.writer}")
        table.add_column("figure")
        table.add_column("value", justify="right")
        table.add_row("sessions created (parents + children)", f"{figures['sessions_created']:,}")
        table.add_row("appends", f"{figures['appends']:,}")
        table.add_row("records", f"{figures['records']:,}")
        table.add_row("records/s", f"{figures['records_per_second']:,.1f}")
        table.add_row("appends/s", f"{figures['appends_per_second']:,.1f}")
        for name, value in figures["ack_ms"].items():
            table.add_row(f"ack {name} (ms)", f"{value:.2f}")
        errors = ", ".join(f"{code} {count}" for code, count in sorted(figures["errors"].items())) or "none"
        table.add_row("errors", errors)
        Console().print(table)
    if report.errors:
        raise SystemExit(1)
