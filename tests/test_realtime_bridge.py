"""The /v1/realtime bridge (pure): session events and client events -> server events.

The session is played by hand (its typed events, in the order the real one emits
them); every server event produced is validated against the openai SDK's own models.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from realtime_sdk import validate_server_event
from realtime_support import PROFILE

from llm.base import ChatMessage
from voice_pipeline import events as ev
from voice_pipeline.config import BudgetConfig, Config
from voice_pipeline.conversation.steering import ReplyOptions
from voice_pipeline.ledger.ledger import TurnLedger
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.realtime import client_events as ce
from voice_pipeline.realtime.audio import AudioFormat
from voice_pipeline.realtime.bridge import RealtimeBridge, steering
from voice_pipeline.realtime.errors import ErrorCode, RealtimeClientError
from voice_pipeline.realtime.event_json import encode
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.items import InputAudio, InputText, Message, OutputAudio, Role
from voice_pipeline.realtime.server_events import (
    AudioDelta,
    ResponseDone,
    ServerEvent,
    TurnLatencyMeasured,
)
from voice_pipeline.realtime.session_config import SessionBase, initial_config
from voice_pipeline.realtime.session_parse import parse_session
from voice_pipeline.turntaking.messages import Detection, TurnOptions

CFG = Config()
BASE = SessionBase.of(CFG)
T = 1_000_000_000  # any monotonic time: the bridge does not read clocks


def bridge(**session: Any) -> RealtimeBridge:
    b = RealtimeBridge(PROFILE, BASE, Ids("t"), origin_ns=0)
    if session:
        b.update(parse_session({"type": "realtime", **session}))
    return b


def record(
    turn_id: int,
    user_text: str = "",
    *,
    interrupted: bool = False,
    heard_s: float = 0.0,
    tokens: int = 0,
    interruption: str | None = None,
    failed: str | None = None,
) -> TurnRecord:
    ledger = TurnLedger(turn_id, BudgetConfig())
    ledger.llm_tokens, ledger.interruption, ledger.failed = tokens, interruption, failed
    return ledger.finish(
        user_text=user_text, assistant_text="", heard_text="", interrupted=interrupted, audio_heard_s=heard_s
    )


def checked(events: list[ServerEvent]) -> list[str]:
    """The events' types; each one must be exactly the SDK's shape."""
    for n, e in enumerate(events):
        if not isinstance(e, TurnLatencyMeasured):
            validate_server_event(encode(e, f"event_{n}"))
    return [e.TYPE for e in events]


def pcm(seconds: float, rate: int = 24000) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (8000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)


def spoken_turn(b: RealtimeBridge, turn_id: int = 1, words: str = "hello there") -> list[ServerEvent]:
    """The user speaks, the server ends the turn, the words are known."""
    out = b.on_event(ev.SpeechStarted(turn_id, T, 100))
    out += b.on_event(ev.EndpointDetected(turn_id, T, T, 1500))
    out += b.on_event(ev.TranscriptFinalized(turn_id, T, words))
    return out


def answer(b: RealtimeBridge, turn_id: int = 1, *, write: bool = True) -> list[ServerEvent]:
    """The server answers: two clauses of 1 s and 0.5 s, their audio, all generated."""
    b.context.request("hello there", turn_id)
    out = b.on_event(ev.ReplyStarted(turn_id, T))
    out += b.on_event(ev.ClauseSynthesized(turn_id, T, "Hi there.", 24000))
    out += [e for e, _ in b.on_audio(turn_id, pcm(1.0))]
    if write:
        out += b.audio_written(turn_id)
    out += b.on_event(ev.ClauseSynthesized(turn_id, T, "How can I help?", 12000))
    out += [e for e, _ in b.on_audio(turn_id, pcm(0.5))]
    return out


def test_a_spoken_turn_the_server_answers_in_the_ga_order() -> None:
    b = bridge()
    events = spoken_turn(b) + answer(b)
    events += b.on_event(ev.ReplyGenerated(1, T, 9, False))
    events += b.on_event(ev.TurnCompleted(1, T, record(1, "hello there", heard_s=1.5, tokens=9)))
    deltas = ["response.output_audio.delta"]
    assert checked(events) == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_audio_transcript.delta",
        *deltas * 5,  # 1 s in deltas of at most 200 ms
        "output_audio_buffer.started",
        "response.output_audio_transcript.delta",
        *deltas * 3,
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "output_audio_buffer.stopped",
        "voice_pipeline.turn.latency",
    ]
    user, reply = b.conversation.items
    assert user == Message(user.id, Role.USER, (InputAudio("hello there"),))
    assert isinstance(reply, Message) and isinstance(reply.content[0], OutputAudio)
    assert reply.content[0].transcript == "Hi there. How can I help?"
    assert reply.content[0].duration_ms == 1500
    done = next(e for e in events if isinstance(e, ResponseDone))
    assert done.response.usage is not None and done.response.usage.output_tokens == 9
    assert done.response.usage.input_tokens > 0  # estimated from the request the session made
    latency = events[-1]
    assert isinstance(latency, TurnLatencyMeasured)
    assert (latency.response_id, latency.item_id) == (done.response.id, user.id)


def test_reply_audio_is_cut_into_deltas_that_carry_every_sample_once() -> None:
    b = bridge()
    spoken_turn(b)
    b.on_event(ev.ReplyStarted(1, T))
    b.on_event(ev.ClauseSynthesized(1, T, "Hi.", 11111))
    audio = pcm(11111 / 24000)
    out = b.on_audio(1, audio)
    assert sum(n for _, n in out) == len(audio)
    data = b"".join(e.delta for e, _ in out if isinstance(e, AudioDelta))
    assert np.array_equal(np.frombuffer(data, "<i2"), audio)


def test_g711_out_is_encoded_per_response() -> None:
    b = bridge(audio={"output": {"format": {"type": "audio/pcmu"}}})
    spoken_turn(b)
    b.on_event(ev.ReplyStarted(1, T))
    b.on_event(ev.ClauseSynthesized(1, T, "Hi.", 24000))
    out = b.on_audio(1, pcm(1.0))
    data = b"".join(e.delta for e, _ in out if isinstance(e, AudioDelta))
    assert len(data) == 8000  # 1 s of 8 kHz µ-law, a byte a sample
    assert sum(n for _, n in out) == 24000  # the transport counts samples at 24 kHz


def test_the_llm_reads_the_conversation_with_the_words_being_answered() -> None:
    b = bridge(instructions="Be brief.")
    spoken_turn(b)
    answer(b)
    b.on_event(ev.ReplyGenerated(1, T, 9, False))
    b.on_event(ev.TurnCompleted(1, T, record(1, "hello there", heard_s=1.5)))
    b.on_event(ev.SpeechStarted(2, T, 3000))
    version = b.context.version
    prefetch = b.context.request("and then", 2)  # before the item is committed
    b.on_event(ev.EndpointDetected(2, T, T, 4000))
    b.on_event(ev.TranscriptFinalized(2, T, "and then"))
    assert b.context.version == version  # the turn's own item: the prefetch stays valid
    assert (
        b.context.request("and then", 2)
        == prefetch
        == [
            ChatMessage("system", "Be brief."),
            ChatMessage("user", "hello there"),
            ChatMessage("assistant", "Hi there. How can I help?"),
            ChatMessage("user", "and then"),
        ]
    )
    b.delete(b.conversation.items[0].id)
    assert b.context.version != version


def test_speech_over_a_reply_cancels_it_and_cuts_it_to_what_was_heard() -> None:
    b = bridge()
    spoken_turn(b)
    events = answer(b)
    n = len(events)
    events += b.on_event(ev.ReplyInterrupted(1, T, "barge-in"))
    events += b.on_event(ev.TurnCompleted(1, T, record(1, "hello there", interrupted=True, heard_s=1.0)))
    assert checked(events)[n:] == [
        "output_audio_buffer.cleared",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",  # the item incomplete
        "conversation.item.done",
        "response.done",
        "conversation.item.truncated",  # at the server's playout estimate
        "voice_pipeline.turn.latency",
    ]
    done = next(e for e in events if isinstance(e, ResponseDone)).response
    assert (str(done.status), str(done.reason)) == ("cancelled", "turn_detected")
    reply = b.conversation.items[1]
    assert isinstance(reply, Message) and isinstance(reply.content[0], OutputAudio)
    assert reply.content[0].transcript == "Hi there."  # 1.0 s heard: the first clause
    assert b.context.request("what", 2)[-2:] == [
        ChatMessage("assistant", "Hi there...."),  # cut, as the History marks it on /ws
        ChatMessage("user", "what"),
    ]


def test_a_clients_truncate_while_the_item_is_generated_cuts_it_when_done() -> None:
    b = bridge()
    spoken_turn(b)
    answer(b)
    item = b.conversation.items[1].id
    assert checked(b.truncate(ce.TruncateItem(item, 0, 500))) == ["conversation.item.truncated"]
    b.on_event(ev.ReplyGenerated(1, T, 9, False))
    out = b.on_event(ev.TurnCompleted(1, T, record(1, "hello there", heard_s=1.5)))
    assert "conversation.item.truncated" in checked(out)
    reply = b.conversation.items[1]
    assert isinstance(reply, Message) and isinstance(reply.content[0], OutputAudio)
    assert reply.content[0].transcript == "Hi"  # half a second into the 1 s clause "Hi there."
    # later, the client's truncate of the done item re-cuts it (here: all of it heard)
    b.truncate(ce.TruncateItem(item, 0, 1500))
    assert b.conversation.items[1].content[0].transcript == "Hi there. How can I help?"  # type: ignore[union-attr]


def test_a_continued_turn_loses_its_first_item_and_its_response() -> None:
    b = bridge()
    first = spoken_turn(b)
    committed = next(e for e in first if e.TYPE == "input_audio_buffer.committed")
    b.on_event(ev.ReplyStarted(1, T))
    events = b.on_event(ev.TurnContinued(1, T))
    assert checked(events) == [
        "response.done",
        "conversation.item.deleted",
        "input_audio_buffer.speech_started",
    ]
    assert events[1].item_id == committed.item_id  # type: ignore[attr-defined]
    assert events[2].item_id != committed.item_id  # type: ignore[attr-defined]
    assert len(b.conversation) == 0
    events = b.on_event(ev.EndpointDetected(1, T, T, 2500))
    events += b.on_event(ev.TranscriptFinalized(1, T, "hello there and more"))
    assert [i.content for i in b.conversation.items] == [(InputAudio("hello there and more"),)]


@pytest.mark.parametrize(("interruption", "words"), [("backchannel", "uh-huh"), ("echo", "hi"), (None, "")])
def test_an_utterance_that_was_not_a_turn_leaves_no_item(interruption: str | None, words: str) -> None:
    b = bridge()
    spoken_turn(b, words=words)
    out = b.on_event(ev.TurnCompleted(1, T, record(1, words, interruption=interruption)))
    assert checked(out) == ["conversation.item.deleted", "voice_pipeline.turn.latency"]
    assert len(b.conversation) == 0


def test_text_only_responses_stream_text_and_no_audio() -> None:
    b = bridge(output_modalities=["text"])
    assert b.steering().reply == ReplyOptions(speak=False)
    spoken_turn(b)
    events = b.on_event(ev.ReplyStarted(1, T))
    for piece in ("Paris", " is the capital."):
        events += b.on_event(ev.AssistantTextStreamed(1, T, piece))
    assert b.on_audio(1, pcm(0.5)) == []
    events += b.on_event(ev.ReplyGenerated(1, T, 5, False))
    types = checked(events)
    assert types.count("response.output_text.delta") == 2 and "response.output_audio.delta" not in types
    assert b.conversation.items[1].content[0].text == "Paris is the capital."  # type: ignore[union-attr]


def test_the_token_limit_makes_the_response_incomplete() -> None:
    b = bridge(max_output_tokens=5)
    assert b.steering().reply.max_tokens == 5
    spoken_turn(b)
    answer(b)
    done = b.on_event(ev.ReplyGenerated(1, T, 5, True))
    final = next(e for e in done if isinstance(e, ResponseDone)).response
    assert (str(final.status), str(final.reason)) == ("incomplete", "max_output_tokens")
    checked(done)


def test_manual_turns_commit_what_the_client_sent() -> None:
    b = bridge(audio={"input": {"turn_detection": None}})
    assert b.steering().options == TurnOptions(Detection.MANUAL, auto_reply=False)
    with pytest.raises(RealtimeClientError) as info:
        b.commit()  # nothing sent yet
    assert info.value.error.code is ErrorCode.INPUT_BUFFER_EMPTY
    b.append(b"\x00\x00" * 1200)  # 50 ms
    assert b.on_event(ev.SpeechStarted(1, T, 0)) == []  # no speech events without turn detection
    with pytest.raises(RealtimeClientError):
        b.commit()  # under 100 ms
    b.append(b"\x00\x00" * 2400)
    b.commit()
    events = b.on_event(ev.EndpointDetected(1, T, T, 150))
    assert checked(events) == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
    ]


def test_with_the_vad_only_speech_in_progress_can_be_committed() -> None:
    b = bridge()
    b.append(b"\x00\x00" * 24000)
    with pytest.raises(RealtimeClientError):
        b.commit()
    b.on_event(ev.SpeechStarted(1, T, 0))
    b.commit()  # the session ends the turn; its events follow
    assert checked(b.clear()) == ["input_audio_buffer.cleared"]
    with pytest.raises(RealtimeClientError):
        b.commit()


def test_response_create_renders_the_items_and_refuses_a_second_active_one() -> None:
    b = bridge()
    b.create_item(ce.CreateItem(Message("", Role.USER, (InputText("Tell me a joke."),))))
    events, request, response = b.create_response(
        ce.ResponseParams(instructions="Be funny.", metadata=(("client_event_id", "c1"),))
    )
    assert checked(events) == ["response.created"]
    assert request.messages == (ChatMessage("system", "Be funny."), ChatMessage("user", "Tell me a joke."))
    assert request.user_text == "Tell me a joke." and request.options == ReplyOptions()
    assert events[0].response.metadata == (("client_event_id", "c1"),)  # type: ignore[attr-defined]
    b.bind(7, response)
    with pytest.raises(RealtimeClientError) as info:
        b.create_response(ce.ResponseParams())
    assert info.value.error.code is ErrorCode.RESPONSE_ALREADY_ACTIVE
    assert b.cancel_response(None) == 7
    out = b.on_event(ev.ReplyInterrupted(7, T, "cancelled by the client"))
    out += b.on_event(ev.TurnCompleted(7, T, record(7, "Tell me a joke.", interrupted=True)))
    done = next(e for e in out if isinstance(e, ResponseDone)).response
    assert (str(done.status), str(done.reason)) == ("cancelled", "client_cancelled")
    with pytest.raises(RealtimeClientError) as info:
        b.cancel_response(None)
    assert info.value.error.code is ErrorCode.NO_ACTIVE_RESPONSE


def test_an_out_of_band_response_reads_its_input_and_writes_nothing() -> None:
    b = bridge()
    params = ce.ResponseParams(
        conversation=ce.ConversationMode.NONE,
        input=(Message("", Role.USER, (InputText("Summarize: cats are nice."),)),),
        output_modality=None,
    )
    events, request, response = b.create_response(params)
    assert request.messages[-1] == ChatMessage("user", "Summarize: cats are nice.")
    b.bind(1, response)
    events += b.on_event(ev.ClauseSynthesized(1, T, "Cats are nice.", 24000))
    events += [e for e, _ in b.on_audio(1, pcm(1.0))]
    events += b.on_event(ev.ReplyGenerated(1, T, 4, False))
    types = checked(events)
    assert "conversation.item.added" not in types and len(b.conversation) == 0
    assert next(e for e in events if isinstance(e, ResponseDone)).response.conversation_id is None


def test_a_failed_reply_is_a_failed_response_and_a_failed_transcription_is_said() -> None:
    b = bridge()
    spoken_turn(b)
    b.on_event(ev.ReplyStarted(1, T))
    b.on_event(ev.TurnFailed(1, T, "llm", "vLLM request failed", True))
    out = b.on_event(ev.TurnCompleted(1, T, record(1, "hello there", failed="llm")))
    done = next(e for e in out if isinstance(e, ResponseDone)).response
    assert str(done.status) == "failed" and done.error is not None and "llm failed" in done.error.message
    checked(out)
    b.on_event(ev.SpeechStarted(2, T, 3000))
    b.on_event(ev.EndpointDetected(2, T, T, 4000))
    assert checked(b.on_event(ev.TurnFailed(2, T, "asr", "decode failed", False))) == [
        "conversation.item.input_audio_transcription.failed"
    ]


def test_audio_of_a_reply_resumed_after_its_response_is_done_goes_to_the_same_item() -> None:
    b = bridge()
    spoken_turn(b)
    answer(b)
    b.on_event(ev.ReplyGenerated(1, T, 9, False))
    item = b.conversation.items[1].id
    late = b.on_audio(1, pcm(0.3))  # a backchannel paused the reply, it resumed
    assert late and all(isinstance(e, AudioDelta) and e.item_id == item for e, _ in late)


def test_user_audio_sent_in_an_item_is_transcribed() -> None:
    b = bridge()
    audio = base64.b64encode(pcm(0.5).astype("<i2").tobytes()).decode()
    event = ce.parse_client_event(
        '{"type": "conversation.item.create", "item": {"type": "message", "role": "user", '
        f'"content": [{{"type": "input_audio", "audio": "{audio}"}}]}}}}'
    )
    assert isinstance(event, ce.CreateItem)
    _, todo = b.create_item(event)
    ((item_id, index, samples),) = todo
    assert index == 0 and len(samples) == 8000  # 0.5 s at the pipeline's 16 kHz
    out = b.item_transcribed(item_id, index, "hello", 0.5)
    assert checked(out) == ["conversation.item.input_audio_transcription.completed"]
    assert b.context.messages_for("", b.conversation.items) == [ChatMessage("user", "hello")]


def test_output_audio_buffer_clear_names_the_replies_that_play() -> None:
    b = bridge()
    spoken_turn(b)
    answer(b, write=False)
    assert b.clear_output() == []  # nothing written yet: nothing plays
    b.audio_written(1)
    assert b.clear_output() == [1]


# ---------------------------------------------------------------- what the session is asked to do


@pytest.mark.parametrize(
    ("turn_detection", "check"),
    [
        (
            {"type": "server_vad", "threshold": 0.6, "prefix_padding_ms": 300, "silence_duration_ms": 500},
            lambda s: (
                (s.vad.threshold, s.vad.pre_roll_ms, s.vad.end_silence_ms, s.turn.semantic)
                == (0.6, 300, 500, False)
            ),
        ),
        (
            {"type": "semantic_vad", "eagerness": "low"},
            # the wait on the sound alone keeps its share of the longest wait (1.5 s of 2)
            lambda s: (
                s.turn.semantic
                and (s.turn.incomplete_silence_ms, s.turn.sound_silence_ms) == (8000, 6000)
                and s.vad == CFG.vad
            ),
        ),
        (
            {"type": "semantic_vad", "eagerness": "high"},
            lambda s: (s.turn.incomplete_silence_ms, s.turn.sound_silence_ms) == (2000, 1500),
        ),
        (
            {"type": "semantic_vad"},  # auto: as the server is set up
            lambda s: s.turn == CFG.turn,
        ),
        (
            {"type": "server_vad", "interrupt_response": False, "create_response": False},
            lambda s: not s.barge_in.enabled and s.options == TurnOptions(Detection.VAD, auto_reply=False),
        ),
        (None, lambda s: s.options.detection is Detection.MANUAL and not s.options.auto_reply),
    ],
)
def test_turn_detection_steers_the_session(turn_detection: Any, check: Any) -> None:
    b = bridge(audio={"input": {"turn_detection": turn_detection}})
    assert check(b.steering())


def test_a_new_session_behaves_as_the_server_is_set_up() -> None:
    from voice_pipeline.realtime.session_config import profile_from_config

    profile = profile_from_config(CFG, model="m", voice="joe", tools_supported=False)
    s = steering(initial_config(profile), BASE)
    assert (s.vad, s.turn, s.barge_in) == (CFG.vad, CFG.turn, CFG.barge_in)
    assert s.options == TurnOptions() and s.reply == ReplyOptions()


def test_an_input_format_change_makes_a_new_decoder() -> None:
    b = bridge()
    assert 0 < len(b.append(b"\x00\x00" * 4800)) <= 3200  # 24 kHz PCM -> 16 kHz (a little held back)
    b.update(parse_session({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}))
    assert b.decoder.format is AudioFormat.PCMU


def test_usage_takes_the_engines_own_prompt_figures_when_it_gives_them() -> None:
    b = bridge()
    spoken_turn(b)
    answer(b)
    done = b.on_event(ev.ReplyGenerated(1, T, 9, False, prompt_tokens=120, cached_tokens=96))
    usage = next(e for e in done if isinstance(e, ResponseDone)).response.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (120, 9, 96)
    checked(done)
