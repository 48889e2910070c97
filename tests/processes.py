"""Run a writer or reader as its own process (tests, benchmarks, the crash harness), and make
sure no process a test starts outlives it.

:func:`start_service` starts ``rollout serve-<kind>``, waits for its first stdout
line ("rollout <kind> listening on HOST:PORT") and returns the bound address, so
callers can ask for port 0 and run in parallel without port clashes.

Every process started through :func:`launch` (``start_service`` uses it) is registered until it
is reaped: :func:`reap_started_since` kills and reaps what a test left running (tests/conftest.py
calls it after each test, failed or not), and whatever is left when the interpreter exits is
killed then, and the kernel kills it if the test process dies abruptly. A process left to the
garbage collector would otherwise be reported later, as a ResourceWarning in whichever test runs
at that moment.

A process inherits signal dispositions through fork and exec: started from a test run whose
parent ignores SIGINT (``trap '' INT``), it ignores Ctrl-C too. A test that sends SIGINT says
which disposition its process starts with (``launch(..., sigint=...)``, :func:`prefixed`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_LISTENING = re.compile(r"listening on (\S+:\d+)")
_REPO = Path(__file__).resolve().parent.parent  # the repository root (commands run there)

#: Every launched process not reaped yet, in launch order.
_started: list[subprocess.Popen[Any]] = []

#: util-linux's setpriv (Debian: the essential util-linux package), or None.
_SETPRIV = shutil.which("setpriv")
#: GNU coreutils' env, found here: a command given its own environment may have another PATH.
_ENV = shutil.which("env") or "env"


def prefixed(argv: Sequence[str | os.PathLike[str]], *, sigint: signal.Handlers | None = None) -> list[str]:
    """``argv`` run so that the kernel kills it (SIGKILL) when the calling thread ends, and with
    SIGINT's disposition ``sigint`` (None: as this process has it).

    The first by ``setpriv --pdeathsig KILL`` (util-linux; left out where there is none), the
    second by ``env --default-signal=INT`` or ``--ignore-signal=INT`` (GNU coreutils 8.31+):
    both set it and exec the command, keeping its process id. Never a ``preexec_fn``: Python run
    between fork and exec in a process whose gRPC threads are busy can abort the child (SIGABRT
    from gRPC's fork handlers, seen in one writer restart of nine).
    """
    prefix: list[str] = []
    if _SETPRIV is not None:
        prefix += [_SETPRIV, "--pdeathsig", "KILL", "--"]
    if sigint is signal.SIG_DFL:
        prefix += [_ENV, "--default-signal=INT"]
    elif sigint is signal.SIG_IGN:
        prefix += [_ENV, "--ignore-signal=INT"]
    elif sigint is not None:
        raise ValueError(f"sigint is SIG_DFL, SIG_IGN or None, not {sigint!r}")
    return [*prefix, *map(str, argv)]


def launch(
    argv: Sequence[str | os.PathLike[str]], *, sigint: signal.Handlers | None = None, **options: Any
) -> subprocess.Popen[Any]:
    """``subprocess.Popen(prefixed(argv, sigint=sigint), **options)``, registered until
    :func:`reap` (or the test's end) reaps it. Give ``start_new_session=True`` to have its whole
    process group killed.

    ``sigint``: SIG_DFL starts it as a terminal's foreground command (Ctrl-C reaches it), SIG_IGN
    as a shell script's background job; None leaves what this test run inherited. The kernel
    kills it if the calling thread ends first (:func:`prefixed`), so a test process that dies
    abruptly leaves nothing running: call it from a thread that lives as long as the process
    should, the test's own. ``preexec_fn`` is refused (see :func:`prefixed`).
    """
    if "preexec_fn" in options:
        raise TypeError("launch() takes no preexec_fn: it can abort the child of a process using gRPC")
    process: subprocess.Popen[Any] = subprocess.Popen(prefixed(argv, sigint=sigint), **options)
    _started.append(process)
    return process


def reap(process: subprocess.Popen[Any]) -> int:
    """Kill ``process`` if it still runs (SIGKILL, to its whole group when it leads one, so that
    its children go too), wait for it, close its pipes; returns its exit code."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _leads_its_group(process.pid):
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
    code = process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    with contextlib.suppress(ValueError):
        _started.remove(process)
    return code


def _leads_its_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def started_count() -> int:
    """How many launched processes are not reaped yet (a mark for :func:`reap_started_since`)."""
    return len(_started)


def reap_started_since(mark: int, grace: float = 0.0) -> list[str]:
    """Reap every process launched after ``mark`` (:func:`started_count`) and not reaped yet;
    returns the command lines of those still running ``grace`` seconds after the call (they are
    killed then; one that exits within it, say just after printing its last line, is only reaped)."""
    left = []
    for process in list(_started[mark:]):
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
        if process.poll() is None:
            left.append(" ".join(map(str, process.args)))
        reap(process)
    return left


@atexit.register
def _reap_all() -> None:
    for process in list(_started):
        reap(process)


@dataclass
class ServiceProcess:
    """A started service: its process, bound address and log file (its stderr)."""

    process: subprocess.Popen[str]
    address: str
    log_path: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        """Signal the process (SIGTERM: drain and exit; SIGKILL: crash) and wait; returns its exit code.

        A process that outlives ``timeout`` seconds is killed.
        """
        if self.process.poll() is None:
            self.process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):  # then killed
            self.process.wait(timeout)
        return reap(self.process)

    def log(self) -> str:
        """What the service wrote to stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def start_service(
    kind: str,
    data_dir: Path,
    log_path: Path,
    *extra: str,
    address: str = "127.0.0.1:0",
    repo: Path = _REPO,
    env: Mapping[str, str] | None = None,
) -> ServiceProcess:
    """Start ``rollout serve-<kind>`` (writer or reader) and wait until it listens.

    ``repo``: the checkout whose code runs (a benchmark may measure another one). ``env``:
    variables set for the service on top of this process's environment (a test hook).
    Raises RuntimeError with the service's log when it exits before listening
    (a locked data root, a port in use); the process is reaped whatever ends the wait.
    """
    variables = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(repo)}
    command = [sys.executable, "-m", "rollout_cli.main", f"serve-{kind}", "--data-dir", str(data_dir)]
    with log_path.open("a") as log:
        process = launch(
            [*command, "--address", address, *extra],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=variables,
            cwd=repo,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = _LISTENING.search(line)
    except BaseException:  # a test's timeout, an interrupt: the service must not outlive it
        reap(process)
        raise
    if match is None:
        reap(process)
        raise RuntimeError(f"{kind} did not start: {line!r}\n{log_path.read_text(errors='replace')}")
    return ServiceProcess(process, match.group(1), log_path)
