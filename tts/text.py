"""Text made fit for speech (pure): what the TTS is given of the LLM's reply.

Cleaning: ``*`` and backticks are removed everywhere, emoji (pictographs,
dingbats, flags, variation selectors, joiners, keycaps) too; at the start of a
line, heading (``#``), quote (``>``) and list markers (``- ``, ``+ ``, ``• ``,
``* ``, ``1. ``, ``2) ``) are removed. Other characters are kept as they are.

:class:`StreamCleaner` cleans a stream of deltas as they arrive (what
:class:`tts.chunker.ClauseChunker` feeds it), :func:`clean_for_speech` a whole
text; :func:`strip_symbols` removes only the symbols (no line markers: what a TTS
engine does to the text it is given). :func:`is_speakable` says whether a text has
anything to say; :func:`normalize_space` collapses whitespace.
"""

from __future__ import annotations

import re

__all__ = [
    "StreamCleaner",
    "clean_for_speech",
    "is_speakable",
    "normalize_space",
    "strip_symbols",
]

_DROPPED_CHARS = frozenset("*`\u200d\ufe0e\ufe0f\u20e3")
#: inclusive code point ranges of emoji and pictographic symbols
_EMOJI_RANGES = (
    (0x1F000, 0x1FAFF),  # mahjong .. symbols & pictographs ext-A (incl. flags, skin tones)
    (0x2600, 0x27BF),  # misc symbols, dingbats
    (0x2300, 0x23FF),  # misc technical (watch, hourglass, ...)
    (0x2B00, 0x2BFF),  # arrows, stars
    (0xE0020, 0xE007F),  # tag characters (subdivision flags)
)
_LINE_MARKER = re.compile(r"[ \t]*(?:#{1,6}|>|[-+•]|\d{1,3}[.)])[ \t]")
_LINE_MARKER_PREFIX = re.compile(r"[ \t]*(?:#{0,6}|>|[-+•]|\d{1,3}[.)]?)")


def _keep_char(ch: str) -> bool:
    if ch in _DROPPED_CHARS:
        return False
    cp = ord(ch)
    return not any(lo <= cp <= hi for lo, hi in _EMOJI_RANGES)


def strip_symbols(text: str) -> str:
    """``text`` without ``*``, backticks and emoji (no line-marker handling)."""
    return "".join(ch for ch in text if _keep_char(ch))


def is_speakable(text: str) -> bool:
    """True if ``text`` has something to say (a letter or a digit)."""
    return any(ch.isalnum() for ch in text)


_SPACE_BEFORE_PUNCT = re.compile(r" (?=[.,!?;:…](?:\s|$))")


def normalize_space(text: str) -> str:
    """Collapse whitespace; drop a space left before punctuation (``fun 🎉!`` -> ``fun!``)."""
    return _SPACE_BEFORE_PUNCT.sub("", " ".join(text.split()))


class StreamCleaner:
    """Streaming markdown/emoji remover. Holds back only an ambiguous line start."""

    def __init__(self) -> None:
        self._at_line_start = True
        self._prefix = ""  # held-back start of the current line

    def feed(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            if not _keep_char(ch):
                continue
            if not self._at_line_start:
                out.append(ch)
                if ch == "\n":
                    self._at_line_start = True
                continue
            self._prefix += ch
            marker = _LINE_MARKER.match(self._prefix)
            if marker is not None:  # a whole marker: drop it
                self._prefix, self._at_line_start = "", False
            elif ch == "\n":  # blank or marker-less short line
                out.append(self._prefix)
                self._prefix = ""
            elif _LINE_MARKER_PREFIX.fullmatch(self._prefix) is None:  # not a marker
                out.append(self._prefix)
                self._prefix, self._at_line_start = "", False
        return "".join(out)

    def flush(self) -> str:
        rest, self._prefix, self._at_line_start = self._prefix, "", True
        return rest


def clean_for_speech(text: str) -> str:
    """``text`` without markdown markers and emoji, whitespace collapsed."""
    cleaner = StreamCleaner()
    return normalize_space(cleaner.feed(text) + cleaner.flush())
