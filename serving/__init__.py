"""How both services are served: one construction of a grpc.aio server with TLS, health and
reflection (:mod:`serving.server`), authentication by token or client certificate
(:mod:`serving.auth`), the caller's tenant and what it may see (:mod:`serving.tenancy`),
one mapping from ledger errors to gRPC statuses (:mod:`serving.status`), per-RPC metrics
and logs (:mod:`serving.rpc_observer`) and optional tracing (:mod:`serving.tracing`).

The writer and the reader both build on it; the contract they agree on (records, rebuild,
digest, stop kinds, errors) is :mod:`shared`, which imports nothing from here.
"""
