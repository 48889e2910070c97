"""Real etcd clusters for tests and benchmarks: 1 or 3 members on loopback.

Each member listens on free loopback ports and keeps its data in its own directory under the
caller's temporary root; :meth:`EtcdCluster.start` returns once every member reports itself
healthy on ``/health`` (it has a leader and serves a read). Members can be killed and
restarted (on their data, their ports), stopped with SIGSTOP and continued. :func:`etcd_cluster`
stops every process it started, also when the test fails; an interpreter that exits with
members still running kills them (atexit).

``etcd`` is Debian's ``etcd-server`` package (3.4): ``apt-get install -y etcd-server``
(``.ci/run`` installs it on a machine without it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import free_ports

#: Seconds a cluster (or a restarted member) may take to report itself healthy.
HEALTHY_LIMIT = 90.0
#: Attempts at starting a cluster whose member could not bind a port another process took.
START_ATTEMPTS = 3

_running: set[subprocess.Popen[bytes]] = set()


def etcd_binary() -> str | None:
    """The etcd server's path, or None when it is not installed."""
    return shutil.which("etcd")


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_running):
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait()


@dataclass
class EtcdMember:
    """One member: its name, ports, data directory and log file, and its process while it runs."""

    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:PORT``, the member's client address."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        """Whether the member answers ``/health`` with ``{"health": "true"}``."""
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=2) as reply:
                return bool(json.load(reply).get("health") == "true")
        except (OSError, ValueError):  # refused, 503 (urllib.error.HTTPError is an OSError), a torn reply
            return False

    def log(self) -> str:
        """What the member wrote so far (its last 4,000 characters)."""
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""


class EtcdCluster:
    """``size`` etcd members on loopback under ``root`` (see the module docstring)."""

    def __init__(self, root: Path, size: int) -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed: apt-get install -y etcd-server (see .ci/run)")
        self.binary = binary
        self.root = root
        self.size = size
        self.members: list[EtcdMember] = []
        self._token = f"test-{os.urandom(6).hex()}"

    @property
    def endpoints(self) -> str:
        """Every member's client address, ``HOST:PORT,...``."""
        return ",".join(member.endpoint for member in self.members)

    def index_of(self, endpoint: object) -> int:
        """The index of the member whose client address is ``str(endpoint)``."""
        return [member.endpoint for member in self.members].index(str(endpoint))

    def start(self) -> None:
        """Start every member and wait until each is healthy (retrying on fresh ports when a
        member could not bind one). Raises RuntimeError with the members' logs otherwise."""
        for attempt in range(START_ATTEMPTS):
            self._plan(attempt)
            for index in range(self.size):
                self._launch(index)
            try:
                self.wait_healthy()
                return
            except RuntimeError:
                taken = any("address already in use" in member.log() for member in self.members)
                self.stop()
                if not taken or attempt == START_ATTEMPTS - 1:
                    raise

    def _plan(self, attempt: int) -> None:
        ports = free_ports(2 * self.size)
        self.members = []
        for index in range(self.size):
            directory = self.root / f"etcd-{attempt}-m{index}"
            directory.mkdir(parents=True)
            self.members.append(
                EtcdMember(
                    f"m{index}",
                    ports[2 * index],
                    ports[2 * index + 1],
                    directory / "data",
                    directory / "etcd.log",
                )
            )

    def _launch(self, index: int) -> None:
        member = self.members[index]
        initial = ",".join(f"{peer.name}={peer.peer_url}" for peer in self.members)
        command = [
            self.binary,
            "--name", member.name,
            "--data-dir", str(member.data_dir),
            "--listen-client-urls", f"http://{member.endpoint}",
            "--advertise-client-urls", f"http://{member.endpoint}",
            "--listen-peer-urls", member.peer_url,
            "--initial-advertise-peer-urls", member.peer_url,
            "--initial-cluster", initial,
            "--initial-cluster-token", self._token,
            "--initial-cluster-state", "new",
            "--logger", "zap",
            "--log-outputs", "stderr",
        ]  # fmt: skip
        environment = {name: value for name, value in os.environ.items() if not name.startswith("ETCD")}
        with member.log_path.open("ab") as log:
            member.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=environment,
                start_new_session=True,
            )
        _running.add(member.process)

    def wait_healthy(self, indexes: list[int] | None = None, limit: float = HEALTHY_LIMIT) -> None:
        """Wait until the members at ``indexes`` (default: all) are healthy, at most ``limit``
        seconds; RuntimeError (with their logs) when one exits or the limit passes."""
        chosen = [self.members[index] for index in (range(self.size) if indexes is None else indexes)]
        give_up = time.monotonic() + limit
        while True:
            waiting = [member for member in chosen if not member.healthy()]
            if not waiting:
                return
            dead = [member for member in waiting if not member.running()]
            if dead or time.monotonic() > give_up:
                why = "exited" if dead else f"was not healthy within {limit:g} s"
                logs = "\n".join(f"--- {member.name}:\n{member.log()}" for member in dead or waiting)
                raise RuntimeError(f"etcd member {(dead or waiting)[0].name} {why}\n{logs}")
            time.sleep(0.1)

    def kill(self, index: int) -> None:
        """SIGKILL member ``index`` and reap it."""
        member = self.members[index]
        if member.process is not None:
            _stop_process(member.process, signal.SIGKILL)
            member.process = None

    def restart(self, index: int, *, wait: bool = True) -> None:
        """Start member ``index`` again on its data and ports (killing it first if it runs);
        ``wait``: until it is healthy (its cluster needs a quorum for that)."""
        self.kill(index)
        self._launch(index)
        if wait:
            self.wait_healthy([index])

    def pause(self, index: int) -> None:
        """SIGSTOP member ``index``: its sockets stay open, nothing answers."""
        process = self.members[index].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)

    def resume(self, index: int) -> None:
        """SIGCONT member ``index``."""
        process = self.members[index].process
        assert process is not None
        process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill every member and reap it."""
        for member in self.members:
            if member.process is not None:
                _stop_process(member.process, signal.SIGKILL)
                member.process = None


def _stop_process(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.send_signal(sig)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _running.discard(process)


@contextlib.contextmanager
def etcd_cluster(root: Path, size: int) -> Iterator[EtcdCluster]:
    """A started cluster of ``size`` members under ``root``, stopped on leaving (even on error)."""
    cluster = EtcdCluster(root, size)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
