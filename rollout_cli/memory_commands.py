"""``rollout memory run | ls | show | forget``: the memory pipeline and its artifacts (docs/memory.md).

``run`` is a client of the reader (``--reader``, ``--token``, ``--tls-ca`` as every client
command) that writes the artifact store of ``--data-dir`` (``<data root>/memories``: it
runs beside the data root, as the services' user). ``ls``, ``show`` and ``forget`` read
and write that store only (``show --resolve`` reads the cited messages through the
reader). Every command names its tenant (``--tenant``, env ROLLOUT_TENANT, else
``default``, the tenant of sessions created without authentication): with authentication,
the reader answers for the token's tenant only, so ``run`` and ``show --resolve`` for
another tenant find nothing.
"""

from __future__ import annotations

import os
import shlex
import socket
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
    get_memories,
    resolve_provenance,
)
from shared.layout import DataRoot
from shared.memory import ArtifactKind, Scope
from shared.session_meta import DEFAULT_TENANT

tenant_option = click.option(
    "--tenant",
    default=lambda: os.environ.get("ROLLOUT_TENANT", DEFAULT_TENANT),
    help=f"The tenant whose artifacts are read or written (env ROLLOUT_TENANT, else {DEFAULT_TENANT!r}).",
)


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
    tenant: str,
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
        report = MemoryPipeline(client, _store(data_dir), extractor, tenant=tenant, config=config).run()
    click.echo(orjson.dumps(report.__dict__).decode())


@memory.command("ls")
@data_dir_option
@tenant_option
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
    tenant: str,
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
    views = get_memories(
        _store(data_dir),
        tenant=tenant,
        scope=scope,
        query=query,
        limit=limit,
        as_of=as_of,
        include_superseded=superseded,
        kinds=kinds,
    )
    store = _store(data_dir)
    for key in [scope.key()] if scope is not None else store.scope_keys(tenant):
        damaged = store.read_scope(tenant, key).damaged
        if damaged:
            click.echo(f"warning: scope {key}: lines {damaged} hold no readable entry (skipped)", err=True)
    for view in views:
        flags = [view.artifact.kind.value, f"{int(view.age_seconds)}s"]
        flags += [f"stale:{mark.value}" for mark in view.marks]
        if view.superseded_by:
            flags.append(f"superseded-by:{view.superseded_by}")
        click.echo(f"{view.artifact.artifact_id}  {' '.join(flags)}  {view.artifact.text}")
    if not views:
        click.echo("no artifacts")


@memory.command("show")
@click.argument("artifact_id")
@data_dir_option
@tenant_option
@click.option("--resolve", is_flag=True, help="Also read the cited messages through the reader.")
@click.option("--reader", default=None, help="Reader address (env ROLLOUT_READER).")
def show_command(artifact_id: str, data_dir: Path, tenant: str, resolve: bool, reader: str | None) -> None:
    """One artifact as stored (JSON), its supersession and marks; with --resolve its cited messages."""
    store = _store(data_dir)
    found = store.find_artifact(tenant, artifact_id)
    if found is None:
        raise click.ClickException(f"NOT_FOUND: no artifact {artifact_id!r} for tenant {tenant!r}")
    _, state = found
    artifact = state.artifacts[artifact_id]
    shown: dict[str, object] = {
        "artifact": artifact.to_json(),
        "scope_key": artifact.scope.key(),
        "marks": [m.value for m in state.marks.get(artifact_id, ())],
    }
    by = state.superseded_by.get(artifact_id)
    if by is not None:
        shown["superseded_by"] = {"artifact_id": by[0], **by[1].to_json()}
    if resolve:
        with service_client("reader", reader) as client:
            resolved = resolve_provenance(client, tenant=tenant, artifact=artifact)
        shown["messages"] = [
            {"session_id": m.session_id, "seq": m.seq, "kind": m.kind.value, "message": m.payload}
            for m in resolved.messages
        ]
        shown["problems"] = list(resolved.problems)
    click.echo(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode())


@memory.command("forget")
@data_dir_option
@tenant_option
@click.option("--session", "session_id", default=None, help="Forget every artifact citing this session.")
@click.option(
    "--scope-key", default=None, help="Forget every artifact of this scope (its key, as `show` prints)."
)
@click.option("--by", default=lambda: os.environ.get("USER", ""), help="Who asked (recorded).")
def forget_command(
    data_dir: Path, tenant: str, session_id: str | None, scope_key: str | None, by: str
) -> None:
    """Remove a session's or a scope's artifacts from the store, and record that it was done."""
    if (session_id is None) == (scope_key is None):
        raise click.UsageError("give --session or --scope-key")
    removed = _store(data_dir).forget(tenant, session_id=session_id, scope_key=scope_key, by=by)
    click.echo(f"forgot {len(removed)} artifact(s)" + "".join(f"\n{i}" for i in removed))
