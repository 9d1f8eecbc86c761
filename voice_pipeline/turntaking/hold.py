"""Turns the client holds (pure): push-to-talk, and manual turn detection.

While push-to-talk is held (:meth:`~voice_pipeline.turntaking.machine.TurnMachine.ptt_pressed`),
or with :class:`~voice_pipeline.turntaking.messages.TurnOptions` ``detection`` MANUAL, the
client -- not the VAD -- starts and ends the user's turn. :class:`Hold` decides what
the VAD no longer can: where a push-to-talk or manual turn starts (no earlier than the client's last
commit or clear), whether the client's commit, clear or release ends the turn in
progress, and when a held turn has lasted ``vad.max_turn_s`` -- it then ends anyway, once
(babble or a stuck key cannot hold the floor forever).
"""

from __future__ import annotations

from collections.abc import Callable


class Hold:
    """The client's hold on the user's turn (one per session)."""

    def __init__(self, sample_rate_hz: int, time_of: Callable[[int], int]) -> None:
        """``time_of(sample)``: the monotonic time of an input sample."""
        self._rate = sample_rate_hz
        self._time_of = time_of
        self.key_since_ns: int | None = None  # push-to-talk held since
        self.manual_since_ns: int | None = None  # the manual turn in progress began
        self.input_from = 0  # a manual turn starts no earlier than the last commit or clear
        self._ended = False  # the held turn reached vad.max_turn_s and was ended

    @property
    def key_down(self) -> bool:
        return self.key_since_ns is not None

    def press(self, position: int, now_ns: int, pre_roll_ms: int) -> int:
        """Push-to-talk pressed at input sample ``position``: the first sample of the turn
        it starts (``pre_roll_ms`` before the press, as the VAD's turns begin)."""
        self.key_since_ns, self._ended = now_ns, False
        return max(0, position - pre_roll_ms * self._rate // 1000)

    def release(self) -> bool:
        """Push-to-talk released: true if it was held (the user's turn then ends)."""
        held = self.key_down
        self.key_since_ns = None
        return held

    def input_cut(self, position: int) -> bool:
        """The client committed or cleared its input at sample ``position``: true if that
        may end the user's turn in progress -- not while push-to-talk holds it."""
        self.input_from = position
        return not self.key_down

    def manual(self, frame_start: int) -> int:
        """A manual turn begins with the frame at sample ``frame_start``: its first sample
        (no earlier than the last commit or clear)."""
        start = max(frame_start, self.input_from)
        self.manual_since_ns, self._ended = self._time_of(start), False
        return start

    def overdue(self, since_ns: int | None, now_ns: int, max_turn_s: float) -> bool:
        """The held turn that began at ``since_ns`` has now lasted ``max_turn_s`` (0: no
        limit): true once, then not again until the next press or manual turn."""
        limit_ns = round(max_turn_s * 1e9)
        if since_ns is None or self._ended or limit_ns <= 0 or now_ns - since_ns < limit_ns:
            return False
        self._ended = True
        return True
