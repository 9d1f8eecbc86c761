"""OpenTelemetry traces and metrics of every turn, built from the latency ledger's own marks.

Optional: nothing here imports OpenTelemetry until :func:`~voice_pipeline.telemetry.setup.start_telemetry`
finds it configured (the ``OTEL_*`` variables, the ``telemetry:`` config section). The pieces:

* :mod:`~voice_pipeline.telemetry.config` -- the ``telemetry:`` section and the environment, resolved (pure);
* :mod:`~voice_pipeline.telemetry.spans` -- a finished turn's record as a tree of spans (pure);
* :mod:`~voice_pipeline.telemetry.context` -- the session's trace id for the LLM client's ``traceparent``;
* :mod:`~voice_pipeline.telemetry.export` -- the SDK's providers, exporters and the turn metrics;
* :mod:`~voice_pipeline.telemetry.session` -- one session's span, and the transport that shows its events.

Wiring: :meth:`voice_pipeline.engines.Engines.load` starts it (``run`` and ``serve``), every
:class:`~voice_pipeline.edge.SessionScope` traces the session it opens, and
:meth:`~voice_pipeline.engines.Engines.aclose` flushes it. docs/observability.md tells the rest.

This package's ``__init__`` imports nothing (``voice_pipeline.config`` imports its config module).
"""
