"""What a client may ask of one reply beyond the config (typed, frozen, pure).

A realtime client's session and responses choose how replies are given
(:class:`ReplyOptions`: spoken or text only, a token limit) and may ask for a reply
with no user speech (:class:`ReplyRequest`, ``Session.respond``). How turns are
taken is :class:`voice_pipeline.turntaking.messages.TurnOptions`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from llm.base import ChatMessage, ToolOffer


@dataclass(frozen=True, slots=True)
class ReplyOptions:
    #: synthesize and play the reply; False = text only (no TTS, no audio)
    speak: bool = True
    #: stop the LLM after this many tokens (None = ``llm.max_tokens``, which caps it anyway)
    max_tokens: int | None = None
    #: the client's own tools the LLM may call in this reply (a realtime client's functions:
    #: the reply streams the calls as events, ``ToolCallStreamed``, ``ToolCallDone``, keeps them
    #: in ``Reply.tool_calls`` and ends with them). None: the session's server-side tools
    #: (``dialogue.tools``, run by the reply itself: voice_pipeline/tools/), if it has any
    tools: ToolOffer | None = None


@dataclass(frozen=True, slots=True)
class ReplyRequest:
    """A reply asked for directly, with no user speech (``Session.respond``)."""

    messages: tuple[ChatMessage, ...]
    options: ReplyOptions = field(default_factory=ReplyOptions)
    #: what it answers (the turn's record shows it as the user's words)
    user_text: str = ""
    #: enter the session's History when done (an out-of-band reply does not)
    remember: bool = True
    #: words it reads are still to come (user audio being transcribed): the request to make
    #: once they are in, awaited before the reply starts (None: this one, as it is)
    ready: Callable[[], Awaitable[ReplyRequest]] | None = None

    async def settled(self) -> ReplyRequest:
        """The request to make: this one, or the one :attr:`ready` gives once the words are in."""
        return self if self.ready is None else await self.ready()
