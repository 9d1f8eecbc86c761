"""The ``telemetry:`` config section and the standard ``OTEL_*`` environment, resolved (pure).

Where spans and metrics go is the environment's to say, with OpenTelemetry's own
variables: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and the per-signal ``..._TRACES_ENDPOINT`` /
``..._METRICS_ENDPOINT``), ``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_EXPORTER_OTLP_TIMEOUT``, ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_EXPORTER``,
``OTEL_METRICS_EXPORTER``, ``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_SDK_DISABLED``. The
``telemetry:`` section says what the environment cannot: whether transcripts and reply
text may leave the process (``include_text``), whether to export at all without an
endpoint in the environment (``enabled``), and how long the exit may wait for the last
batch (``flush_timeout_s``).

:func:`resolve` turns both into :class:`TelemetrySettings`, or None: nothing is
configured, so nothing of OpenTelemetry is imported and nothing exported. It reads no
file and imports nothing but the standard library (``voice_pipeline.config`` imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from voice_pipeline.errors import ConfigError

DEFAULT_SERVICE_NAME = "voice-pipeline"
#: OpenTelemetry's default OTLP/HTTP collector address
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"
#: OpenTelemetry's default export timeout, seconds (the Python SDK reads the variable as seconds)
DEFAULT_TIMEOUT_S = 10.0
#: OpenTelemetry's default metric export interval
DEFAULT_METRIC_INTERVAL_MS = 60_000

Exporter = Literal["otlp", "console"]
Protocol = Literal["http/protobuf", "grpc"]


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """The ``telemetry:`` section."""

    #: None: export when the environment names a collector or an exporter (OTEL_EXPORTER_OTLP_*
    #: _ENDPOINT, OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER); true: export even without one
    #: (to OpenTelemetry's default, localhost:4318); false: never
    enabled: bool | None = None
    #: put transcripts and reply text on spans (keys ``voice.content.*`` and
    #: ``gen_ai.input.messages`` / ``gen_ai.output.messages``); off by default
    include_text: bool = False
    #: at exit (``run`` done, ``serve`` stopped) wait at most this long for the last batch
    flush_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.flush_timeout_s <= 0:
            raise ConfigError("telemetry.flush_timeout_s: must be > 0")


@dataclass(frozen=True, slots=True)
class Signal:
    """Where one signal (traces or metrics) goes."""

    exporter: Exporter
    protocol: Protocol
    #: the full URL for OTLP/HTTP (``.../v1/traces``), host:port URL for gRPC
    endpoint: str
    headers: tuple[tuple[str, str], ...]
    timeout_s: float


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    service_name: str
    traces: Signal | None
    metrics: Signal | None
    metric_interval_ms: int
    include_text: bool
    flush_timeout_s: float


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() == "true"


def _exporter(environ: Mapping[str, str], name: str) -> Exporter | None:
    raw = environ.get(name, "otlp").strip().lower() or "otlp"
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if values == ["none"]:
        return None
    if len(values) != 1 or values[0] not in ("otlp", "console"):
        raise ConfigError(f"{name}: {raw!r} is not supported (otlp, console or none)")
    return "otlp" if values[0] == "otlp" else "console"


def _headers(raw: str, name: str) -> tuple[tuple[str, str], ...]:
    from urllib.parse import unquote

    out = []
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{name}: {item.strip()!r} is not key=value")
        out.append((unquote(key.strip()).lower(), unquote(value.strip())))
    return tuple(out)


def _signal(environ: Mapping[str, str], kind: Literal["traces", "metrics"], exporter: Exporter) -> Signal:
    upper = kind.upper()

    def env(key: str) -> tuple[str, str] | None:
        for name in (f"OTEL_EXPORTER_OTLP_{upper}_{key}", f"OTEL_EXPORTER_OTLP_{key}"):
            value = environ.get(name, "").strip()
            if value:
                return name, value
        return None

    protocol_var = env("PROTOCOL")
    protocol = "http/protobuf" if protocol_var is None else protocol_var[1]
    if protocol not in ("http/protobuf", "grpc"):
        assert protocol_var is not None
        raise ConfigError(f"{protocol_var[0]}: {protocol!r} is not supported (http/protobuf or grpc)")
    own = environ.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "").strip()
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if protocol == "grpc":
        endpoint = own or base or DEFAULT_GRPC_ENDPOINT
    else:  # the per-signal URL is used as it is; the base one gets the signal's path
        endpoint = own or f"{(base or DEFAULT_HTTP_ENDPOINT).rstrip('/')}/v1/{kind}"
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"OTEL_EXPORTER_OTLP_ENDPOINT: {endpoint!r} is not an http:// or https:// URL")
    timeout_var = env("TIMEOUT")
    timeout_s = DEFAULT_TIMEOUT_S
    if timeout_var is not None:
        try:
            timeout_s = float(timeout_var[1])
        except ValueError:
            raise ConfigError(f"{timeout_var[0]}: {timeout_var[1]!r} is not a number of seconds") from None
        if timeout_s <= 0:
            raise ConfigError(f"{timeout_var[0]}: must be > 0")
    headers_var = env("HEADERS")
    headers = () if headers_var is None else _headers(headers_var[1], headers_var[0])
    return Signal(exporter, protocol, endpoint, headers, timeout_s)  # type: ignore[arg-type]


#: variables whose presence turns exporting on (with ``telemetry.enabled`` unset)
TRIGGERS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
)


def resolve(cfg: TelemetryConfig, environ: Mapping[str, str]) -> TelemetrySettings | None:
    """What to export and where; None: nothing (no collector named, ``enabled: false``,
    ``OTEL_SDK_DISABLED=true``, or both exporters ``none``). ConfigError for a bad variable."""
    if cfg.enabled is False or _flag(environ, "OTEL_SDK_DISABLED"):
        return None
    if cfg.enabled is None and not any(environ.get(name, "").strip() for name in TRIGGERS):
        return None
    traces = _exporter(environ, "OTEL_TRACES_EXPORTER")
    metrics = _exporter(environ, "OTEL_METRICS_EXPORTER")
    if traces is None and metrics is None:
        return None
    interval_raw = environ.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    interval = DEFAULT_METRIC_INTERVAL_MS
    if interval_raw:
        if not interval_raw.isdigit() or int(interval_raw) < 1:
            raise ConfigError(f"OTEL_METRIC_EXPORT_INTERVAL: {interval_raw!r} is not a positive number of ms")
        interval = int(interval_raw)
    return TelemetrySettings(
        service_name=environ.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME,
        traces=None if traces is None else _signal(environ, "traces", traces),
        metrics=None if metrics is None else _signal(environ, "metrics", metrics),
        metric_interval_ms=interval,
        include_text=cfg.include_text,
        flush_timeout_s=cfg.flush_timeout_s,
    )
