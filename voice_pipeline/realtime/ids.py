"""Fresh ids for one Realtime session: ``<kind>_<session tag>_<n>`` (e.g. ``item_3fa2c1d09b7e_12``).

The tag is random per session (so ids differ across sessions and reconnects);
tests pass a fixed tag to get predictable ids. At most 32 characters, like
OpenAI's own ids.
"""

from __future__ import annotations

import enum
import itertools
import secrets


class IdKind(enum.StrEnum):
    EVENT = "event"
    ITEM = "item"
    RESPONSE = "resp"
    CALL = "call"
    SESSION = "sess"
    CONVERSATION = "conv"


class Ids:
    def __init__(self, tag: str | None = None) -> None:
        self.tag = secrets.token_hex(6) if tag is None else tag
        self._counter = itertools.count(1)

    def new(self, kind: IdKind) -> str:
        return f"{kind}_{self.tag}_{next(self._counter)}"
