"""Applies ``VP_EMULATE_CPU`` in a process vLLM spawns, before vLLM is imported there.

:func:`voice_pipeline.emulation.engine_env` puts this directory first on ``PYTHONPATH`` of
vLLM's engine process (and of a remote ``api_server`` started with it), so Python imports
this file at start-up. It patches torch's CPU probes (see :mod:`voice_pipeline.emulation`),
then runs the ``sitecustomize`` this one shadows, if there is one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("VP_EMULATE_CPU"):
    from voice_pipeline.emulation import activate, patch_torch

    activate()
    patch_torch()
_chain()
