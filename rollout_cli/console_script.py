"""The ``rollout`` console script: Ctrl-C while the command line loads exits quietly.

Loading :mod:`rollout_cli.main` (gRPC, the stubs, click) takes about 0.4 s. A Ctrl-C in that
window would otherwise print a ``KeyboardInterrupt`` traceback from deep inside an import, or,
when it lands in one of the import system's own callbacks, print "Exception ignored" and be
lost. Here such a Ctrl-C is only noted; once loading ends the process exits with status 130
(the shell's code for "interrupted by SIGINT") and no output, before any command has started.
Once loaded, SIGINT is Python's usual ``KeyboardInterrupt`` again, which click and
``rollout serve`` handle themselves.
"""

from __future__ import annotations

import signal
from types import FrameType

INTERRUPTED_EXIT_STATUS = 130  # 128 + SIGINT, as shells report it


class _LoadingInterrupts:
    """Counts the SIGINTs that arrive while the command line loads (a signal handler)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.count += 1


def main() -> None:
    """Run the ``rollout`` command line (``sys.argv``); exit status 130 on a Ctrl-C while it loads.

    A SIGINT the parent set to be ignored (a background job) stays ignored.
    """
    guarded = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    interrupts = _LoadingInterrupts()
    if guarded:
        signal.signal(signal.SIGINT, interrupts)
    from rollout_cli.main import cli

    try:
        if guarded:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if interrupts.count:
            raise SystemExit(INTERRUPTED_EXIT_STATUS)
    except KeyboardInterrupt:  # a Ctrl-C just after the hand-over, before click is listening
        raise SystemExit(INTERRUPTED_EXIT_STATUS) from None
    cli()
