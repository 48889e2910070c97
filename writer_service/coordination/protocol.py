"""etcd v3's protocol: the messages and gRPC stubs of its ``rpc.proto``, as aetcd generated them.

aetcd 1.0.0 (the ``cluster`` extra) is used for this generated code alone: its client speaks
to one member and opens a stream for every lease refresh, so the rotation over members
(:mod:`.endpoints`), the keepalive stream (:mod:`.leases`) and watches (:mod:`.watches`) are
ours. Nothing else in the services imports aetcd.
"""

from __future__ import annotations

try:
    from aetcd import rpc as etcd_rpc
    from aetcd.utils import prefix_range_end
except ImportError as error:  # the writer's cluster mode needs the extra; the embedded default does not
    raise ImportError(
        "the etcd protocol package (aetcd) is not installed: pip install 'rollout-ledger[cluster]'"
    ) from error

__all__ = ["etcd_rpc", "prefix_range_end"]
