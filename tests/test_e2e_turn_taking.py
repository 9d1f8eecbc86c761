"""Turn-taking end to end with the real models, on speech that pauses mid-sentence.

Each sentence is spoken with pauses of 0.4-1.2 s between its phrases
(:mod:`voice_pipeline.bench.paused`: synthesized whole, the comma gaps stretched), in
several voices (espeak-ng's, and Piper's), at several levels, one over a noise floor;
each goes through Silero, Whisper, Smart Turn, vLLM and Piper in its own session, in
real time. What a user would check: the sentence is one turn, transcribed whole and
answered once; no reply talks over the pauses (beyond the continuation grace);
complete questions are still answered, and their voice-to-voice is printed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pytest
from speech import espeak, heard_whole, normalize, piper_speech

from vad.end_of_turn import Rule
from voice_pipeline.bench.paused import (
    COMPLETE_QUESTIONS,
    FILLERS,
    PAUSED_SENTENCES,
    PausedSpeech,
    degrade,
    paused_clip,
    reply_heard_in_pauses,
)
from voice_pipeline.conversation import clause_audio
from voice_pipeline.conversation import reply as reply_module
from voice_pipeline.conversation import utterance as utterance_module
from voice_pipeline.conversation.clause_audio import ClauseAudio
from voice_pipeline.engines import Engines
from voice_pipeline.runner import RunResult, run_audio
from voice_pipeline.turntaking.ending import HESITATION_MIN_MS, Continuation
from voice_pipeline.turntaking.phases import Phase, TurnState

if TYPE_CHECKING:
    from tts.base import TTS
    from voice_pipeline.config import Config

pytestmark = pytest.mark.real_models

RATE = 16000
LEAD_S = 0.5


@dataclass(frozen=True)
class Spoken:
    sentence: int  # index into PAUSED_SENTENCES
    voice: str  # an espeak-ng voice, or "piper"
    pause_s: float
    gain_db: float = 0.0
    noise_dbfs: float | None = None


SET = (
    Spoken(0, "en-us+f3", 1.2),
    Spoken(1, "en-us+m3", 0.8, gain_db=-10),
    Spoken(2, "en-gb+m1", 1.0, noise_dbfs=-55),
    Spoken(3, "en-us+f3", 0.6, gain_db=-6),
    Spoken(4, "en-us+m3", 1.2),
    Spoken(5, "en-gb+m1", 0.5),
    Spoken(0, "piper", 0.9),
    Spoken(1, "piper", 0.4),
)


@dataclass
class Outcome:
    spoken: Spoken
    clip: PausedSpeech
    result: RunResult

    @property
    def turns(self) -> list[object]:
        return [r for r in self.result.records if r.user_text or r.assistant_text]


def synth_for(voice: str, piper: TTS):  # type: ignore[no-untyped-def]
    if voice != "piper":
        return lambda text: espeak(text, voice=voice)
    return lambda text: piper_speech(piper, text)


async def speak(engines: Engines, config: Config, audio: np.ndarray) -> RunResult:
    padded = np.concatenate([np.zeros(round(LEAD_S * RATE), np.float32), audio, np.zeros(RATE, np.float32)])
    return await asyncio.wait_for(run_audio(engines, config, padded, RATE, realtime=True), timeout=120)


@pytest.fixture(scope="module")
async def paused(engines: Engines, config: Config, piper: TTS) -> list[Outcome]:
    out = []
    for spoken in SET:
        phrases = PAUSED_SENTENCES[spoken.sentence]
        clip = paused_clip(
            synth_for(spoken.voice, piper), phrases, [spoken.pause_s] * (len(phrases) - 1), RATE
        )
        audio = degrade(clip.samples, gain_db=spoken.gain_db, noise_dbfs=spoken.noise_dbfs)
        out.append(Outcome(spoken, clip, await speak(engines, config, audio)))
    return out


def describe(o: Outcome) -> str:
    turns = [(r.user_text, r.assistant_text[:30], r.continuations) for r in o.result.records]  # type: ignore[attr-defined]
    return f"{o.spoken}: {turns}"


def test_each_paused_sentence_is_one_turn_answered_once(paused: list[Outcome]) -> None:
    for o in paused:
        assert len(o.turns) == 1, describe(o)
        rec = o.result.records[-1]
        assert rec.assistant_text and not rec.interrupted, describe(o)
        # one user message: no fragment entered the history
        users = [m for m in o.result.history if m.role == "user"]
        assert [m.content for m in users] == [rec.user_text], describe(o)


NUMBERS = {"4": "four", "7": "seven", "2": "two", "3": "three", "1": "one", "10": "ten"}


def words(text: str) -> list[str]:
    """Words as a listener would compare them: numerals spelled out, fillers dropped."""
    return [NUMBERS.get(w, w) for w in normalize(text).split() if w not in FILLERS]


def test_each_paused_sentence_is_transcribed_whole(paused: list[Outcome]) -> None:
    """Every phrase is in the one transcript (none lost at a pause), and the word error rate
    over the whole set is at most 15 % (tiny.en mishears single espeak words)."""
    heard = [(o.clip.phrases, " ".join(r.user_text for r in o.result.records), describe(o)) for o in paused]
    assert heard_whole(heard, words) <= 0.15


def test_no_reply_talks_over_the_pauses(paused: list[Outcome], config: Config) -> None:
    """Reply audio heard while the user pauses mid-sentence: at most what plays within the
    continuation grace before the user goes on and it is flushed."""
    grace_s = config.turn.continuation_grace_ms / 1000
    talked_over = 0
    for o in paused:
        heard = reply_heard_in_pauses(o.result.output, o.result.output_rate_hz, o.clip, LEAD_S)
        for heard_s in heard:
            assert heard_s <= grace_s + 0.2, f"{heard_s:.2f} s of reply during a pause: {describe(o)}"
        talked_over += any(h > 0 for h in heard)
        print(f"reply heard during the pauses: {max(heard):.2f} s  {o.spoken}")
    print(f"sentences with reply audio during a pause: {talked_over} of {len(paused)}")


def test_turns_record_the_rule_that_ended_them(paused: list[Outcome]) -> None:
    rules = [o.result.records[-1].end_of_turn for o in paused]
    assert all(r is not None for r in rules)
    for r in rules:
        assert r is not None
        assert r.rule in {"complete", "unsure", "no_verdict", "incomplete"}
        assert r.silence_ms >= r.wait_ms - 40
    # the turn model ran at the pauses, in parallel with the speculative decode
    assert any(r is not None and r.p_complete is not None for r in rules)


@pytest.fixture(scope="module")
async def questions(engines: Engines, config: Config) -> list[RunResult]:
    out = []
    for voice in ("en-us+f3", "en-gb+m1"):
        for q in COMPLETE_QUESTIONS:
            out.append(await speak(engines, config, espeak(q, voice=voice)))
    return out


def test_complete_questions_are_still_answered_at_once(questions: list[RunResult]) -> None:
    v2v = []
    for res in questions:
        turns = [r for r in res.records if r.user_text]
        assert len(turns) == 1 and turns[0].assistant_text, [r.user_text for r in res.records]
        rec = turns[0]
        assert rec.end_of_turn is not None
        v2v.append(rec.stages_ms["voice_to_voice"])
        print(
            f"voice-to-voice {rec.stages_ms['voice_to_voice']:.0f} ms, rule {rec.end_of_turn.rule}, "
            f"P(complete) {rec.end_of_turn.p_complete}, {rec.user_text!r}"
        )
    print(f"complete questions: voice-to-voice p50 {np.percentile(v2v, 50):.0f} ms, max {max(v2v):.0f} ms")


async def test_a_speaker_who_hesitated_is_not_answered_at_their_next_pause(
    engines: Engines, config: Config
) -> None:
    """A hesitation: "The thing is ... I don't really know ... what to cook." The words hold
    the first pause (a copula after a noun) for 0.7 s; the speaker goes on. At
    the second pause the words read finished, and a turn that had not seen the hesitation
    ends there and is undone when the speaker goes on (the control, patience off). With it,
    the short wait covers the pause the speaker made: one turn, nothing ended or said in a
    pause. Words alone (no turn model), so the words decide each pause on any machine."""
    words_alone = dataclasses.replace(engines, turn=None)
    cfg = dataclasses.replace(config, llm=dataclasses.replace(config.llm, max_tokens=24))
    pause_s = 0.7
    assert HESITATION_MIN_MS + 100 < pause_s * 1000 < cfg.turn.incomplete_silence_ms - 500
    phrases = ("The thing is", "I don't really know", "what to cook.")
    clip = paused_clip(lambda t: espeak(t, voice="en-us+f3"), phrases, [pause_s, pause_s], RATE)
    for patience_ms in (cfg.turn.patience_ms, 0):
        run = dataclasses.replace(cfg, turn=dataclasses.replace(cfg.turn, patience_ms=patience_ms))
        res = await speak(words_alone, run, clip.samples)
        turns = [r for r in res.records if r.user_text]
        heard = reply_heard_in_pauses(res.output, res.output_rate_hz, clip, LEAD_S)
        print(
            f"patience {patience_ms}: heard {heard}",
            [(r.user_text, r.end_of_turn, r.undone_ends) for r in turns],
        )
        assert len(turns) == 1, [r.user_text for r in turns]
        (rec,) = turns
        assert {"thing", "know", "cook"} <= set(normalize(rec.user_text).split())
        eot = rec.end_of_turn
        assert eot is not None and eot.rule is Rule.COMPLETE  # neutral words, no model
        if patience_ms:
            assert rec.continuations == 0 and rec.undone_ends == () and heard == [0.0, 0.0]
            assert eot.patience_ms > 0 and pause_s * 1000 < eot.wait_ms < run.turn.continuation_max_gap_ms
            assert rec.assistant_text and not rec.interrupted
        else:  # the second pause ended the turn, and the speaker going on undid it
            assert rec.continuations >= 1 and rec.undone_ends[0].rule is Rule.COMPLETE
            assert rec.undone_ends[0].silence_ms < pause_s * 1000 and eot.patience_ms == 0


async def test_a_speaker_who_went_on_is_not_talked_over_at_their_next_pause(
    engines: Engines, config: Config
) -> None:
    """Patience (``turn.patience_ms``): the user goes on after a finished question (a
    continuation, certain by the gap as in the test below), waits for the whole reply, then
    does it again in another voice: "What is the capital of Spain? ... And of Italy?". By
    every rule a question can end by, a first turn would have ended inside that pause (the
    gap of the test below) and been answered over the speaker; now the wait has grown
    beyond the pause: one turn, no reply audio in the pause, and the record says why."""
    cfg = dataclasses.replace(config, llm=dataclasses.replace(config.llm, max_tokens=24))  # a short reply
    ended_by_s = cfg.turn.unsure_silence_ms / 1000 + 0.1
    gap_s = ended_by_s + 0.15  # continues the first turn (see the test below)
    patient_s = (cfg.vad.end_silence_ms + cfg.turn.patience_ms) / 1000
    pause_s = ended_by_s + 0.3
    assert pause_s < patient_s - 0.2, (pause_s, patient_s)  # the VAD's silence stays below the wait
    gap = np.zeros(round(gap_s * RATE), np.float32)
    for_the_reply = np.zeros(12 * RATE, np.float32)
    first = np.concatenate(
        [espeak("What is the capital of France?"), gap, espeak("And of Germany?"), for_the_reply]
    )
    phrases = ("What is the capital of Spain?", "And of Italy?")
    clip = paused_clip(lambda t: espeak(t, voice="en-gb+m1"), phrases, [pause_s], RATE)
    res = await speak(engines, cfg, np.concatenate([first, clip.samples]))
    turns = [r for r in res.records if r.user_text]
    print([(r.user_text, r.continuations, r.end_of_turn and r.end_of_turn.as_dict()) for r in turns])
    assert len(turns) == 2, [r.user_text for r in turns]
    assert turns[0].continuations >= 1 and "germany" in normalize(turns[0].user_text)
    second = turns[1]
    assert {"spain", "italy"} <= set(normalize(second.user_text).split()) and second.continuations == 0
    eot = second.end_of_turn
    assert eot is not None and eot.rule in ("complete", "unsure") and eot.patience_ms >= cfg.turn.patience_ms
    # at least the patience; more if the speaker went on later than that in the pause (~1.1 s here,
    # with espeak's own silences), but short of the gap, so they could still go on after the end
    assert patient_s * 1000 <= eot.wait_ms < cfg.turn.continuation_max_gap_ms
    heard = reply_heard_in_pauses(res.output, res.output_rate_hz, clip, LEAD_S + len(first) / RATE)
    assert heard == [0.0], heard
    assert second.assistant_text and not second.interrupted


async def test_a_reply_started_but_not_heard_is_dropped_and_the_turn_merged(
    engines: Engines, config: Config
) -> None:
    """The first part sounds finished ("What is the capital of France?") and the LLM is
    already answering it when the user goes on ("and of Germany?"): one turn, both parts
    in one user message, the first request aborted.

    The gap is set by the config, not by how fast this machine is: after it, the turn has
    ended by every rule but "incomplete" (unsure_silence_ms, plus ~0.1 s of VAD hangover),
    and it is shorter than the earliest the continuation grace can run out (the reply's
    first audio comes after an end of turn, at least vad.end_silence_ms into the pause)."""
    first, second = espeak("What is the capital of France?"), espeak("And of Germany?")
    ended_by_s = config.turn.unsure_silence_ms / 1000 + 0.1
    grace_from_s = (config.vad.end_silence_ms + config.turn.continuation_grace_ms) / 1000
    # early in that window: the VAD's end of speech can come ~0.3 s before the clip's end
    # (a soft final fricative), and a reply released at the end of turn is audible at once
    gap_s = ended_by_s + 0.15
    assert ended_by_s + 0.1 < gap_s < grace_from_s - 0.1, (ended_by_s, gap_s, grace_from_s)
    audio = np.concatenate([first, np.zeros(round(gap_s * RATE), np.float32), second])
    res = await speak(engines, config, audio)
    turns = [r for r in res.records if r.user_text]
    assert len(turns) == 1, [r.user_text for r in res.records]
    rec = turns[0]
    print(f"gap {gap_s:.2f} s: {rec.continuations} continuation(s), {rec.user_text!r}")
    assert rec.continuations >= 1
    # the record says how the turn had ended before the user went on: a complete question,
    # ended by a rule that waits no longer than the gap (not "incomplete")
    print("undone:", [e.as_dict() for e in rec.undone_ends])
    assert len(rec.undone_ends) == rec.continuations
    assert rec.undone_ends[0].rule is not Rule.INCOMPLETE and rec.undone_ends[0].silence_ms < gap_s * 1000
    assert "germany" in normalize(rec.user_text) and "france" in normalize(rec.user_text)
    assert [m.content for m in res.history if m.role == "user"] == [rec.user_text]
    assert not rec.interrupted and rec.assistant_text
    assert engines.llm.unfinished_requests() == 0


async def test_a_late_verdict_still_decides_a_statement_within_the_verdict_wait(
    engines: Engines, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine too slow for the turn model to answer within the medium wait (a delay
    injected into each call): after neutral words the turn waits for the verdict on its way
    (``turn.verdict_silence_ms``), and the model decides; with that wait no longer than the
    medium one (as before), the same statement ends by ``no_verdict`` without the model."""
    model = engines.turn
    assert model is not None
    delay_s = (config.turn.unsure_silence_ms + 200) / 1000  # past the medium wait, wherever it starts
    real = model.p_complete

    def slowed(audio: np.ndarray, *, stop: object = None) -> float:
        time.sleep(delay_s)
        return real(audio, stop=stop)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "p_complete", slowed)
    statement = espeak("I would like to book a table for two people tonight.", voice="en-gb+m1")
    short = dataclasses.replace(config.llm, max_tokens=24)
    outcomes = {}
    for verdict_ms in (config.turn.incomplete_silence_ms, config.turn.unsure_silence_ms):
        turn = dataclasses.replace(config.turn, verdict_silence_ms=verdict_ms)
        res = await speak(engines, dataclasses.replace(config, llm=short, turn=turn), statement)
        turns = [r for r in res.records if r.user_text]
        assert len(turns) == 1 and turns[0].assistant_text, [r.user_text for r in res.records]
        assert "table" in normalize(turns[0].user_text)
        eot = turns[0].end_of_turn
        assert eot is not None
        print(f"verdict wait {verdict_ms} ms: {eot.as_dict()}")
        outcomes[verdict_ms] = eot
    waited = outcomes[config.turn.incomplete_silence_ms]
    assert waited.p_complete is not None and waited.rule in ("complete", "incomplete")
    assert waited.silence_ms > config.turn.unsure_silence_ms  # it waited past the medium wait
    before = outcomes[config.turn.unsure_silence_ms]
    assert before.rule == "no_verdict" and before.p_complete is None


async def test_a_reply_never_starts_over_a_speaker_who_has_just_gone_on(
    engines: Engines, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply to "What is the capital of France?" is made ready exactly when the speaker
    goes on ("And of Germany?"), before the VAD has heard enough of it to call it speech: every
    synthesis (real Piper) started before that voice returns only once it is heard. With the
    hold (``Continuation.holds``) nothing of that reply is heard and the turn is continued; with
    it off, the same reply starts over the speaker until their speech is confirmed."""
    first, second = espeak("What is the capital of France?"), espeak("And of Germany?")
    # after the end of turn by every rule but "incomplete" (see the test above); within the
    # maximum gap even when the VAD's end of speech comes ~0.3 s before the clip's end
    ended_by_s, gap_s = (
        config.turn.unsure_silence_ms / 1000 + 0.1,
        config.turn.continuation_max_gap_ms / 1000 - 0.4,
    )
    assert ended_by_s + 0.2 < gap_s, (ended_by_s, gap_s)
    audio = np.concatenate([first, np.zeros(round(gap_s * RATE), np.float32), second])
    clip = PausedSpeech(("What is ...", "And of ..."), audio, RATE, (len(first),), (gap_s,))
    short = dataclasses.replace(config, llm=dataclasses.replace(config.llm, max_tokens=24))
    real_holds, real_synth = Continuation.holds, clause_audio.synthesize_clause

    async def run(hold: bool, voice: threading.Event, early: list[str]) -> RunResult:
        def holds(
            self: Continuation, t: TurnState, now_ns: int, onset: int | None, min_speech_ms: int
        ) -> bool:
            if onset is not None and t.phase is Phase.REPLYING:
                voice.set()  # a voice after the end that may still become speech
            return hold and real_holds(self, t, now_ns, onset, min_speech_ms)

        def synth(tts: TTS, text: str, clock: Callable[[], int], *, head_first: bool) -> ClauseAudio:
            made = real_synth(tts, text, clock, head_first=head_first)
            if not voice.is_set():
                early.append(text)
                voice.wait(timeout=15)  # ready only once the speaker has gone on
            return made

        monkeypatch.setattr(Continuation, "holds", holds)
        monkeypatch.setattr(reply_module, "synthesize_clause", synth)
        monkeypatch.setattr(utterance_module, "synthesize_clause", synth)
        return await speak(engines, short, audio)

    for hold in (True, False):
        early: list[str] = []
        res = await run(hold, threading.Event(), early)
        turns = [r for r in res.records if r.user_text]
        heard = reply_heard_in_pauses(res.output, res.output_rate_hz, clip, LEAD_S)[0]
        print(f"hold {hold}: ready before the voice {early}, heard in the pause {heard:.2f} s, "
              f"{[(r.user_text, r.continuations) for r in turns]}")  # fmt: skip
        assert len(turns) == 1 and turns[0].continuations >= 1, [r.user_text for r in res.records]
        assert {"france", "germany"} <= set(normalize(turns[0].user_text).split())
        assert turns[0].assistant_text and not turns[0].interrupted
        assert engines.llm.unfinished_requests() == 0
        if hold:
            assert heard == 0.0  # not a sample of the dropped reply reached the listener
        elif early:  # the reply was ready before the voice: without the hold it was heard
            assert heard > 0.0
