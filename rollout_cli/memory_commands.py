"""``rollout memory run | ls | show | forget``: the memory pipeline and its artifacts (docs/memory.md §9).

``run`` is a client of the reader (``--reader``, ``--token``, ``--tls-ca`` as every client
command) that writes the artifact store of ``--data-dir`` (``<data root>/memories``: it
runs beside the data root, as the services' user).

``ls`` and ``show`` read through the reader (GetMemories, ResolveProvenance) when a reader
address is configured (``--reader`` or ROLLOUT_READER): the tenant is then the token's,
``--tenant`` only being sent (with authentication, another tenant is PERMISSION_DENIED).
Without one they read the local store of ``--data-dir`` (**local mode**, for an operator on
the data root's host, who can read its files anyway: ``--tenant`` is trusted there, env
ROLLOUT_TENANT, else ``default``, the tenant of sessions created without authentication;
``show --resolve`` still reads the cited messages through the reader). ``forget`` goes
through the writer (ForgetMemories) when a writer address is configured (``--writer`` or
ROLLOUT_WRITER), else writes the local store, in the same way.
"""

from __future__ import annotations

import os
import shlex
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

import click
import orjson

from rollout_cli.service_calls import service_client
from rollout_cli.supervision import data_dir_option
from rollout_memory import (
    ChatCompletionsExtractor,
    CommandExtractor,
    Extractor,
    ExtractorError,
    MemoryPipeline,
    MemoryStore,
    PipelineConfig,
    client_source_reader,
    get_memories,
    resolve_provenance,
)
from shared.errors import InvalidArgumentError
from shared.layout import DataRoot
from shared.memory import ArtifactKind, MemoryView, ResolvedProvenance, Scope
from shared.session_meta import DEFAULT_TENANT

tenant_option = click.option(
    "--tenant",
    default=lambda: os.environ.get("ROLLOUT_TENANT") or None,
    help=(
        "The tenant whose artifacts are read or written (env ROLLOUT_TENANT; else, locally,"
        f" {DEFAULT_TENANT!r}, and through a reader the token's)."
    ),
)


def _local_tenant(tenant: str | None) -> str:
    """The tenant of a command on the local store: the one given, else ``default``."""
    return tenant or DEFAULT_TENANT


def _store(data_dir: Path) -> MemoryStore:
    return MemoryStore(DataRoot(data_dir).memories_folder)


@click.group("memory")
def memory() -> None:
    """Memory artifacts distilled from stopped sessions, kept apart from the rollouts."""


@memory.command("run")
@data_dir_option
@tenant_option
@click.option("--reader", default=None, help="Reader address (env ROLLOUT_READER).")
@click.option(
    "--extractor-url", default=None, help="Base URL of an OpenAI-compatible chat-completions endpoint."
)
@click.option("--extractor-model", default=None, help="Model name sent to the endpoint.")
@click.option(
    "--extractor-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the endpoint's key (never a command-line argument).",
)
@click.option(
    "--extractor-command",
    default=None,
    help="A local command instead: request JSON on stdin, result on stdout.",
)
@click.option(
    "--worker-id",
    default=None,
    help="This worker's id (default host:pid); a restart with the same id takes its leases back.",
)
@click.option("--lease-seconds", type=click.FloatRange(min=0), default=600.0, show_default=True)
@click.option("--attempts", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--backoff-seconds", type=click.FloatRange(min=0), default=1.0, show_default=True)
def run_command(
    data_dir: Path,
    tenant: str | None,
    reader: str | None,
    extractor_url: str | None,
    extractor_model: str | None,
    extractor_key_env: str,
    extractor_command: str | None,
    worker_id: str | None,
    lease_seconds: float,
    attempts: int,
    backoff_seconds: float,
) -> None:
    """Distill the stops not distilled yet (phase 1 per session, phase 2 per scope), mark stale
    artifacts, and print what was done as one JSON object."""
    extractor: Extractor
    if extractor_command is not None and extractor_url is None:
        extractor = CommandExtractor(shlex.split(extractor_command))
    elif extractor_url is not None and extractor_command is None and extractor_model:
        key = os.environ.get(extractor_key_env, "")
        try:
            extractor = ChatCompletionsExtractor(extractor_url, extractor_model, key)
        except ExtractorError as exc:  # the memory extra is not installed
            raise click.ClickException(str(exc)) from exc
    else:
        raise click.UsageError("give --extractor-url with --extractor-model, or --extractor-command")
    config = PipelineConfig(
        worker_id=worker_id or f"{socket.gethostname()}:{os.getpid()}",
        lease_seconds=lease_seconds,
        attempts=attempts,
        backoff_seconds=backoff_seconds,
    )
    with service_client("reader", reader) as client:
        report = MemoryPipeline(
            client, _store(data_dir), extractor, tenant=_local_tenant(tenant), config=config
        ).run()
    click.echo(orjson.dumps(report.__dict__).decode())


def _reader_configured(reader: str | None) -> bool:
    """Whether ``ls`` / ``show`` read through the reader: a reader address is configured
    (``--reader`` or ROLLOUT_READER)."""
    return bool(reader or os.environ.get("ROLLOUT_READER"))  # rollout_client.client_settings' variable


def _view_lines(views: Sequence[MemoryView], damaged: Mapping[str, Sequence[int]]) -> None:
    for key, lines in damaged.items():
        click.echo(f"warning: scope {key}: lines {list(lines)} hold no readable entry (skipped)", err=True)
    for view in views:
        flags = [view.artifact.kind.value, f"{int(view.age_seconds)}s"]
        flags += [f"stale:{mark.value}" for mark in view.marks]
        if view.superseded_by:
            flags.append(f"superseded-by:{view.superseded_by}")
        click.echo(f"{view.artifact.artifact_id}  {' '.join(flags)}  {view.artifact.text}")
    if not views:
        click.echo("no artifacts")


@memory.command("ls")
@data_dir_option
@tenant_option
@click.option(
    "--reader",
    default=None,
    help="Read through this reader (env ROLLOUT_READER), the tenant being the token's; else the local store.",
)
@click.option("--cwd", default=None, help="Only this scope: its cwd (with --repository, --branch, --agent).")
@click.option("--repository", default="")
@click.option("--branch", default="")
@click.option("--agent", default="")
@click.option("--query", default=None, help="Words the text must hold (case-insensitive).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--as-of", default=None, help="The store as it stood at this RFC 3339 time.")
@click.option("--superseded", is_flag=True, help="Superseded artifacts too.")
@click.option("--summaries", is_flag=True, help="Rollout summaries too.")
def ls_command(
    data_dir: Path,
    tenant: str | None,
    reader: str | None,
    cwd: str | None,
    repository: str,
    branch: str,
    agent: str,
    query: str | None,
    limit: int,
    as_of: str | None,
    superseded: bool,
    summaries: bool,
) -> None:
    """Artifacts newest first: id, kind, age, marks, supersession, text."""
    scope = Scope(cwd, repository, branch, agent) if cwd is not None else None
    kinds = (ArtifactKind.MEMORY, ArtifactKind.ROLLOUT_SUMMARY) if summaries else (ArtifactKind.MEMORY,)
    if _reader_configured(reader):
        with service_client("reader", reader) as client:
            found = client.memories(
                scope=scope,
                query=query or "",
                limit=limit,
                as_of=as_of or "",
                include_superseded=superseded,
                kinds=kinds,
                tenant=tenant or "",
            )
        _view_lines(found, found.damaged)
        return
    store, local = _store(data_dir), _local_tenant(tenant)
    damaged: dict[str, list[int]] = {}
    try:
        views = get_memories(
            store,
            tenant=local,
            scope=scope,
            query=query,
            limit=limit,
            as_of=as_of,
            include_superseded=superseded,
            kinds=kinds,
            damaged=damaged,
        )
    except InvalidArgumentError as exc:
        raise click.BadParameter(exc.description, param_hint=f"--{exc.field.replace('_', '-')}") from exc
    _view_lines(views, damaged)


def _shown(view: MemoryView) -> dict[str, object]:
    shown: dict[str, object] = {
        "artifact": view.artifact.to_json(),
        "scope_key": view.artifact.scope.key(),
        "marks": [mark.value for mark in view.marks],
    }
    if view.superseded_by is not None and view.superseded_evidence is not None:
        shown["superseded_by"] = {"artifact_id": view.superseded_by, **view.superseded_evidence.to_json()}
    return shown


def _resolved(resolved: ResolvedProvenance) -> dict[str, object]:
    return {
        "messages": [
            {"session_id": m.session_id, "seq": m.seq, "kind": m.kind.value, "message": m.payload}
            for m in resolved.messages
        ],
        "problems": list(resolved.problems),
    }


@memory.command("show")
@click.argument("artifact_id")
@data_dir_option
@tenant_option
@click.option("--resolve", is_flag=True, help="Also read the cited messages through the reader.")
@click.option(
    "--reader",
    default=None,
    help="Read through this reader (env ROLLOUT_READER), the tenant being the token's; else the local store.",
)
def show_command(
    artifact_id: str, data_dir: Path, tenant: str | None, resolve: bool, reader: str | None
) -> None:
    """One artifact as stored (JSON), its supersession and marks; with --resolve its cited messages."""
    every_kind = tuple(ArtifactKind)
    resolved: ResolvedProvenance | None = None
    if _reader_configured(reader):
        with service_client("reader", reader) as client:
            found: Sequence[MemoryView] = client.memories(
                artifact_ids=[artifact_id],
                include_superseded=True,
                kinds=every_kind,
                limit=1,
                tenant=tenant or "",
            )
            if found and resolve:
                resolved = client.resolve_provenance(artifact_id, tenant=tenant or "")
        missing = f"NOT_FOUND: memory artifact {artifact_id!r} not found"
    else:
        local = _local_tenant(tenant)
        found = get_memories(
            _store(data_dir),
            tenant=local,
            scope=None,
            limit=1,
            include_superseded=True,
            kinds=every_kind,
            artifact_ids=(artifact_id,),
        )
        if found and resolve:
            with service_client("reader", reader) as client:
                read = client_source_reader(client)
                resolved = resolve_provenance(read, tenant=local, artifact=found[0].artifact)
        missing = f"NOT_FOUND: no artifact {artifact_id!r} for tenant {local!r}"
    if not found:
        raise click.ClickException(missing)
    shown = _shown(found[0])
    if resolved is not None:
        shown |= _resolved(resolved)
    click.echo(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode())


@memory.command("forget")
@data_dir_option
@tenant_option
@click.option(
    "--writer",
    default=None,
    help="Forget through this writer (env ROLLOUT_WRITER), the tenant being the token's; else the local store.",
)
@click.option("--session", "session_id", default=None, help="Forget every artifact citing this session.")
@click.option(
    "--scope-key", default=None, help="Forget every artifact of this scope (its key, as `show` prints)."
)
@click.option(
    "--by",
    default=lambda: os.environ.get("USER", ""),
    help="Who asked (recorded; through an authenticated writer, the token is recorded instead).",
)
def forget_command(
    data_dir: Path,
    tenant: str | None,
    writer: str | None,
    session_id: str | None,
    scope_key: str | None,
    by: str,
) -> None:
    """Remove a session's or a scope's artifacts from the store, and record that it was done."""
    if (session_id is None) == (scope_key is None):
        raise click.UsageError("give --session or --scope-key")
    if writer or os.environ.get("ROLLOUT_WRITER"):  # rollout_client.client_settings' variable
        with service_client("writer", writer) as client:
            removed = client.forget_memories(
                session_id=session_id, scope_key=scope_key, tenant=tenant or "", by=by
            )
    else:
        removed = _store(data_dir).forget(
            _local_tenant(tenant), session_id=session_id, scope_key=scope_key, by=by
        )
    click.echo(f"forgot {len(removed)} artifact(s)" + "".join(f"\n{i}" for i in removed))
