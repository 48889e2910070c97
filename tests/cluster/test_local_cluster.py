"""deploy/local/cluster.sh, as the README's "Running a cluster" uses it: three etcd members, three
writers and a reader come up; an append goes through; a writer killed with SIGKILL loses its
shards to the others (``rollout cluster status``) and its session takes appends again; SIGTERM
stops everything it started (the writers drain) and the script exits 0."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from rollout_client import AsyncRolloutClient, RetryPolicy, user
from shared.shards import shard_of
from tests.cluster.waits import wait_until
from tests.conftest import REPO
from tests.ports import free_ports
from tests.processes import launch, reap
from writer_service.cluster_ownership import ClusterView, read_cluster

SCRIPT = REPO / "deploy" / "local" / "cluster.sh"
SHARDS = 16
#: Seconds the script may take to report itself ready, or to stop (generous: the suite runs under load).
LIMIT = 180.0


def _banner(process: subprocess.Popen[str]) -> list[str]:
    """The script's stdout up to its "ready" line (AssertionError with what it said if it ends first)."""
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if line.strip() == "ready":
            return lines
    raise AssertionError("the script ended before it was ready:\n" + "\n".join(lines))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_local_cluster_runs_fails_over_and_stops_cleanly(tmp_path: Path) -> None:
    ports = free_ports(10)
    writers = [f"127.0.0.1:{port}" for port in ports[:3]]
    reader = f"127.0.0.1:{ports[3]}"
    etcd = ",".join(f"127.0.0.1:{port}" for port in ports[4:7])
    stderr = tmp_path / "cluster.err"
    with stderr.open("w") as log:
        process = launch(
            [
                "bash",
                str(SCRIPT),
                "--dir",
                str(tmp_path / "cluster"),
                "--cluster",
                "trial",
                "--lease-ttl",
                "3",
                "--writer-ports",
                ",".join(str(port) for port in ports[:3]),
                "--reader-port",
                str(ports[3]),
                "--etcd-ports",
                ",".join(str(port) for port in ports[4:7]),
                "--etcd-peer-ports",
                ",".join(str(port) for port in ports[7:]),
                "--",
                "--shards",
                str(SHARDS),
                "--durability",
                "unsafe_no_fsync",
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
    try:
        banner = _banner(process)
        pids = {name: int(pid) for name, pid in re.findall(r"^  (.+): pid (\d+)$", "\n".join(banner), re.M)}
        assert sorted(pids) == sorted(
            [*(f"writer {w}" for w in writers), f"reader {reader}", "etcd m0", "etcd m1", "etcd m2"]
        )
        assert f"  export ROLLOUT_WRITER={','.join(writers)} ROLLOUT_READER={reader}" in banner
        asyncio.run(_fail_over(writers, reader, etcd, pids))
        process.send_signal(signal.SIGTERM)
        assert process.wait(LIMIT) == 0, stderr.read_text()
        said = stderr.read_text()
        assert "stopped\n" in said
        drained = [
            w for w in writers if f"writer {w} (pid {pids[f'writer {w}']}) stopped with status 0" in said
        ]
        assert len(drained) == 2, said  # the two left drained: SIGTERM, a clean exit
        assert not [name for name, pid in pids.items() if _alive(pid)]
    finally:
        reap(process)


async def _fail_over(writers: list[str], reader: str, etcd: str, pids: dict[str, int]) -> None:
    view: ClusterView | None = None

    async def balanced() -> bool:
        nonlocal view
        view = await read_cluster(etcd, "trial")
        owners = [shard.address for shard in view.shards]
        return len(owners) == SHARDS and set(owners) == set(writers)

    await wait_until(balanced, "every shard owned, by the three writers")
    retry = RetryPolicy(deadline=120.0)
    async with AsyncRolloutClient(",".join(writers), reader, retry=retry) as client:
        session = await client.create_session("trial", root=True)
        assert (await session.append(user("before"))).seqs == (1,)
    assert view is not None
    owner = view.shards[shard_of(session.id, SHARDS)].address
    assert owner is not None
    os.kill(pids[f"writer {owner}"], signal.SIGKILL)
    others = sorted(set(writers) - {owner})

    async def moved() -> bool:
        found = await read_cluster(etcd, "trial")
        return len(found.shards) == SHARDS and {shard.address for shard in found.shards} == set(others)

    await wait_until(moved, f"the shards of {owner} owned by the two other writers")
    status = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "rollout_cli.main", "cluster", "status", "--etcd", etcd, "--cluster", "trial"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert status.returncode == 0, status.stderr
    assert f"{SHARDS} of {SHARDS} shards owned" in status.stdout
    assert owner not in status.stdout
    async with AsyncRolloutClient(",".join(others), reader, retry=retry) as client:
        assert (await client.session(session.id).append(user("after"))).seqs == (2,)

        async def replayed() -> bool:
            replay = await client.session(session.id).replay()
            return [message["content"] for message in replay.messages] == ["before", "after"]

        await wait_until(replayed, "both records replayed by the reader")
