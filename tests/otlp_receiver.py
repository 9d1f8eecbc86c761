"""A tiny OTLP/HTTP collector for the tests: it takes ``POST /v1/traces`` and ``/v1/metrics``
(protobuf, optionally gzip) on 127.0.0.1 and decodes them with the official
``opentelemetry-proto`` messages, as a real collector would."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    kind: int
    attributes: dict[str, Any]
    status_code: int
    service: str

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass
class Received:
    spans: list[ReceivedSpan] = field(default_factory=list)
    #: every metric data point: (metric name, attributes, the point message)
    metrics: list[tuple[str, dict[str, Any], Any]] = field(default_factory=list)
    requests: int = 0

    def latest(self, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
        """The latest data point of metric ``name`` per attribute set (cumulative: the totals)."""
        return {tuple(sorted(a.items())): p for n, a, p in self.metrics if n == name}

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def children(self, parent: ReceivedSpan) -> list[ReceivedSpan]:
        return sorted(
            (s for s in self.spans if s.parent_id == parent.span_id and s.trace_id == parent.trace_id),
            key=lambda s: s.start_ns,
        )


def _decode_traces(body: bytes, into: Received) -> None:
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    for rs in req.resource_spans:
        resource = {a.key: value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                into.spans.append(
                    ReceivedSpan(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                        s.start_time_unix_nano, s.end_time_unix_nano, s.kind,
                        {a.key: value(a.value) for a in s.attributes}, s.status.code,
                        str(resource.get("service.name")),
                    )
                )  # fmt: skip


def _decode_metrics(body: bytes, into: Received) -> None:
    req = ExportMetricsServiceRequest()
    req.ParseFromString(body)
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                data = getattr(m, m.WhichOneof("data"))
                for p in data.data_points:
                    into.metrics.append((m.name, {a.key: value(a.value) for a in p.attributes}, p))


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """A collector on a free loopback port: yields its base URL (for
    ``OTEL_EXPORTER_OTLP_ENDPOINT``) and what it received so far."""
    received = Received()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with lock:
                received.requests += 1
                if self.path == "/v1/traces":
                    _decode_traces(body, received)
                    answer = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    _decode_metrics(body, received)
                    answer = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
