"""What a client steers on a session beyond the config (the realtime endpoint's needs),
driven by fakes on a fake clock: manual turns and commits, no automatic replies, replies
on demand with their own messages, text-only replies, token limits, client cancels, a
cleared input, barge-in off, and a session asking its own Context instead of the History;
and how a reply ends when it is cut off or starts to repeat itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from fakes import Driver, FakeClock, Fakes, RecordingTransport

from llm.base import ChatMessage
from voice_pipeline import events as ev
from voice_pipeline.config import Config
from voice_pipeline.conversation.history import History
from voice_pipeline.conversation.session import Session
from voice_pipeline.conversation.steering import ReplyOptions, ReplyRequest
from voice_pipeline.turntaking.messages import Detection, TurnOptions

REPLY = "Sure, the answer is forty two. It is the meaning of life and everything."
MANUAL = TurnOptions(Detection.MANUAL, auto_reply=False)


@dataclass(slots=True)
class H:
    clock: FakeClock
    fakes: Fakes
    transport: RecordingTransport
    session: Session
    driver: Driver
    cfg: Config

    def steer(self, options: TurnOptions, reply: ReplyOptions | None = None, **barge_in: bool) -> None:
        c = self.cfg
        barge = dataclasses.replace(c.barge_in, **barge_in)
        self.session.configure(c.vad, c.turn, barge, options, reply or ReplyOptions())


def harness(context: object | None = None) -> H:
    cfg = Config()
    cfg = dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, partial_interval_ms=0))
    fakes = Fakes()
    fakes.llm.reply = REPLY
    fakes.asr.text = "what is the answer"
    clock = FakeClock()
    transport = RecordingTransport(clock, output_rate_hz=fakes.tts.sample_rate_hz)
    session = Session(
        fakes.engines(),
        cfg,
        transport,
        clock=clock,
        sleep_until=clock.sleep_until,
        context=context,  # type: ignore[arg-type]
    )
    return H(clock, fakes, transport, session, Driver(session, clock, fakes), cfg)


@pytest.fixture
async def h() -> AsyncIterator[H]:
    harness_ = harness()
    yield harness_
    harness_.fakes.llm.release()
    await harness_.session.aclose()


async def test_manual_turns_end_at_the_commit_and_are_not_answered(h: H) -> None:
    h.steer(MANUAL)
    await h.driver.speak(0.5)
    await h.driver.quiet(1.5)  # silence ends nothing
    assert not h.transport.of(ev.EndpointDetected)
    h.session.commit()
    await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
    rec = h.transport.record(1)
    assert rec is not None and rec.user_text == "what is the answer"
    assert rec.end_of_turn is not None and rec.end_of_turn.rule == "commit"
    assert h.fakes.llm.requests == []  # kept for the client to answer
    assert h.session.history == [ChatMessage("user", "what is the answer")]
    await h.driver.quiet(0.1)  # the next turn began with the next input
    assert [e.turn_id for e in h.transport.of(ev.SpeechStarted)] == [1, 2]


async def test_a_reply_on_demand_is_asked_with_its_own_messages(h: H) -> None:
    messages = (ChatMessage("system", "Be brief."), ChatMessage("user", "Tell me a joke."))
    turn = h.session.respond(ReplyRequest(messages, user_text="Tell me a joke.", remember=False))
    await h.driver.quiet_until(lambda: h.transport.record(turn) is not None)
    assert h.fakes.llm.requests[0].messages == messages
    kinds = [type(e) for e in h.transport.events if getattr(e, "turn_id", None) == turn]
    assert kinds[0] is ev.ReplyStarted and ev.ReplyGenerated in kinds and kinds[-1] is ev.TurnCompleted
    rec = h.transport.record(turn)
    assert rec is not None and rec.user_text == "Tell me a joke." and rec.heard_text == REPLY
    assert h.session.history == []  # out of the History, as asked


async def test_a_text_only_reply_is_not_synthesized_and_counts_as_seen(h: H) -> None:
    turn = h.session.respond(ReplyRequest((ChatMessage("user", "hi"),), ReplyOptions(speak=False)))
    await h.driver.quiet_until(lambda: h.transport.record(turn) is not None)
    assert h.fakes.tts.texts == [] and turn not in h.transport.audio
    assert "".join(e.text for e in h.transport.of(ev.AssistantTextStreamed)) == REPLY
    rec = h.transport.record(turn)
    assert rec is not None and rec.heard_text == REPLY and not h.transport.of(ev.ClauseSynthesized)


async def test_automatic_text_only_replies_synthesize_nothing_ahead(h: H) -> None:
    """A session whose replies are text only (a realtime ``output_modalities: ["text"]``)
    still prepares its reply during the pause, but holds no audio: nothing is synthesized."""
    h.steer(TurnOptions(), ReplyOptions(speak=False))
    await h.driver.speak(0.5)
    await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
    rec = h.transport.record(1)
    assert rec is not None and rec.llm_prefetched and rec.assistant_text == REPLY
    assert rec.speculation is not None and (rec.speculation.prepared, rec.speculation.held) == (1, 0)
    assert "audio_held" not in rec.marks_ns
    assert h.fakes.tts.texts == [] and 1 not in h.transport.audio
    h.steer(TurnOptions(), ReplyOptions(speak=True))  # spoken again: held again
    h.fakes.asr.text = "and the question"
    await h.driver.quiet(3.0)
    await h.driver.speak(0.5)
    await h.driver.quiet_until(lambda: h.transport.record(2) is not None)
    rec2 = h.transport.record(2)
    assert rec2 is not None and rec2.speculation is not None and rec2.speculation.held == 1
    assert "audio_held" in rec2.marks_ns and h.fakes.tts.texts


async def test_a_reply_stops_at_its_token_limit(h: H) -> None:
    turn = h.session.respond(ReplyRequest((ChatMessage("user", "hi"),), ReplyOptions(max_tokens=3)))
    await h.driver.quiet_until(lambda: h.transport.record(turn) is not None)
    (generated,) = h.transport.of(ev.ReplyGenerated)
    assert generated.output_tokens == 3 and generated.token_limit
    assert h.fakes.llm.aborted  # the request did not run on
    assert h.fakes.llm.unfinished_requests() == 0


@pytest.mark.parametrize(
    ("max_tokens", "reply", "heard"),
    [
        (8, REPLY, "Sure, the answer is forty two."),  # "It is" was cut off: not said
        (6, REPLY, "Sure, the answer is forty two."),  # the limit on a sentence end: all of it
        (2, REPLY, "Sure,"),
        (2, "The answer is forty two.", "The answer"),  # nothing whole yet: rather than silence
    ],
)
async def test_a_reply_cut_at_its_token_limit_ends_at_its_last_whole_clause(
    h: H, max_tokens: int, reply: str, heard: str
) -> None:
    h.fakes.llm.reply = reply
    turn = h.session.respond(ReplyRequest((ChatMessage("user", "hi"),), ReplyOptions(max_tokens=max_tokens)))
    await h.driver.quiet_until(lambda: h.transport.record(turn) is not None)
    rec = h.transport.record(turn)
    assert rec is not None and rec.heard_text == heard
    assert h.transport.of(ev.ReplyGenerated)[0].token_limit


WEEK = "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday,"


async def test_a_reply_that_repeats_itself_stops_before_the_repeat(h: H) -> None:
    h.fakes.llm.reply = " ".join([WEEK] * 4)
    turn = h.session.respond(ReplyRequest((ChatMessage("user", "List the days of the week."),)))
    await h.driver.quiet_until(lambda: h.transport.record(turn) is not None)
    (generated,) = h.transport.of(ev.ReplyGenerated)
    assert generated.repeated and not generated.token_limit
    assert generated.output_tokens < 4 * 7  # it stopped generating
    assert h.fakes.llm.aborted and h.fakes.llm.unfinished_requests() == 0
    rec = h.transport.record(turn)
    assert rec is not None
    said = rec.heard_text.replace(",", "").split()
    assert said[:7] == WEEK.replace(",", "").split() and len(said) < 14, rec.heard_text


async def test_a_text_only_reply_that_repeats_itself_stops_too(h: H) -> None:
    """Its text is shown as it streams, so the clauses that show the loop are out already (18
    words of the 28 here); the rest of it, to the token limit, is not generated."""
    h.fakes.llm.reply = " ".join([WEEK] * 4)
    request = ReplyRequest((ChatMessage("user", "List the days of the week."),), ReplyOptions(speak=False))
    turn = h.session.respond(request)
    await h.driver.quiet_until(lambda: h.transport.record(turn) is not None)
    (generated,) = h.transport.of(ev.ReplyGenerated)
    assert generated.repeated and not generated.token_limit and generated.output_tokens < 3 * 7
    assert h.fakes.llm.aborted and h.fakes.llm.unfinished_requests() == 0
    shown = "".join(e.text for e in h.transport.of(ev.AssistantTextStreamed)).replace(",", "").split()
    assert shown[:7] == WEEK.replace(",", "").split() and len(shown) < 3 * 7, shown
    assert h.fakes.tts.texts == []


async def test_the_history_keeps_a_repeating_reply_as_it_was_spoken(h: H) -> None:
    h.fakes.llm.reply = " ".join([WEEK] * 4)
    await h.driver.speak(0.5)
    await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
    rec = h.transport.record(1)
    assert rec is not None and h.transport.of(ev.ReplyGenerated)[0].repeated
    said = rec.heard_text.replace(",", "").split()
    assert said[:7] == WEEK.replace(",", "").split() and len(said) < 14, rec.heard_text  # no week twice
    assert h.session.history == [
        ChatMessage("user", "what is the answer"),
        ChatMessage("assistant", rec.heard_text),
    ]


async def test_with_auto_replies_off_the_words_wait_for_the_client(h: H) -> None:
    h.steer(TurnOptions(auto_reply=False))
    await h.driver.speak(0.5)
    await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
    assert h.fakes.llm.requests == [] and h.transport.of(ev.TranscriptFinalized)
    assert h.session.history == [ChatMessage("user", "what is the answer")]


async def test_the_client_cancels_a_reply_that_plays(h: H) -> None:
    await h.driver.speak(0.5)
    await h.driver.quiet_until(lambda: bool(h.transport.audio.get(1)))
    h.session.cancel(1)
    await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
    (stopped,) = h.transport.of(ev.ReplyInterrupted)
    assert stopped.reason == "cancelled by the client"
    rec = h.transport.record(1)
    assert rec is not None and rec.interrupted and h.transport.clears(1)
    assert h.fakes.llm.unfinished_requests() == 0


async def test_a_cleared_input_drops_the_turn_in_progress(h: H) -> None:
    await h.driver.speak(0.4)
    assert h.transport.of(ev.SpeechStarted)
    h.session.clear_input()
    await h.driver.quiet(1.0)
    assert h.transport.record(1) is None and not h.transport.of(ev.EndpointDetected)
    await h.driver.speak(0.5)
    await h.driver.quiet_until(lambda: h.transport.record(2) is not None)
    assert h.transport.record(1) is None  # never answered, never recorded
    assert h.session.sizes()["turns_open"] == 0  # nothing of it is left behind


async def test_barge_in_off_lets_speech_over_the_reply_go_on(h: H) -> None:
    h.steer(TurnOptions(), enabled=False)
    await h.driver.speak(0.5)
    await h.driver.quiet_until(lambda: bool(h.transport.audio.get(1)))
    await h.driver.quiet(h.cfg.turn.continuation_grace_ms / 1000 + 0.2)  # past the continuation grace
    await h.driver.speak(0.3)
    assert not h.transport.of(ev.ReplyPaused) and not h.transport.clears(1)


async def test_a_session_asks_its_context_not_the_history() -> None:
    class Recording(History):
        def __init__(self) -> None:
            super().__init__("From the context.", 1024)
            self.asked: list[tuple[str, int | None]] = []

        def request(self, user_text: str, turn_id: int | None = None) -> list[ChatMessage]:
            self.asked.append((user_text, turn_id))
            return super().request(user_text, turn_id)

    ctx = Recording()
    h = harness(ctx)
    try:
        await h.driver.speak(0.5)
        await h.driver.quiet_until(lambda: h.transport.record(1) is not None)
        assert ("what is the answer", 1) in ctx.asked
        assert h.fakes.llm.requests[0].messages[0] == ChatMessage("system", "From the context.")
        assert h.session.history == []  # the session's own History was not used
    finally:
        h.fakes.llm.release()
        await h.session.aclose()
