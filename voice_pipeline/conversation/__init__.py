"""One conversation at runtime: the thin asyncio adapters that carry out the turn machine's decisions.

:mod:`~voice_pipeline.conversation.session` wires VAD -> ASR -> LLM -> TTS for one
listener and executes the commands of :mod:`voice_pipeline.turntaking`; its input side
is :mod:`~voice_pipeline.conversation.listening` (VAD, echo check), the turns it has
open :mod:`~voice_pipeline.conversation.open_turns`, the owner of its tasks
:mod:`~voice_pipeline.conversation.tasks`. The session alone holds the whole config and
engines; :mod:`~voice_pipeline.conversation.wiring` cuts out what each part below receives.
A :mod:`~voice_pipeline.conversation.turn` is one user turn and its reply: the
user's side (:mod:`~voice_pipeline.conversation.utterance`: transcripts, the evidence
of each pause, the LLM prefetch) and the assistant's
(:mod:`~voice_pipeline.conversation.reply`: LLM -> clauses -> TTS, sent by a
:mod:`~voice_pipeline.conversation.speaker` that can pause and resume at a sample;
:mod:`~voice_pipeline.conversation.phrases`: the filler and the apology, synthesized once).
:mod:`~voice_pipeline.conversation.speculation` prepares a reply during a pause and
holds it; :mod:`~voice_pipeline.conversation.history` decides what the LLM remembers,
:mod:`~voice_pipeline.conversation.heard` what the listener actually heard.

Nothing here knows a transport's protocol: an edge (``/ws``, a phone bridge, the
file runner) hands the session a :class:`~voice_pipeline.transport.Transport`
and listens to its :mod:`~voice_pipeline.events`.
"""
