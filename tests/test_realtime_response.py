"""The response and input sequencers: the exact GA event sequences, consistent ids, and the
conversation kept in step (table-driven, no I/O; the conformance test validates the same
events against the openai SDK's models)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from realtime_support import PROFILE

from voice_pipeline.conversation.heard import SpokenClause
from voice_pipeline.realtime.client_events import ConversationMode, ResponseParams
from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.errors import ErrorCode, ErrorType, ProtocolError, RealtimeClientError
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.input import InputSequencer
from voice_pipeline.realtime.items import (
    FunctionCall,
    InputAudio,
    ItemStatus,
    Message,
    OutputAudio,
    OutputText,
    Role,
)
from voice_pipeline.realtime.response import ResponseSequenceError, ResponseSequencer, resolve_response
from voice_pipeline.realtime.server_events import (
    AudioDelta,
    AudioDone,
    AudioTranscriptDelta,
    AudioTranscriptDone,
    ContentPartAdded,
    ContentPartDone,
    InputCleared,
    InputCommitted,
    InputTranscriptCompleted,
    InputTranscriptDelta,
    ItemAdded,
    ItemDone,
    OutputItemAdded,
    OutputItemDone,
    ResponseCreated,
    ResponseDone,
    ResponseInfo,
    ResponseStatus,
    ServerEvent,
    SpeechStarted,
    SpeechStopped,
    StatusReason,
    TextDone,
    Usage,
)
from voice_pipeline.realtime.session_config import Modality, initial_config
from voice_pipeline.realtime.session_parse import parse_session
from voice_pipeline.realtime.session_update import apply_update

CFG = initial_config(PROFILE)


def sequencer(params: ResponseParams | None = None) -> tuple[ResponseSequencer, Conversation]:
    conv = Conversation(Ids("t"))
    settings = resolve_response(params or ResponseParams(), CFG, PROFILE)
    return ResponseSequencer(settings, Ids("r"), conv), conv


def test_audio_response_exact_sequence() -> None:
    seq, conv = sequencer()
    conv.create(Message("u1", Role.USER, (InputAudio("Weather?"),)))
    events = seq.created()
    events += seq.audio(b"AB", 1, "It is sunny.")
    events += seq.audio(b"CD", 1)
    events += seq.audio(b"EF", 1, "Bring a hat.")
    events += seq.finish(Usage(20, 7))
    rid, iid = seq.response_id, seq.item_ids[0]
    assert (rid, iid) == ("resp_r_1", "item_t_2")
    started = Message(iid, Role.ASSISTANT, (), ItemStatus.IN_PROGRESS)
    part = OutputAudio(
        "It is sunny. Bring a hat.", (SpokenClause("It is sunny.", 2), SpokenClause("Bring a hat.", 1))
    )
    final = Message(iid, Role.ASSISTANT, (part,), ItemStatus.COMPLETED)
    info = ResponseInfo(
        rid, ResponseStatus.IN_PROGRESS, Modality.AUDIO, CFG.output_format, "joe", None, conv.id
    )
    assert events == [
        ResponseCreated(info),
        OutputItemAdded(rid, 0, started),
        ItemAdded(started, "u1"),
        ContentPartAdded(rid, iid, 0, 0, OutputAudio("")),
        AudioTranscriptDelta(rid, iid, 0, 0, "It is sunny."),
        AudioDelta(rid, iid, 0, 0, b"AB"),
        AudioDelta(rid, iid, 0, 0, b"CD"),
        AudioTranscriptDelta(rid, iid, 0, 0, " Bring a hat."),
        AudioDelta(rid, iid, 0, 0, b"EF"),
        AudioDone(rid, iid, 0, 0),
        AudioTranscriptDone(rid, iid, 0, 0, "It is sunny. Bring a hat."),
        ContentPartDone(rid, iid, 0, 0, part),
        OutputItemDone(rid, 0, final),
        ItemDone(final, "u1"),
        ResponseDone(
            ResponseInfo(
                rid,
                ResponseStatus.COMPLETED,
                Modality.AUDIO,
                CFG.output_format,
                "joe",
                None,
                conv.id,
                output=(final,),
                usage=Usage(20, 7),
            )
        ),
    ]
    assert conv.items[-1] == final and seq.done


def test_text_response_out_of_band_touches_no_conversation() -> None:
    params = ResponseParams(
        conversation=ConversationMode.NONE, output_modality=Modality.TEXT, metadata=(("k", "v"),)
    )
    seq, conv = sequencer(params)
    events = seq.created() + seq.text("Hel") + seq.text("lo.") + seq.finish()
    rid, iid = seq.response_id, seq.item_ids[0]
    final = Message(iid, Role.ASSISTANT, (OutputText("Hello."),), ItemStatus.COMPLETED)
    assert [type(e).__name__ for e in events] == [
        "ResponseCreated",
        "OutputItemAdded",
        "ContentPartAdded",
        "TextDelta",
        "TextDelta",
        "TextDone",
        "ContentPartDone",
        "OutputItemDone",
        "ResponseDone",
    ]
    assert events[5] == TextDone(rid, iid, 0, 0, "Hello.")
    done = events[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.conversation_id is None and done.response.metadata == (("k", "v"),)
    assert done.response.output == (final,) and len(conv) == 0


def _types(events: list[ServerEvent]) -> list[str]:
    return [e.TYPE for e in events]


END_OF_AUDIO = [
    "response.output_audio.done",
    "response.output_audio_transcript.done",
    "response.content_part.done",
    "response.output_item.done",
    "conversation.item.done",
    "response.done",
]

ENDINGS: list[
    tuple[str, Callable[[ResponseSequencer], list[ServerEvent]], ResponseStatus, StatusReason | None]
] = [
    ("completed", lambda s: s.finish(Usage(1, 1)), ResponseStatus.COMPLETED, None),
    (
        "barge-in",
        lambda s: s.cancel(StatusReason.TURN_DETECTED),
        ResponseStatus.CANCELLED,
        StatusReason.TURN_DETECTED,
    ),
    (
        "response.cancel",
        lambda s: s.cancel(StatusReason.CLIENT_CANCELLED),
        ResponseStatus.CANCELLED,
        StatusReason.CLIENT_CANCELLED,
    ),
    ("token limit", lambda s: s.incomplete(), ResponseStatus.INCOMPLETE, StatusReason.MAX_OUTPUT_TOKENS),
    (
        "failed",
        lambda s: s.fail(ProtocolError(ErrorCode.INVALID_VALUE, "LLM down", type=ErrorType.SERVER)),
        ResponseStatus.FAILED,
        None,
    ),
]


@pytest.mark.parametrize(("name", "end", "status", "reason"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_every_ending_closes_the_open_item(
    name: str,
    end: Callable[[ResponseSequencer], list[ServerEvent]],
    status: ResponseStatus,
    reason: StatusReason | None,
) -> None:
    seq, conv = sequencer()
    seq.created()
    seq.audio(b"xx", 1, "Once upon a time")
    events = end(seq)
    assert _types(events) == END_OF_AUDIO
    done = events[-1]
    assert isinstance(done, ResponseDone) and (done.response.status, done.response.reason) == (status, reason)
    item_status = ItemStatus.COMPLETED if status is ResponseStatus.COMPLETED else ItemStatus.INCOMPLETE
    assert done.response.output[0].status is item_status and conv.items[-1].status is item_status
    assert (done.response.error is not None) == (status is ResponseStatus.FAILED)


def test_cancelled_before_any_output() -> None:
    seq, conv = sequencer()
    events = seq.created() + seq.cancel(StatusReason.TURN_DETECTED)
    assert _types(events) == ["response.created", "response.done"] and len(conv) == 0


def test_message_then_function_call() -> None:
    seq, conv = sequencer()
    events = seq.created() + seq.audio(b"a", 1, "Let me check.")
    events += seq.function_call("clock", "call_9") + seq.arguments('{"tz"') + seq.arguments(':"UTC"}')
    events += seq.finish()
    assert _types(events) == [
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_audio_transcript.delta",
        "response.output_audio.delta",
        *END_OF_AUDIO[:-1],  # the message closes when the call starts
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    call = conv.items[-1]
    assert call == FunctionCall(seq.item_ids[1], "call_9", "clock", '{"tz":"UTC"}', ItemStatus.COMPLETED)
    added = [e for e in events if isinstance(e, OutputItemAdded)]
    assert [e.output_index for e in added] == [0, 1]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (lambda s: s.audio(b"", 0), "new"),  # before created()
        (lambda s: (s.created(), s.text("x")), "text output in a audio response"),
        (lambda s: (s.created(), s.arguments("{")), "outside a function call"),
        (lambda s: (s.created(), s.finish(), s.finish()), "done"),
    ],
)
def test_steps_out_of_order_are_the_callers_bug(
    step: Callable[[ResponseSequencer], object], message: str
) -> None:
    seq, _ = sequencer()
    with pytest.raises(ResponseSequenceError, match=message):
        step(seq)


def test_audio_counts_wire_samples_for_truncation() -> None:
    seq, conv = sequencer()
    seq.created()
    seq.audio(b"\x00" * 48000, 24000, "One second.")
    seq.audio(b"\x00" * 48000, 24000, "Two seconds.")
    seq.cancel(StatusReason.TURN_DETECTED)
    conv.truncate(seq.item_ids[0], 0, 1000)
    assert conv.get(seq.item_ids[0]).content[0].transcript == "One second."  # type: ignore[union-attr]


def test_g711_output_counts_at_8_khz() -> None:
    cfg = apply_update(
        CFG,
        parse_session({"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcmu"}}}}),
        PROFILE,
    )
    seq = ResponseSequencer(
        resolve_response(ResponseParams(), cfg, PROFILE), Ids("r"), Conversation(Ids("t"))
    )
    seq.created()
    seq.audio(b"\xff" * 8000, 8000, "One second.")
    done = seq.finish()[-1]
    assert isinstance(done, ResponseDone)
    part = done.response.output[0].content[0]  # type: ignore[union-attr]
    assert isinstance(part, OutputAudio) and (part.rate_hz, part.duration_ms) == (8000, 1000)


# ---------------------------------------------------------------- input


def test_input_vad_turn_exact_sequence() -> None:
    conv = Conversation(Ids("t"))
    conv.create(Message("before", Role.USER, (InputAudio("earlier"),)))
    inp = InputSequencer(conv)
    inp.appended(2000)
    events = inp.speech_started(350)
    iid = inp.pending_item_id
    assert iid is not None
    events += inp.speech_stopped(1900)
    events += inp.commit()
    events += inp.transcript_delta(iid, "Hello")
    events += inp.transcript_completed(iid, "Hello there.", 1.55)
    item = Message(iid, Role.USER, (InputAudio(None),))
    assert events == [
        SpeechStarted(350, iid),
        SpeechStopped(1900, iid),
        InputCommitted(iid, "before"),
        ItemAdded(item, "before"),
        ItemDone(item, "before"),
        InputTranscriptDelta(iid, 0, "Hello"),
        InputTranscriptCompleted(iid, 0, "Hello there.", 1.55),
    ]
    assert conv.get(iid) == Message(iid, Role.USER, (InputAudio("Hello there."),)) and inp.buffered_ms == 0


def test_manual_commit_needs_100_ms() -> None:
    inp = InputSequencer(Conversation(Ids("t")))
    inp.appended(60)
    with pytest.raises(RealtimeClientError) as info:
        inp.commit(manual=True)
    assert info.value.error.code is ErrorCode.INPUT_BUFFER_EMPTY
    inp.appended(60)
    events = inp.commit(manual=True)
    assert _types(events) == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
    ]


def test_clear_forgets_the_speech_in_progress() -> None:
    inp = InputSequencer(Conversation(Ids("t")))
    inp.appended(500)
    first = inp.speech_started(0)[0]
    assert inp.clear() == [InputCleared()] and inp.pending_item_id is None and inp.buffered_ms == 0
    second = inp.speech_started(600)[0]
    assert isinstance(first, SpeechStarted) and isinstance(second, SpeechStarted)
    assert first.item_id != second.item_id


def test_transcript_of_a_deleted_item_is_still_sent() -> None:
    conv = Conversation(Ids("t"))
    inp = InputSequencer(conv)
    inp.appended(500)
    iid = next(e.item_id for e in inp.commit() if isinstance(e, InputCommitted))
    conv.delete(iid)
    assert inp.transcript_completed(iid, "late", 0.5) == [InputTranscriptCompleted(iid, 0, "late", 0.5)]


def test_an_item_the_client_deleted_mid_response_is_not_done_in_the_conversation() -> None:
    seq, conv = sequencer()
    seq.created()
    seq.audio(b"a", 1, "Hello")
    conv.delete(seq.item_ids[0])
    events = seq.finish()
    assert "conversation.item.done" not in _types(events) and "response.output_item.done" in _types(events)
    assert len(conv) == 0
