"""The Realtime conversation store: placement, ids, errors in the protocol's shape,
truncation to the words heard, and the chat the LLM reads (table-driven, no I/O)."""

from __future__ import annotations

import pytest

from llm.base import ChatMessage, ToolCall
from voice_pipeline.conversation.heard import SpokenClause
from voice_pipeline.realtime.conversation import (
    Conversation,
    chat_json,
    chat_messages,
)
from voice_pipeline.realtime.errors import ErrorCode, RealtimeClientError
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.items import (
    FunctionCall,
    FunctionCallOutput,
    InputAudio,
    InputText,
    ItemReference,
    Message,
    OutputAudio,
    OutputText,
    Role,
)
from voice_pipeline.realtime.server_events import (
    ItemAdded,
    ItemDeleted,
    ItemDone,
    ItemRetrieved,
    ItemTruncated,
)

RATE = 24000


def text(item_id: str, words: str, role: Role = Role.USER) -> Message:
    part = InputText(words) if role is not Role.ASSISTANT else OutputText(words)
    return Message(item_id, role, (part,))


def ids_of(conv: Conversation) -> list[str]:
    return [i.id for i in conv.items]


@pytest.fixture
def conv() -> Conversation:
    c = Conversation(Ids("t"))
    for n in range(3):
        c.create(text(f"i{n}", f"message {n}"))
    return c


@pytest.mark.parametrize(
    ("previous", "order", "before"),
    [
        (None, ["i0", "i1", "i2", "new"], "i2"),
        ("", ["i0", "i1", "i2", "new"], "i2"),  # what the SDK's users send for "append"
        ("root", ["new", "i0", "i1", "i2"], None),
        ("i0", ["i0", "new", "i1", "i2"], "i0"),
        ("i2", ["i0", "i1", "i2", "new"], "i2"),
    ],
)
def test_placement(conv: Conversation, previous: str | None, order: list[str], before: str | None) -> None:
    new = text("new", "hi")
    assert conv.create(new, previous) == [ItemAdded(new, before), ItemDone(new, before)]
    assert ids_of(conv) == order


@pytest.mark.parametrize(
    ("item", "previous", "code", "param"),
    [
        (text("i1", "again"), None, ErrorCode.DUPLICATE_ITEM_ID, "item.id"),
        (text("new", "x"), "nope", ErrorCode.ITEM_NOT_FOUND, "previous_item_id"),
    ],
)
def test_create_refused_changes_nothing(
    conv: Conversation, item: Message, previous: str | None, code: ErrorCode, param: str
) -> None:
    with pytest.raises(RealtimeClientError) as info:
        conv.create(item, previous)
    assert (info.value.error.code, info.value.error.param) == (code, param)
    assert ids_of(conv) == ["i0", "i1", "i2"]


def test_create_assigns_ids_and_drops_audio() -> None:
    conv = Conversation(Ids("t"))
    conv.create(Message("", Role.USER, (InputAudio("hi", b"\x00" * 100),)))
    conv.create(FunctionCall("", "", "clock", "{}"))
    user, call = conv.items
    assert user.id.startswith("item_t_") and user == Message(user.id, Role.USER, (InputAudio("hi"),))
    assert isinstance(call, FunctionCall) and call.call_id.startswith("call_t_") and call.id != user.id


def test_server_ids_never_collide_with_client_ids() -> None:
    ids = Ids("t")
    conv = Conversation(ids)
    conv.create(text("item_t_2", "the client took the next id"))  # the conversation itself took _1
    assert conv.new_id() == "item_t_3"


def test_retrieve_and_delete(conv: Conversation) -> None:
    assert conv.retrieve("i1") == [ItemRetrieved(text("i1", "message 1"))]
    assert conv.delete("i1") == [ItemDeleted("i1")]
    assert ids_of(conv) == ["i0", "i2"]
    for op, code, message in (
        (
            conv.retrieve,
            ErrorCode.RETRIEVE_NOT_FOUND,
            "Error retrieving item: the item with id 'i1' does not exist.",
        ),
        (
            conv.delete,
            ErrorCode.DELETE_NOT_FOUND,
            "Error deleting item: the item with id 'i1' does not exist.",
        ),
    ):
        with pytest.raises(RealtimeClientError) as info:
            op("i1")  # OpenAI's codes and messages (clients such as Pipecat match on the code)
        assert (info.value.error.code, info.value.error.param, info.value.error.message) == (
            code,
            "item_id",
            message,
        )


def test_the_oldest_item_goes_when_full() -> None:
    conv = Conversation(Ids("t"), max_items=2)
    conv.create(text("a", "1"))
    conv.create(text("b", "2"))
    events = conv.create(text("c", "3"))
    assert events[0] == ItemDeleted("a") and ids_of(conv) == ["b", "c"]
    events = conv.create(text("d", "4"), "root")  # the new first item stays; the next oldest goes
    assert events[0] == ItemDeleted("b") and ids_of(conv) == ["d", "c"]


# ---------------------------------------------------------------- truncation

# "It is sunny today." (1 s) then "Bring a hat if you go out." (1.5 s), at 24 kHz
CLAUSES = (SpokenClause("It is sunny today.", RATE), SpokenClause("Bring a hat if you go out.", 36000))


def spoken() -> Conversation:
    conv = Conversation(Ids("t"))
    conv.create(text("u", "Weather?"))
    audio = OutputAudio("It is sunny today. Bring a hat if you go out.", CLAUSES, RATE)
    conv.add(Message("a", Role.ASSISTANT, (audio,)))
    return conv


@pytest.mark.parametrize(
    ("audio_end_ms", "heard"),
    [
        (0, ""),
        (500, "It is"),  # half the clause's audio: its words that end within half its characters
        (1000, "It is sunny today."),
        (1750, "It is sunny today. Bring a hat"),
        (2500, "It is sunny today. Bring a hat if you go out."),
    ],
)
def test_truncate_cuts_the_transcript_to_what_was_heard(audio_end_ms: int, heard: str) -> None:
    conv = spoken()
    assert conv.truncate("a", 0, audio_end_ms) == [ItemTruncated("a", 0, audio_end_ms)]
    part = conv.get("a").content[0]  # type: ignore[union-attr]
    assert isinstance(part, OutputAudio) and part.transcript == heard
    assert part.clauses == CLAUSES  # all that was spoken is kept: a later truncate may move the cut


def test_truncate_again_moves_the_cut_either_way() -> None:
    conv = spoken()
    conv.truncate("a", 0, 500)
    conv.truncate("a", 0, 2500)
    assert conv.get("a").content[0].transcript.endswith("go out.")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("item_id", "content_index", "audio_end_ms", "code", "param"),
    [
        ("zzz", 0, 10, ErrorCode.TRUNCATE_NOT_FOUND, "item_id"),
        ("u", 0, 10, ErrorCode.INVALID_VALUE, "item_id"),  # a user message
        ("a", 1, 10, ErrorCode.INVALID_VALUE, "content_index"),
        ("a", 0, 2501, ErrorCode.INVALID_VALUE, "audio_end_ms"),  # past the end of the audio
        ("t", 0, 10, ErrorCode.INVALID_VALUE, "content_index"),  # text, not audio
    ],
)
def test_truncate_refused(
    item_id: str, content_index: int, audio_end_ms: int, code: ErrorCode, param: str
) -> None:
    conv = spoken()
    conv.add(text("t", "Typed reply.", Role.ASSISTANT))
    with pytest.raises(RealtimeClientError) as info:
        conv.truncate(item_id, content_index, audio_end_ms)
    assert (info.value.error.code, info.value.error.param) == (code, param)


# ---------------------------------------------------------------- the LLM's view


def test_chat_messages_in_order() -> None:
    items = [
        Message("s", Role.SYSTEM, (InputText("Use metric units."),)),
        Message("u1", Role.USER, (InputAudio("How far is"), InputText("Paris?"))),
        Message("a1", Role.ASSISTANT, (OutputAudio("About 300 km.", CLAUSES),)),
        Message("u2", Role.USER, (InputAudio(None),)),  # not transcribed yet: left out
        Message("a2", Role.ASSISTANT, (OutputAudio("", CLAUSES),)),  # cut before a word was heard
        FunctionCall("f", "call_1", "distance", '{"to": "Paris"}'),
        FunctionCallOutput("o", "call_1", "310 km"),
    ]
    assert chat_messages("Be brief.", items) == [
        ChatMessage("system", "Be brief."),
        ChatMessage("system", "Use metric units."),
        ChatMessage("user", "How far is Paris?"),
        ChatMessage(
            "assistant", "About 300 km.", tool_calls=(ToolCall("call_1", "distance", '{"to": "Paris"}'),)
        ),
        ChatMessage("tool", "310 km", tool_call_id="call_1"),
    ]


def test_a_reply_s_words_and_parallel_calls_are_one_assistant_message() -> None:
    items = [
        text("u", "Weather in Paris and Rome?"),
        Message("a", Role.ASSISTANT, (OutputText("Let me look."),)),
        FunctionCall("f1", "c1", "weather", '{"city": "Paris"}'),
        FunctionCall("f2", "c2", "weather", '{"city": "Rome"}'),
        FunctionCallOutput("o1", "c1", "17 C"),
        FunctionCallOutput("o2", "c2", "21 C"),
        FunctionCall("f3", "c3", "clock", "{}"),  # a later reply: calls only
    ]
    calls = (ToolCall("c1", "weather", '{"city": "Paris"}'), ToolCall("c2", "weather", '{"city": "Rome"}'))
    assert chat_messages("", items) == [
        ChatMessage("user", "Weather in Paris and Rome?"),
        ChatMessage("assistant", "Let me look.", tool_calls=calls),
        ChatMessage("tool", "17 C", tool_call_id="c1"),
        ChatMessage("tool", "21 C", tool_call_id="c2"),
        ChatMessage("assistant", "", tool_calls=(ToolCall("c3", "clock", "{}"),)),
    ]


def test_chat_without_instructions() -> None:
    assert chat_messages("", [text("u", "Hi")]) == [ChatMessage("user", "Hi")]


def test_chat_json_is_the_openai_chat_format() -> None:
    entries = [
        ChatMessage("user", "Time?"),
        ChatMessage("assistant", "", tool_calls=(ToolCall("c1", "clock", "{}"),)),
        ChatMessage("tool", "noon", tool_call_id="c1"),
    ]
    assert chat_json(entries) == [
        {"role": "user", "content": "Time?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "noon"},
    ]


def test_context_resolves_references(conv: Conversation) -> None:
    extra = text("x", "inline")
    assert conv.context(None) == conv.items
    assert conv.context([ItemReference("i2"), extra]) == (conv.get("i2"), extra)
    assert conv.context([]) == ()
    with pytest.raises(RealtimeClientError) as info:
        conv.context([extra, ItemReference("gone")])
    assert (info.value.error.code, info.value.error.param) == (
        ErrorCode.ITEM_NOT_FOUND,
        "response.input[1].id",
    )


def test_set_transcript(conv: Conversation) -> None:
    conv.add(Message("audio", Role.USER, (InputAudio(None),)))
    conv.set_transcript("audio", 0, "hello there")
    assert conv.get("audio") == Message("audio", Role.USER, (InputAudio("hello there"),))
    with pytest.raises(RealtimeClientError):
        conv.set_transcript("i0", 0, "not audio")
