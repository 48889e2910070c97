"""The ``rollout`` console script: Ctrl-C while the command line loads exits quietly.

Loading :mod:`rollout_cli.main` (gRPC, the stubs, click) takes about 0.4 s. A Ctrl-C in that
window would otherwise print a ``KeyboardInterrupt`` traceback from deep inside an import;
here it ends the process with status 130 (the shell's code for "interrupted by SIGINT") and no
output, before any command has started. Once loaded, SIGINT is Python's usual
``KeyboardInterrupt`` again, which click and ``rollout serve`` handle themselves.
"""

from __future__ import annotations

import signal
from types import FrameType

INTERRUPTED_EXIT_STATUS = 130  # 128 + SIGINT, as shells report it


def _interrupted_while_loading(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(INTERRUPTED_EXIT_STATUS)


def main() -> None:
    """Run the ``rollout`` command line (``sys.argv``); exit status 130 on a Ctrl-C while it loads.

    A SIGINT the parent set to be ignored (a background job) stays ignored.
    """
    guarded = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if guarded:
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    from rollout_cli.main import cli

    if guarded:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    cli()
