"""OpenTelemetry client spans whose W3C ``traceparent`` travels in the request's NATS headers.

Only with the ``opentelemetry-api`` package installed and tracing on (``RecallClient(tracing=True)`` or
``RECALL_TRACING=true``); otherwise :func:`client_span` adds nothing. The application configures the
tracer provider and its exporter, as with any OpenTelemetry instrumentation.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from recall_schemas import RecallError

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind

    OTEL = True
except ImportError:  # tracing is an optional extra
    OTEL = False

TRACER = "recall_client"


def tracing_from_env() -> bool:
    return os.environ.get("RECALL_TRACING", "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def client_span(op: str, ai_id: str, enabled: bool) -> Iterator[dict[str, str]]:
    """Headers carrying the trace to the hub, within a ``CLIENT`` span around the request (retries
    included); an empty dict when tracing is off or OpenTelemetry is not installed."""
    if not (enabled and OTEL):
        yield {}
        return
    attributes = {"rpc.system": "recall", "rpc.method": op, "recall.op": op, "recall.caller": ai_id}
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(op, kind=SpanKind.CLIENT, attributes=attributes) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        try:
            yield carrier
        except RecallError as exc:
            span.set_attribute("recall.error_code", exc.code.value)
            raise
