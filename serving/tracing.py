"""OpenTelemetry tracing of each RPC (optional; off unless a service is started with
``--otlp-tracing``; needs the ``tracing`` extra: ``pip install 'rollout-ledger[tracing]'``).

When on, every call gets a server span (OpenTelemetry's gRPC instrumentation, the
outermost interceptor: serving.server), exported in batches by OTLP over gRPC. The
exporter is configured by the standard environment variables, read by the SDK itself:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; default
``http://localhost:4317``), ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_CERTIFICATE``,
``OTEL_EXPORTER_OTLP_INSECURE``, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
(the service name defaults to ``rollout-<service>``), ``OTEL_TRACES_SAMPLER`` and the
batch settings ``OTEL_BSP_*``.
"""

from __future__ import annotations

import os

import grpc.aio


class TracingUnavailableError(RuntimeError):
    """Tracing was asked for but the ``tracing`` extra is not installed."""


def tracing_interceptor(service: str) -> grpc.aio.ServerInterceptor:
    """A server interceptor tracing every RPC of ``service`` ("writer", "reader") to OTLP.

    Installs a tracer provider for the process (its spans are flushed at exit). Raises
    TracingUnavailableError naming the extra to install.
    """
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.grpc import aio_server_interceptor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailableError(
            f"--otlp-tracing needs OpenTelemetry ({exc.name} is missing): pip install 'rollout-ledger[tracing]'"
        ) from exc
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": f"rollout-{service}"}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    interceptor: grpc.aio.ServerInterceptor = aio_server_interceptor(tracer_provider=provider)
    return interceptor
