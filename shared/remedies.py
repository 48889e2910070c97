"""What a refusal tells its caller to do next, in the client library's words (docs/spec.md §6).

The services' messages reach Python programs through :mod:`rollout_client` first, and other
gRPC clients and the ``rollout`` command too: they name the call of the Python client (whose
argument is the RPC's field of the same name), never a command-line flag. The command line
says each of these phrases in its own words (``rollout_cli.reachability.in_command_words``),
keyed by these constants, so the two stay paired.
"""

from __future__ import annotations

#: Re-opening a session that is refused as-is (a stop kind not replayable, damage): Resume with ``force``.
FORCED_RESUME = "resume(force=True)"
#: Where every damaged line of a session is listed: VerifySession.
SEE_VERIFY = "see verify()"
