"""``python -m voice_pipeline.cli``: the same as the ``voice-pipeline`` command."""

import sys

from voice_pipeline.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
