"""What the LLM sees on /v1/realtime: the conversation's items as chat, by the History's rules."""

from __future__ import annotations

from llm.base import ChatMessage, ToolCall
from voice_pipeline.conversation.heard import SpokenClause
from voice_pipeline.conversation.history import History, message_tokens
from voice_pipeline.realtime.context import RealtimeContext, chat_tokens, fit_request, render
from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.items import (
    FunctionCall,
    FunctionCallOutput,
    InputAudio,
    InputText,
    ItemStatus,
    Message,
    OutputAudio,
    OutputText,
    Role,
)

SAID = (SpokenClause("It is sunny.", 24000), SpokenClause("Bring a hat.", 24000))


def test_items_render_as_the_history_would_have_them() -> None:
    items = [
        Message("a", Role.USER, (InputAudio("what is the weather"),)),
        Message("b", Role.ASSISTANT, (OutputAudio("It is sunny. Bring a hat.", SAID),)),
        Message("c", Role.USER, (InputAudio(None),)),  # not transcribed yet: left out
        Message("d", Role.USER, (InputText("and tomorrow?"),)),
        Message("e", Role.ASSISTANT, (OutputAudio("It is sunny.", SAID),)),  # cut after one clause
        Message("f", Role.ASSISTANT, (OutputAudio("", SAID),)),  # cut before a word: nothing
        FunctionCall("g", "call_1", "clock", "{}"),  # joins the reply before it
        FunctionCallOutput("h", "call_1", '{"time": "noon"}'),
        Message("i", Role.ASSISTANT, (OutputText("A typed reply"),), ItemStatus.INCOMPLETE),
        Message("j", Role.SYSTEM, (InputText("Be brief."),)),
    ]
    assert render("You help.", items) == [
        ChatMessage("system", "You help."),
        ChatMessage("user", "what is the weather"),
        ChatMessage("assistant", "It is sunny. Bring a hat."),
        ChatMessage("user", "and tomorrow?"),
        ChatMessage("assistant", "It is sunny....", tool_calls=(ToolCall("call_1", "clock", "{}"),)),
        ChatMessage("tool", '{"time": "noon"}', tool_call_id="call_1"),
        ChatMessage("assistant", "A typed reply..."),
        ChatMessage("system", "Be brief."),
    ]
    assert render("", items[:1]) == [ChatMessage("user", "what is the weather")]


def test_a_request_is_cut_like_the_historys() -> None:
    turns = []
    for n in range(40):
        turns += [
            ChatMessage("user", f"question number {n} about the weather"),
            ChatMessage("assistant", "Sunny."),
        ]
    history = History("You help.", 160)
    history.messages = list(turns)
    expected = history.request("the last one")
    got = fit_request([ChatMessage("system", "You help."), *turns, ChatMessage("user", "the last one")], 160)
    assert got == expected
    assert got[0].role == "system" and got[-1] == ChatMessage("user", "the last one")
    assert sum(message_tokens(m) for m in got) <= 160


def test_the_turns_own_item_is_rendered_with_the_words_being_answered() -> None:
    conv = Conversation(Ids("x"))
    ctx = RealtimeContext(conv, "You help.", 1024)
    conv.add(Message("u1", Role.USER, (InputAudio("hi"),)))
    conv.add(Message("u2", Role.USER, (InputAudio(None),)))  # turn 5's item, committed
    ctx.turn_items[5] = "u2"
    assert ctx.request("how are you", 5) == [
        ChatMessage("system", "You help."),
        ChatMessage("user", "hi"),
        ChatMessage("user", "how are you"),
    ]
    assert ctx.request("not committed yet", 6)[-1] == ChatMessage("user", "not committed yet")
    assert (ctx.prompt_tokens(5) or 0) > 0 and ctx.prompt_tokens(7) is None
    version = ctx.version
    ctx.instructions = "You help."  # the same: nothing changed
    assert ctx.version == version
    ctx.instructions = "Be brief."
    assert ctx.version == version + 1


def test_a_request_after_function_outputs_keeps_the_calls_and_their_outputs() -> None:
    calls = (ToolCall("c1", "weather", '{"city": "Paris"}'), ToolCall("c2", "weather", '{"city": "Rome"}'))
    turn = [(ChatMessage("user", f"question {n}"), ChatMessage("assistant", "Hm.")) for n in range(40)]
    old = [m for pair in turn for m in pair]
    last = [
        ChatMessage("user", "weather in Paris and Rome?"),
        ChatMessage("assistant", "", tool_calls=calls),
        ChatMessage("tool", '{"temperature_c": 17}', tool_call_id="c1"),
        ChatMessage("tool", '{"temperature_c": 21}', tool_call_id="c2"),
    ]
    got = fit_request([ChatMessage("system", "You help."), *old, *last], 120)
    assert got[0] == ChatMessage("system", "You help.") and got[-4:] == last
    assert 0 < len(got) - 5 < len(old)  # older turns were dropped whole, some kept
    assert got[1].role == "user"
    # even a budget too small for anything but them keeps what is being answered
    assert fit_request([ChatMessage("system", "You help."), *old, *last], 10) == [
        ChatMessage("system", "You help."),
        *last,
    ]
    assert chat_tokens(last[1]) > message_tokens(last[1])  # the calls' arguments count
