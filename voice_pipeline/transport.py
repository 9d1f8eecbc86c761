"""What a session needs from whatever carries audio to and from the listener.

File mode (:mod:`voice_pipeline.runner`), the WebSocket server and the
telephony bridges implement this. Audio in is pushed by the transport into
:meth:`voice_pipeline.session.Session.push_audio`; audio and events out go
through the methods below.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from voice_pipeline.events import Event


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
