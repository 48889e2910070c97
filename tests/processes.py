"""Run a writer or reader as its own process (tests, benchmarks, the crash harness).

:func:`start_service` starts ``rollout serve-<kind>``, waits for its first stdout
line ("rollout <kind> listening on HOST:PORT") and returns the bound address, so
callers can ask for port 0 and run in parallel without port clashes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_LISTENING = re.compile(r"listening on (\S+:\d+)")
_REPO = Path(__file__).resolve().parent.parent  # the repository root (commands run there)


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
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code

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
) -> ServiceProcess:
    """Start ``rollout serve-<kind>`` (writer or reader) and wait until it listens.

    ``repo``: the checkout whose code runs (a benchmark may measure another one).
    Raises RuntimeError with the service's log when it exits before listening
    (a locked data root, a port in use).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(repo)}
    command = [sys.executable, "-m", "rollout_cli.main", f"serve-{kind}", "--data-dir", str(data_dir)]
    with log_path.open("a") as log:
        process = subprocess.Popen(
            [*command, "--address", address, *extra],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=repo,
        )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = _LISTENING.search(line)
    if match is None:
        process.kill()
        process.wait(10)
        process.stdout.close()
        raise RuntimeError(f"{kind} did not start: {line!r}\n{log_path.read_text(errors='replace')}")
    return ServiceProcess(process, match.group(1), log_path)
