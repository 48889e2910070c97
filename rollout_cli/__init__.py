"""The ``rollout`` command line: the services' start-up, the importers and the client commands."""

import os

# gRPC's own INFO lines (a failed TLS handshake, say) would come before a command's one-line
# error on stderr; its warnings and errors still show. GRPC_VERBOSITY=INFO brings them back.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
