"""OpenTelemetry's SDK, set up from :class:`~voice_pipeline.telemetry.config.TelemetrySettings`.

Imported only when telemetry is configured (:func:`voice_pipeline.telemetry.setup.start_telemetry`).
:class:`Telemetry` owns one tracer provider and one meter provider, this process's own (the
global ones are left alone). Spans go through a ``BatchSpanProcessor`` and metrics through a
``PeriodicExportingMetricReader``: both export from their own thread, so the event loop
only builds a turn's spans (from its record, after the turn) and queues them.

A collector that cannot be reached costs one warning (:class:`_Outage`; the SDK's own
exporter logs are quietened), never a turn; at exit :meth:`Telemetry.shutdown` waits at
most ``flush_timeout_s`` for the last batch, and gives up on a collector already known
to be down.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

from voice_pipeline.clock import now_ns
from voice_pipeline.config import BudgetConfig
from voice_pipeline.errors import ConfigError
from voice_pipeline.ledger.ledger import path_of
from voice_pipeline.ledger.records import StageName, TurnRecord
from voice_pipeline.telemetry.config import Signal, TelemetrySettings
from voice_pipeline.telemetry.spans import SpanSpec

if TYPE_CHECKING:
    from voice_pipeline.edge import SessionScope
    from voice_pipeline.transport import Transport

log = logging.getLogger("voice_pipeline.telemetry")

#: histogram buckets, seconds: those of the Prometheus histograms at /metrics (server/metrics.py)
BUCKETS_S = (0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.8, 1.0, 1.5, 2.5, 5.0, 10.0)
#: the SDK's exporters log every failed attempt; the one warning of an outage is ours
_QUIET_LOGGERS = ("opentelemetry.exporter.otlp",)


class _Ids(RandomIdGenerator):
    """Random ids, except the next span's when :attr:`next_span_id` is set (the LLM span
    takes the id its request's ``traceparent`` named). Spans are built on the loop's thread only."""

    def __init__(self) -> None:
        self.next_span_id: int | None = None

    def generate_span_id(self) -> int:
        span_id, self.next_span_id = self.next_span_id, None
        return span_id if span_id is not None else super().generate_span_id()


class _Outage:
    """Whether the collector is taking our batches; says so once per outage."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.down = False
        self._lock = threading.Lock()

    def result(self, ok: bool, what: str) -> None:
        with self._lock:
            if not ok and not self.down:
                self.down = True
                log.warning(
                    "telemetry: the collector at %s did not take the %s; the pipeline goes on "
                    "without it (said once until it answers again)", self.where, what,
                )  # fmt: skip
            elif ok and self.down:
                self.down = False
                log.info("telemetry: the collector at %s answers again", self.where)


class _QuietSpans(SpanExporter):
    def __init__(self, inner: SpanExporter, outage: _Outage) -> None:
        self._inner, self._outage, self._abandoned = inner, outage, False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._abandoned:
            return SpanExportResult.FAILURE
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter's bug must not reach the processor's thread loop
            result = SpanExportResult.FAILURE
        self._outage.result(result is SpanExportResult.SUCCESS, "spans")
        return result

    def abandon(self) -> None:
        """Export nothing more (the collector is down and we are leaving)."""
        self._abandoned = True
        self._inner.shutdown()

    def shutdown(self) -> None:
        if not self._abandoned:
            self._abandoned = True
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _QuietMetrics(MetricExporter):
    def __init__(self, inner: MetricExporter, outage: _Outage) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner, self._outage, self._abandoned = inner, outage, False

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self._abandoned:
            return MetricExportResult.FAILURE
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis)
        except Exception:
            result = MetricExportResult.FAILURE
        self._outage.result(result is MetricExportResult.SUCCESS, "metrics")
        return result

    def abandon(self) -> None:
        self._abandoned = True
        self._inner.shutdown()

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        if not self._abandoned:
            self._abandoned = True
            self._inner.shutdown()


def _missing(package: str, what: str) -> ConfigError:
    return ConfigError(f"{what} needs the Python package {package} (pip install 'voice-pipeline[otel]')")


def _span_exporter(signal: Signal) -> SpanExporter:
    if signal.exporter == "console":
        return ConsoleSpanExporter(out=sys.stderr)
    headers = dict(signal.headers)
    if signal.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
        except ImportError:
            raise _missing("opentelemetry-exporter-otlp-proto-grpc", "OTLP over gRPC") from None
        return Grpc(endpoint=signal.endpoint, headers=headers, timeout=signal.timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=signal.endpoint, headers=headers, timeout=signal.timeout_s)


def _metric_exporter(signal: Signal) -> MetricExporter:
    if signal.exporter == "console":
        return ConsoleMetricExporter(out=sys.stderr)
    headers = dict(signal.headers)
    if signal.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc
        except ImportError:
            raise _missing("opentelemetry-exporter-otlp-proto-grpc", "OTLP over gRPC") from None
        return Grpc(endpoint=signal.endpoint, headers=headers, timeout=signal.timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=signal.endpoint, headers=headers, timeout=signal.timeout_s)


class Telemetry:
    """This process's tracer and meter providers, and the turn metrics."""

    def __init__(
        self, settings: TelemetrySettings, budget: BudgetConfig, *, model: str | None = None
    ) -> None:
        self.settings = settings
        self.budget = budget
        self.model = model
        #: session clock (monotonic) -> the epoch time OpenTelemetry wants, fixed once
        self.offset_ns = time.time_ns() - now_ns()
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        where = settings.traces or settings.metrics
        self._outage = _Outage(where.endpoint if where is not None and where.exporter == "otlp" else "stderr")
        resource = Resource.create({"service.name": settings.service_name})
        self._ids = _Ids()
        self._spans: _QuietSpans | None = None
        self._metrics: _QuietMetrics | None = None
        self._tracer_provider: TracerProvider | None = None
        self._meter_provider: MeterProvider | None = None
        if settings.traces is not None:
            self._spans = _QuietSpans(_span_exporter(settings.traces), self._outage)
            self._tracer_provider = TracerProvider(
                resource=resource, id_generator=self._ids, shutdown_on_exit=False
            )
            self._tracer_provider.add_span_processor(BatchSpanProcessor(self._spans))
            self.tracer: trace.Tracer | None = self._tracer_provider.get_tracer("voice_pipeline")
        else:
            self.tracer = None
        if settings.metrics is not None:
            self._metrics = _QuietMetrics(_metric_exporter(settings.metrics), self._outage)
            reader = PeriodicExportingMetricReader(
                self._metrics, export_interval_millis=settings.metric_interval_ms
            )
            self._meter_provider = MeterProvider(
                resource=resource, metric_readers=[reader], shutdown_on_exit=False
            )
            meter = self._meter_provider.get_meter("voice_pipeline")
            buckets = list(BUCKETS_S)
            self._v2v = meter.create_histogram(
                "voice.voice_to_voice.duration", "s", "end of the user's speech -> first reply audio sent",
                explicit_bucket_boundaries_advisory=buckets,
            )  # fmt: skip
            self._stage = meter.create_histogram(
                "voice.stage.duration", "s", "each critical-path stage of a turn (attribute voice.stage)",
                explicit_bucket_boundaries_advisory=buckets,
            )  # fmt: skip
            self._asked = meter.create_histogram(
                "voice.asked_to_audio.duration", "s", "response.create -> its first reply audio sent",
                explicit_bucket_boundaries_advisory=buckets,
            )  # fmt: skip
            self._barge_in = meter.create_histogram(
                "voice.barge_in.stop.duration", "s", "onset of speech over a reply -> the listener flushed",
                explicit_bucket_boundaries_advisory=buckets,
            )  # fmt: skip
            self._turns = meter.create_counter(
                "voice.turns", "{turn}", "finished turns, by the rule that ended the user's turn"
            )
        self._closed = False

    # ------------------------------------------------------------ per session

    def observe(self, transport: Transport, scope: SessionScope) -> Transport:
        """Trace the session ``scope`` opens on ``transport``: its span starts now and ends
        when the scope closes; the transport returned passes every event on, and each
        finished turn's record is turned into spans and metrics."""
        from voice_pipeline.telemetry.session import SessionTrace, TracedTransport

        session = SessionTrace(self, scope.session_id, scope.label)
        scope.close_after(session.aclose)
        return TracedTransport(transport, session)

    # ------------------------------------------------------------ per turn

    def export(self, spec: SpanSpec, parent: Context, extra: dict[str, Any]) -> None:
        """Start and end the spans of ``spec`` (session-clock times) under ``parent``."""
        if self.tracer is None or self._closed:
            return
        self._ids.next_span_id = spec.span_id
        span = self.tracer.start_span(
            spec.name,
            context=parent,
            kind=SpanKind.CLIENT if spec.client else SpanKind.INTERNAL,
            attributes={**spec.attributes, **extra},
            start_time=spec.start_ns + self.offset_ns,
        )
        self._ids.next_span_id = None
        if spec.error is not None:
            span.set_status(Status(StatusCode.ERROR, spec.error))
        inside = trace.set_span_in_context(span, parent)
        for child in spec.children:
            self.export(child, inside, {})
        span.end(end_time=spec.end_ns + self.offset_ns)

    def measure(self, record: TurnRecord) -> None:
        """The turn's figures into the histograms and the counter."""
        if self._meter_provider is None or self._closed:
            return
        stages = record.stages_ms
        if StageName.VOICE_TO_VOICE in stages:
            self._v2v.record(stages[StageName.VOICE_TO_VOICE] / 1000)
        if StageName.ASKED_TO_AUDIO in stages:
            self._asked.record(stages[StageName.ASKED_TO_AUDIO] / 1000)
        for stage in path_of(record.marks_ns):  # the tool path's stages, or an asked reply's
            if stage.name in stages:
                self._stage.record(stages[stage.name] / 1000, {"voice.stage": str(stage.name)})
        if StageName.BARGE_IN_STOP in stages:
            self._barge_in.record(stages[StageName.BARGE_IN_STOP] / 1000)
        rule = "none" if record.end_of_turn is None else str(record.end_of_turn.rule)
        self._turns.add(1, {"voice.end_of_turn.rule": rule})

    # ------------------------------------------------------------ the end

    def shutdown(self) -> None:
        """Flush what is queued (at most ``flush_timeout_s``), then stop. Blocking: call it
        from a thread (:func:`asyncio.to_thread`). Idempotent."""
        if self._closed:
            return
        self._closed = True
        ms = int(self.settings.flush_timeout_s * 1000)
        flushed = True
        if self._tracer_provider is not None:
            flushed = self._tracer_provider.force_flush(ms) and flushed
        if self._meter_provider is not None:
            flushed = self._meter_provider.force_flush(ms) and flushed
        if not flushed or self._outage.down:  # do not wait on a collector that is not there
            for exporter in (self._spans, self._metrics):
                if exporter is not None:
                    exporter.abandon()
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
        if self._meter_provider is not None:
            self._meter_provider.shutdown(timeout_millis=ms)
