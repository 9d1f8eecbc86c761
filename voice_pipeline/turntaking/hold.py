"""Turns the client holds (pure): push-to-talk, and manual turn detection.

While push-to-talk is held (:meth:`~voice_pipeline.turntaking.machine.TurnMachine.ptt_pressed`),
or with :class:`~voice_pipeline.turntaking.messages.TurnOptions` ``detection`` MANUAL, the
client -- not the VAD -- starts and ends the user's turn. :class:`Hold` decides what
the VAD no longer can: when a held turn has lasted ``vad.max_turn_s`` -- it then ends anyway, once
(babble or a stuck key cannot hold the floor forever).
"""

from __future__ import annotations


class Hold:
    """The client's hold on the user's turn (one per session)."""

    def __init__(self) -> None:
        self.key_since_ns: int | None = None  # push-to-talk held since
        self.manual_since_ns: int | None = None  # the manual turn in progress began
        self.input_from = 0  # a manual turn starts no earlier than the last commit or clear
        self._ended = False  # the held turn reached vad.max_turn_s and was ended

    @property
    def key_down(self) -> bool:
        return self.key_since_ns is not None

    def press(self, now_ns: int) -> None:
        self.key_since_ns, self._ended = now_ns, False

    def release(self) -> None:
        self.key_since_ns = None

    def manual(self, since_ns: int) -> None:
        """A manual turn began at ``since_ns``."""
        self.manual_since_ns, self._ended = since_ns, False

    def overdue(self, since_ns: int | None, now_ns: int, max_turn_s: float) -> bool:
        """The held turn that began at ``since_ns`` has now lasted ``max_turn_s`` (0: no
        limit): true once, then not again until the next press or manual turn."""
        limit_ns = round(max_turn_s * 1e9)
        if since_ns is None or self._ended or limit_ns <= 0 or now_ns - since_ns < limit_ns:
            return False
        self._ended = True
        return True
