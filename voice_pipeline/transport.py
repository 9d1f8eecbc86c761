"""What a session needs from whatever carries audio to and from the listener.

File mode (:mod:`voice_pipeline.runner`), the WebSocket server and the
telephony bridges implement this. Audio in is pushed by the transport into
:meth:`voice_pipeline.conversation.session.Session.push_audio`; audio and events out go
through the methods below.

Transports keep per-turn books (clears so far, positions, played counts); over a
call of hours those would grow by one entry a turn, so each keeps the latest
:data:`KEEP_TURNS` turns only (:func:`trim_turns`): a turn that old is long over.
"""

from __future__ import annotations

from collections.abc import MutableMapping, MutableSet
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.events import Event

#: per-turn bookkeeping a transport keeps: the latest turns only
KEEP_TURNS = 64


def trim_turns(book: MutableMapping[int, Any] | MutableSet[int], keep: int = KEEP_TURNS) -> None:
    """Forget the oldest turns of ``book`` (keyed by turn id) beyond the latest ``keep``."""
    while len(book) > keep:
        oldest = min(book)
        if isinstance(book, MutableSet):
            book.discard(oldest)
        else:
            del book[oldest]


class Transport(Protocol):
    #: rate of the reply audio this transport wants
    output_rate_hz: int

    def emit(self, event: Event) -> None:
        """Deliver an event. Must not block (queue it if sending is async)."""
        ...

    async def play(self, turn_id: int, pcm: NDArray[np.int16]) -> None:
        """Hand reply audio to the listener. May wait (pacing, backpressure)."""
        ...

    def clear(self, turn_id: int) -> None:
        """Barge-in: drop everything of ``turn_id`` not yet played, at once."""
        ...

    def played_samples(self, turn_id: int) -> int:
        """Output samples of ``turn_id`` the listener has actually played so far."""
        ...

    async def drain(self, turn_id: int) -> None:
        """Return once the listener has played all audio sent for ``turn_id``."""
        ...
