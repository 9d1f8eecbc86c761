"""The one error root of voice_pipeline and its whole hierarchy.

Every exception this project raises on purpose derives from :class:`VoicePipelineError`.
The tree, with where each class lives (the protocol and client errors stay beside the
code that raises them; this module holds the root and the shared bases)::

    VoicePipelineError                  everything this project raises on purpose
    ├── ConfigError                     bad config file / value (the user's to fix)
    ├── AudioInputError                 unreadable, empty or malformed input audio
    ├── ModelError                      a model is missing, corrupt or failed to load
    │   └── MissingPackageError         a pip package is not installed (says which command fixes it)
    ├── EngineError                     a stage failed at run time; ``retryable`` says whether
    │   │                               trying again can help (e.g. a remote LLM dropped the stream)
    │   └── ClosedError                 used after ``close()``/``aclose()`` (we closed it; never
    │                                   retryable): engines, transcribers, sessions
    ├── RemoteProtocolError             the peer sent something this side cannot use: a client
    │   │                               error, answered in the protocol's own way, never a crash
    │   ├── ClientMessageError          /ws, a client's message (wire/client_messages.py; ``code`` =
    │   │                               the wire error code)
    │   ├── ServerMessageError          /ws, a server's message a client cannot use
    │   │                               (wire/server_messages.py)
    │   ├── TwilioMessageError          Twilio Media Streams (telephony/twilio.py)
    │   ├── AudioSocketError            Asterisk AudioSocket (telephony/audiosocket.py)
    │   └── RealtimeClientError         OpenAI Realtime (realtime/errors.py; ``error`` = its shape)
    ├── LocalProtocolError              this side asked for something the state forbids: a bug,
    │   │                               not bad input (h11's distinction)
    │   ├── TurnStateError              a turn transition not in the table (turnstate.py)
    │   └── ResponseSequenceError       a Realtime response event out of order (realtime/response.py)
    ├── ServerSessionError              a client's connection to a server (connect.py: talk and
    │   │                               bench; ``code``, ``retryable``); itself: not a WebSocket URL
    │   ├── ServerUnreachableError      nothing answers at the URL
    │   ├── SessionRefusedError         the server refused the connection or the session (``code``)
    │   └── SessionDroppedError         a running session's connection closed (talk reconnects)
    ├── BenchError                      ``voice-pipeline bench`` cannot go on (bench/errors.py)
    │   └── ArgumentsError              bad command-line arguments (bench/cli.py)
    ├── TalkError                       ``voice-pipeline talk`` cannot go on (clients/talk_options.py)
    │   └── ServerFailedError           the server reported a failure that ends the session
    └── AudioDeviceError                no usable microphone or speaker (clients/audio_io.py)
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


class ClosedError(EngineError):
    """Something was used after it was closed (by us: trio's ClosedResourceError). Never retryable."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is closed", retryable=False)


class RemoteProtocolError(VoicePipelineError):
    """The peer (a client, Twilio, Asterisk) sent something that cannot be used."""


class LocalProtocolError(VoicePipelineError):
    """This side tried something its own state machine forbids: a bug, not bad input."""


#: the longest excerpt of a client's value quoted back in an error
QUOTE_CHARS = 60


def quote(value: object) -> str:
    """``repr(value)``, cut short: an error never echoes a megabyte back to the client."""
    try:
        text = repr(value)
    except RecursionError:  # nested deeper than repr goes
        text = type(value).__name__
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."
