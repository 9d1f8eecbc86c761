"""The one error root of voice_pipeline and its hierarchy.

::

    VoicePipelineError                 everything this project raises on purpose
    ├── ConfigError                    bad config file / value (the user's to fix)
    ├── AudioInputError                unreadable, empty or malformed input audio
    ├── ModelError                     a model is missing, corrupt or failed to load
    │   └── MissingPackageError        a pip package is not installed (says which command fixes it)
    └── EngineError                    a stage failed at run time; ``retryable`` says whether
                                       trying again can help (e.g. a remote LLM dropped the stream)
"""

from __future__ import annotations


class VoicePipelineError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(VoicePipelineError):
    """The configuration is invalid. The message names the offending key."""


class AudioInputError(VoicePipelineError):
    """Input audio cannot be used (unreadable, empty, wrong shape)."""


class ModelError(VoicePipelineError):
    """A model file is missing, corrupt, or failed to load."""


class MissingPackageError(ModelError):
    """A required Python package is not installed."""

    def __init__(self, package: str, pip_args: str | None = None) -> None:
        self.package = package
        cmd = f".venv/bin/pip install {pip_args or package}"
        super().__init__(f"the package '{package}' is not installed; fix: {cmd}")


class EngineError(VoicePipelineError):
    """A stage failed while running. ``retryable`` tells callers whether a retry may help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
