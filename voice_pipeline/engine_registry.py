"""Engines by name, one registry per stage: what ``<stage>.engine`` in the config may say.

Each stage package (:mod:`vad`, :mod:`asr`, :mod:`llm`, :mod:`tts`) registers its own
engines when imported, each as a factory that imports the engine's module only when
it is built. Anyone else registers one the same way before the engines are built (a
plugin, a test)::

    import tts
    tts.ENGINES.register("espeak", lambda cfg, voice_path: EspeakTTS(cfg))

and ``tts.engine: espeak`` in the config then builds it. A name nobody registered is a
:class:`~voice_pipeline.errors.ConfigError` naming the key and the registered names,
raised where the command line reads the config
(:func:`voice_pipeline.preflight.check_engines`) and again where an engine is built.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from voice_pipeline.errors import ConfigError, quote

F = TypeVar("F")


class EngineRegistry(Generic[F]):
    """One stage's engines: name -> factory (whose arguments the stage defines)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self._factories: dict[str, F] = {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._factories)

    def register(self, name: str, factory: F) -> None:
        if not name or name in self._factories:
            raise ValueError(f"{self.stage} engine {quote(name)}: empty or already registered")
        self._factories[name] = factory

    def unregister(self, name: str) -> None:
        self._factories.pop(name, None)

    def factory(self, name: str) -> F:
        found = self._factories.get(name)
        if found is None:
            known = ", ".join(repr(n) for n in self._factories)
            raise ConfigError(f"{self.stage}.engine: {quote(name)} is not a registered engine ({known})")
        return found
