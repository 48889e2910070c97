"""``rollout cluster``: the writers of a cluster as etcd holds them (``status``), and draining one
(``drain``). See docs/cluster.md; the writers are ``rollout serve-writer --etcd ... --cluster ...``."""

from __future__ import annotations

import asyncio

import click

etcd_option = click.option(
    "--etcd", required=True, metavar="HOST:PORT[,...]", help="The cluster's etcd members (any that answer)."
)
cluster_option = click.option("--cluster", "cluster_name", required=True, help="The cluster's name in etcd.")


@click.group("cluster")
def cluster_group() -> None:
    """Writers sharing a data root through etcd: who owns which shard, and draining one."""


@cluster_group.command("status")
@etcd_option
@cluster_option
def status_command(etcd: str, cluster_name: str) -> None:
    """Every shard with its owner, epoch and the owner's lease time left; then each writer."""
    from rich.console import Console
    from rich.table import Table

    from writer_service.cluster_ownership import read_cluster
    from writer_service.coordination import CoordinationError

    try:
        view = asyncio.run(read_cluster(etcd, cluster_name))
    except (CoordinationError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if view.shard_count is None:
        raise click.ClickException(f"etcd at {etcd} holds no cluster {cluster_name!r}")
    owned = sum(1 for shard in view.shards if shard.epoch is not None)
    console = Console(highlight=False)
    shards = Table(
        title=f"cluster {view.name}: {owned} of {view.shard_count} shards owned (etcd revision {view.revision})",
        header_style="bold",
    )
    for name in ("SHARD", "OWNER", "WRITER", "EPOCH", "LEASE LEFT"):
        shards.add_column(
            name, no_wrap=True, justify="right" if name in ("SHARD", "EPOCH", "LEASE LEFT") else "left"
        )
    for shard in view.shards:
        shards.add_row(
            str(shard.shard),
            shard.address or "-",
            shard.writer_id or "-",
            "-" if shard.epoch is None else str(shard.epoch),
            "-" if shard.lease_left is None else f"{shard.lease_left} s",
        )
    console.print(shards)
    writers = Table(title=f"{len(view.writers)} writers", header_style="bold")
    for name in ("ADDRESS", "WRITER", "SHARDS", "LEASE LEFT"):
        writers.add_column(
            name, no_wrap=True, justify="right" if name in ("SHARDS", "LEASE LEFT") else "left"
        )
    for writer in view.writers:
        writers.add_row(
            writer.address,
            writer.writer_id,
            str(writer.shards),
            "-" if writer.lease_left is None else f"{writer.lease_left} s",
        )
    console.print(writers)


@cluster_group.command("drain")
@click.argument("address")
@etcd_option
@cluster_option
@click.option(
    "--wait",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="Seconds to wait until the writer has released its shards and left (0: do not wait).",
)
def drain_command(address: str, etcd: str, cluster_name: str, wait: float) -> None:
    """Ask the writer advertising ADDRESS to finish its in-flight batches, release its shards to
    the other writers and exit."""
    from writer_service.cluster_ownership import request_drain
    from writer_service.coordination import CoordinationError

    try:
        writer_id = asyncio.run(request_drain(etcd, cluster_name, address, wait=wait or None))
    except TimeoutError as exc:
        raise click.ClickException(
            f"the writer at {address} was asked to drain but is still in the cluster after {wait:g} s;"
            " `rollout cluster status` shows what it holds"
        ) from exc
    except (CoordinationError, LookupError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"writer {writer_id} at {address} " + ("drained and left" if wait else "asked to drain"))
