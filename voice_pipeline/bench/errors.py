"""The bench's own error, under the project's one root::

VoicePipelineError
├── BenchError                  the bench cannot go on (printed, never a traceback)
│   └── ArgumentsError          bad command-line arguments (bench/cli.py)
└── ServerSessionError          the connection (voice_pipeline/connect.py), shared with talk:
    ├── ServerUnreachableError  nothing answers at the URL (connection refused, DNS, timeout)
    ├── SessionRefusedError     the server refused a session: ``code`` 1013 (session
    │                           limit), 1008 (origin / token), or an HTTP status (401, 403, 404)
    └── SessionDroppedError     the server closed a session in the middle of the run
"""

from __future__ import annotations

from voice_pipeline.errors import VoicePipelineError


class BenchError(VoicePipelineError):
    """The bench cannot go on."""
