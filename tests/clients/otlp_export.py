"""Export spans and logs to Veltrix with the OpenTelemetry Python SDK's OTLP/HTTP exporters.

Usage: otlp_export.py BASE_URL SERVICE COMPRESSION   (COMPRESSION: none | gzip)

Sends one trace (a parent span with attributes and an event, and a child span) and two log
records (one inside the parent span, one outside any span, through the SDK's logging
handler), force-flushes both providers, and prints a JSON report on stdout: the trace id and
span ids as the SDK saw them, and whether each export succeeded.
"""

import json
import logging
import sys

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode


class Recording:
    """Wraps an exporter to record each export's result (SUCCESS or FAILURE)."""

    def __init__(self, inner):
        self.inner = inner
        self.results = []

    def export(self, batch):
        result = self.inner.export(batch)
        self.results.append(result.name)
        return result

    def shutdown(self, *args, **kwargs):
        return self.inner.shutdown(*args, **kwargs)

    def force_flush(self, *args, **kwargs):
        return self.inner.force_flush(*args, **kwargs)


def main():
    base, service, compression = sys.argv[1], sys.argv[2], sys.argv[3]
    comp = Compression.Gzip if compression == "gzip" else Compression.NoCompression
    resource = Resource.create({"service.name": service, "service.version": "1.0.0"})

    spans = Recording(
        OTLPSpanExporter(endpoint=f"{base}/v1/traces", compression=comp, timeout=10)
    )
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = tracer_provider.get_tracer("veltrix.test", "0.1.0")

    logs = Recording(OTLPLogExporter(endpoint=f"{base}/v1/logs", compression=comp, timeout=10))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    handler = LoggingHandler(level=logging.INFO, logger_provider=logger_provider)
    log = logging.getLogger("checkout")
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    log.propagate = False

    with tracer.start_as_current_span("GET /cart", kind=SpanKind.SERVER) as parent:
        parent.set_attribute("http.method", "GET")
        parent.set_attribute("cart.items", 3)
        parent.set_attribute("cart.total", 12.5)
        parent.set_attribute("tags", ["a", "b"])
        parent.add_event("cache-miss", {"key": "cart:7"})
        log.warning("cart is slow", extra={"cart.id": 7})
        with tracer.start_as_current_span("load cart", kind=SpanKind.CLIENT) as child:
            child.set_status(Status(StatusCode.ERROR, "db timeout"))
        ctx = parent.get_span_context()
        trace_id = format(ctx.trace_id, "032x")
        parent_id = format(ctx.span_id, "016x")
        child_id = format(child.get_span_context().span_id, "016x")
    log.error("outside any span")

    tracer_provider.force_flush()
    logger_provider.force_flush()
    tracer_provider.shutdown()
    logger_provider.shutdown()
    print(
        json.dumps(
            {
                "trace_id": trace_id,
                "parent_span_id": parent_id,
                "child_span_id": child_id,
                "span_exports": spans.results,
                "log_exports": logs.results,
            }
        )
    )


if __name__ == "__main__":
    main()
