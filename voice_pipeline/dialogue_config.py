"""The ``dialogue`` section of the config: what the assistant says, how a reply is started,
and the server-side tools it may call (re-exported by :mod:`voice_pipeline.config`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from voice_pipeline.errors import ConfigError

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Answer in one or two short spoken sentences. "
    "Do not use lists, markdown or emojis."
)


@dataclass(frozen=True, slots=True)
class DialogueConfig:
    """What the assistant says and how a reply is started: the conversation's policy, apart
    from the LLM engine that runs it (``llm``)."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    #: spoken (and kept out of the history) when the ASR, LLM or TTS fails or stalls during a
    #: turn; "" = silent (the turn.failed event is sent either way)
    apology: str = "Sorry, I can't answer that right now."
    #: each request (system prompt + past turns + the new user message) is cut to about this
    #: many tokens, and the session keeps no more history than fits: oldest whole turns are
    #: dropped first; the system prompt and the new user message always stay (tokens are
    #: estimated, see voice_pipeline.conversation.history.estimate_tokens)
    history_max_tokens: int = 1024
    #: if the first clause of the reply is not ready this long after the end of the user's
    #: speech, speak ``filler_text`` first (0 = off); the ledger records it apart
    #: (``filler_ms``), voice_to_voice still ends at the reply's own first audio
    filler_after_ms: int = 0
    filler_text: str = "Hmm, let me think."
    #: a reply stops before it says again a run of this many words it already said, or a
    #: sentence of 4 or more (a small model's loop: voice_pipeline/conversation/repetition.py);
    #: 0 = never
    repeat_stop_words: int = 7
    #: start the LLM on the speculative transcript while the end-of-turn silence runs;
    #: used if the final transcript is the same, aborted if the user goes on speaking
    speculative_start: bool = True
    #: ... and synthesize the speculative reply's first chunk too, held until the endpoint
    #: (sent at once if the reply is used, dropped unsent if not: voice_pipeline/conversation/speculation.py)
    speculative_audio: bool = True
    #: speculative replies running at once over all sessions (0 = one per two cores): beyond
    #: it a pause is not speculated on, so that speculation never starves real replies
    speculative_limit: int = 0
    #: while the user speaks, keep the system prompt, the history and the committed words
    #: in the LLM's prefix cache (one-token prefill requests, llm/prefill.py), so the reply's
    #: request prefills only its last tokens
    prefill_ahead: bool = True

    #: server-side tools the LLM may call on /ws, the phone bridges and ``run``: Python
    #: callables as ``package.module:function`` (voice_pipeline/tools/registry.py builds each
    #: one's JSON schema from its type hints and docstring, or takes ``@tool(schema=...)``)
    tools: tuple[str, ...] = ()
    #: how the model may use them: "auto" = it chooses between words and calls (needs a model
    #: that can call tools); "required" = every reply's first round calls one (vLLM structured
    #: outputs: any model, the default SmolLM2 too); the round after the results is words only
    tool_choice: Literal["auto", "required"] = "auto"
    #: a call taking longer is stopped; the LLM is told it timed out (a tool's own
    #: ``@tool(timeout_s=...)`` wins)
    tool_timeout_s: float = 10.0
    #: a call still running this long after it started: ``tool_filler_text`` is spoken (0 = never)
    tool_filler_after_ms: int = 700
    tool_filler_text: str = "One moment, let me check."
    #: rounds of calls in one reply (the LLM is asked again after each); the last round
    #: is offered no tools, so a reply always ends in words
    tool_max_rounds: int = 3


def validate_dialogue(d: DialogueConfig) -> None:
    if d.history_max_tokens < 64 or min(d.filler_after_ms, d.speculative_limit, d.repeat_stop_words) < 0:
        raise ConfigError(
            "dialogue: need history_max_tokens >= 64; filler_after_ms, speculative_limit and "
            "repeat_stop_words >= 0"
        )
    if d.tool_timeout_s <= 0 or d.tool_filler_after_ms < 0 or d.tool_max_rounds < 1:
        raise ConfigError("dialogue: need tool_timeout_s > 0, tool_filler_after_ms >= 0 tool_max_rounds >= 1")
    for entry in d.tools:
        module, sep, name = entry.partition(":")
        if not (sep and module.strip() and name.strip()):
            raise ConfigError(f"dialogue.tools: {entry!r} is not 'package.module:function'")
