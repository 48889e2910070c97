"""The ``rollout`` command line: the services' start-up, the importers and the client commands."""

import os

# gRPC's own INFO lines (a failed TLS handshake, say) would come before a command's one-line
# error on stderr. At ERROR (gRPC has no level between INFO and ERROR) its errors still show,
# for the commands and the services alike; GRPC_VERBOSITY=INFO brings the rest back.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
