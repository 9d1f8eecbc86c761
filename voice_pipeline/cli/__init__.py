"""The ``voice-pipeline`` command. Every user-facing job is a subcommand, each in its own module
that adds its argparse sub-parser (``add_parser``) and runs it (``cmd_<name>``):

  models   :mod:`voice_pipeline.cli.models`  prepare and verify the bundled models
  run      :mod:`voice_pipeline.cli.run`     stream a WAV file through the pipeline
  serve    :mod:`voice_pipeline.cli.serve`   the WebSocket server with its demo page
  talk     :mod:`voice_pipeline.cli.talk`    push-to-talk client of a running server
  bench    :mod:`voice_pipeline.cli.bench`   load-test a running server
  doctor   :mod:`voice_pipeline.cli.doctor`  this machine, its settings, an LLM micro-benchmark

:mod:`voice_pipeline.cli.app` builds the top-level parser from them and holds :func:`main`
(the ``voice-pipeline`` console script, and ``python -m voice_pipeline.cli``);
:mod:`voice_pipeline.cli.common` holds what they share (the config flags, progress on stderr).
"""

from voice_pipeline.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
