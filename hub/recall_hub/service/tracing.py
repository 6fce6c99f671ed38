"""OpenTelemetry server spans for requests, when tracing is on and the ``[otel]`` extra is installed.

The client puts the W3C ``traceparent`` of its own span into the request's NATS headers; the hub continues
that trace with one ``SERVER`` span per request (operation, caller, error code). Spans go to the global
tracer provider, which the application configures (``recall hub`` installs one: :func:`install_provider`).
Without OpenTelemetry, or with tracing off, every call here does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    OTEL = True
except ImportError:  # the [otel] extra is not installed
    OTEL = False

log = logging.getLogger(__name__)

TRACER = "recall_hub"


class RequestSpan:
    """The span of one request; :meth:`finish` records how it ended."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def finish(self, error_code: str | None) -> None:
        if self._span is None:
            return
        if error_code is not None:
            self._span.set_attribute("recall.error_code", error_code)
            self._span.set_status(Status(StatusCode.ERROR, error_code))


_NO_SPAN = RequestSpan()


class Tracing:
    def __init__(self, enabled: bool) -> None:
        if enabled and not OTEL:
            log.warning("tracing is on but OpenTelemetry is not installed (pip install 'nexus-recall[otel]'): off")
        self.enabled = enabled and OTEL

    @contextmanager
    def server_span(self, op: str, caller: str, headers: Mapping[str, str] | None) -> Iterator[RequestSpan]:
        """The request's span, child of the caller's trace when its headers carry one."""
        if not self.enabled:
            yield _NO_SPAN
            return
        parent = propagate.extract(dict(headers or {}))
        attributes = {"rpc.system": "recall", "rpc.method": op, "recall.op": op, "recall.caller": caller}
        tracer = trace.get_tracer(TRACER)
        with tracer.start_as_current_span(op, context=parent, kind=SpanKind.SERVER, attributes=attributes) as span:
            yield RequestSpan(span)


def install_provider(service_name: str = "recall-hub") -> None:
    """A tracer provider for a process that has none: OTLP export when ``opentelemetry-exporter-otlp`` is
    installed (configured by the usual ``OTEL_EXPORTER_OTLP_*`` variables), otherwise spans are not
    exported (and a warning says so)."""
    if not OTEL:
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing: opentelemetry-sdk is not installed (pip install 'nexus-recall[otel]'); no spans")
        return
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return  # configured already (opentelemetry-instrument, or the embedding application)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("tracing: install opentelemetry-exporter-otlp to export spans; they are recorded only")
    else:
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
