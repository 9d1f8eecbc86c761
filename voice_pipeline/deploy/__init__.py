"""Deployment helpers: configuration text for what runs around ``voice-pipeline serve``.

* :mod:`voice_pipeline.deploy.nginx` renders an nginx configuration that balances
  WebSocket voice sessions over several workers (``python -m voice_pipeline.deploy.nginx``).

Pure text generation: nothing here starts, stops or contacts anything (docs/deployment.md).
"""
