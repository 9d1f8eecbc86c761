"""Whether this process exports telemetry, decided once where the engines are loaded."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from voice_pipeline.config import Config
from voice_pipeline.telemetry.config import resolve

if TYPE_CHECKING:
    from voice_pipeline.telemetry.export import Telemetry


def model_name(cfg: Config) -> str:
    """What ``gen_ai.request.model`` says: the remote model asked for, else the model folder's name."""
    if cfg.llm.engine == "remote" and cfg.llm.remote_model:
        return cfg.llm.remote_model
    if cfg.llm.model_path:
        return Path(cfg.llm.model_path).name
    return "smollm2-135m-instruct" if cfg.llm.model == "smollm2" else cfg.llm.model


def start_telemetry(cfg: Config, environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """The process's :class:`~voice_pipeline.telemetry.export.Telemetry` if ``cfg.telemetry``
    and the ``OTEL_*`` variables of ``environ`` (default: the process's) configure one; else
    None, and nothing of OpenTelemetry is imported. ConfigError: a bad variable, or the
    ``otel`` extra is not installed."""
    settings = resolve(cfg.telemetry, os.environ if environ is None else environ)
    if settings is None:
        return None
    try:
        from voice_pipeline.telemetry.export import Telemetry
    except ImportError as exc:
        from voice_pipeline.errors import ConfigError

        missing = f"telemetry is configured but OpenTelemetry is missing ({exc.name})"
        raise ConfigError(f"{missing}: pip install 'voice-pipeline[otel]'") from None
    return Telemetry(settings, cfg.budget, model=model_name(cfg))
