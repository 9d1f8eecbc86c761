"""The pure tool-call parser (llm/toolcalls.py, llm/calljson.py): text vs calls in a streamed reply."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import pytest

from llm.base import ToolCall, ToolCallDelta
from llm.calljson import json_value_end, salvage_calls
from llm.toolcalls import (
    NamedCallStream,
    Parsed,
    ToolCallCollector,
    ToolCallParser,
    arguments_object,
    new_call_id,
    parse_tool_calls,
)

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TIME = '{"name": "get_time", "arguments": {"zone": "CET"}}'


def counter() -> Callable[[str], Callable[[], str]]:
    def make(prefix: str) -> Callable[[], str]:
        numbers = itertools.count()
        return lambda: f"{prefix}{next(numbers)}"

    return make


def ids() -> Callable[[], str]:
    return counter()("c")


def run(pieces: list[str]) -> tuple[list[str], list[ToolCallDelta], ToolCallParser]:
    """Feed the pieces, then finish; the text of each step and all the call deltas."""
    parser = ToolCallParser(ids())
    texts: list[str] = []
    deltas: list[ToolCallDelta] = []
    for piece in pieces:
        out = parser.feed(piece)
        texts.append(out.text)
        deltas.extend(out.calls)
    end = parser.finish()
    texts.append(end.text)
    deltas.extend(end.calls)
    return texts, deltas, parser


def chunkings(text: str) -> list[list[str]]:
    """The same reply streamed whole, char by char, and in pieces of 3 and 7."""
    return [[text], list(text), [text[i : i + 3] for i in range(0, len(text), 3)],
            [text[i : i + 7] for i in range(0, len(text), 7)]]  # fmt: skip


CASES = [
    # (reply, expected text, expected (name, arguments) calls)
    ("The weather in Paris is sunny.", "The weather in Paris is sunny.", []),
    ("", "", []),
    ("  Hello", "  Hello", []),
    (WEATHER, "", [("get_weather", '{"city": "Paris"}')]),
    ("\n" + WEATHER + "\n", "", [("get_weather", '{"city": "Paris"}')]),
    (f"<tool_call>\n{WEATHER}\n</tool_call>", "", [("get_weather", '{"city": "Paris"}')]),
    (
        f"<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{TIME}\n</tool_call>",
        "",
        [("get_weather", '{"city": "Paris"}'), ("get_time", '{"zone": "CET"}')],
    ),
    (f"[{WEATHER}, {TIME}]", "", [("get_weather", '{"city": "Paris"}'), ("get_time", '{"zone": "CET"}')]),
    (f"{WEATHER}\n{TIME}", "", [("get_weather", '{"city": "Paris"}'), ("get_time", '{"zone": "CET"}')]),
    # text, then a call
    (
        f"Let me check.\n<tool_call>\n{WEATHER}\n</tool_call>",
        "Let me check.\n",
        [("get_weather", '{"city": "Paris"}')],
    ),
    # a call, then text (blank text between is dropped)
    (f"{WEATHER}\n\nIt is sunny.", "It is sunny.", [("get_weather", '{"city": "Paris"}')]),
    # the OpenAI form: arguments as a JSON string, "parameters", a "function" wrapper
    ('{"name": "f", "arguments": "{\\"x\\": 1}"}', "", [("f", '{"x": 1}')]),
    ('{"name": "f", "parameters": {"x": 1}}', "", [("f", '{"x": 1}')]),
    ('{"type": "function", "function": {"name": "f", "arguments": {}}}', "", [("f", "{}")]),
    ('{"name": "f"}', "", [("f", "{}")]),
    (
        '<tool_call>{"name": "f", "arguments": {"s": "a } ] </tool_call> b"}}</tool_call>',
        "",
        [("f", '{"s": "a } ] </tool_call> b"}')],
    ),
    # a Markdown fence around bare calls is dropped (one call or several, text after it)
    (f"```json\n{WEATHER}\n```", "", [("get_weather", '{"city": "Paris"}')]),
    (
        f"```\n{WEATHER}\n{TIME}\n```\nDone.",
        "Done.",
        [("get_weather", '{"city": "Paris"}'), ("get_time", '{"zone": "CET"}')],
    ),
    # ... but a fence of anything else is text
    ("```python\nprint(1)\n```", "```python\nprint(1)\n```", []),
    ('```json\n{"answer": 42}\n```', '```json\n{"answer": 42}\n```', []),
    ("```\nnot json\n```", "```\nnot json\n```", []),
    ("`code` here", "`code` here", []),
    # JSON or brackets that are not calls are text
    ('{"answer": 42}', '{"answer": 42}', []),
    ("[laughs] Sure!", "[laughs] Sure!", []),
    ("[1, 2, 3] are numbers", "[1, 2, 3] are numbers", []),
    ("{ not json at all", "{ not json at all", []),
    ("[]", "[]", []),
    ("a < b and <tool is not a tag", "a < b and <tool is not a tag", []),
    ("Use {braces} mid-text", "Use {braces} mid-text", []),
    # unicode arguments are kept as they are
    ('{"name": "f", "arguments": {"city": "Zürich"}}', "", [("f", '{"city": "Zürich"}')]),
]


@pytest.mark.parametrize(("reply", "text", "calls"), CASES)
def test_text_and_calls_whatever_the_chunking(reply: str, text: str, calls: list[tuple[str, str]]) -> None:
    for pieces in chunkings(reply):
        texts, deltas, parser = run(pieces)
        assert "".join(texts) == text, pieces
        assert [(d.name, d.arguments) for d in deltas] == calls
        assert [d.index for d in deltas] == list(range(len(calls)))
        assert all(d.call_id for d in deltas)
        assert [(c.name, c.arguments) for c in parser.calls] == calls
        assert [c.call_id for c in parser.calls] == [d.call_id for d in deltas]
        for name, arguments in calls:
            assert name in reply
            assert arguments_object(arguments) is not None


def test_plain_text_reaches_the_caller_at_once() -> None:
    parser = ToolCallParser(ids())
    assert parser.feed("Hello") == Parsed("Hello")
    assert parser.feed(" there, <") == Parsed(" there, ")  # "<" may start a tag: held
    assert parser.feed("b>bold") == Parsed("<b>bold")
    assert parser.feed(" <tool_") == Parsed(" ")
    assert parser.feed("call>") == Parsed("")
    out = parser.feed(WEATHER + "</tool_call>")
    assert out.text == ""
    assert [(d.name, d.arguments) for d in out.calls] == [("get_weather", '{"city": "Paris"}')]
    assert parser.finish() == Parsed()


def test_a_reply_starting_with_a_brace_is_held_until_decided() -> None:
    parser = ToolCallParser(ids())
    assert parser.feed("{") == Parsed()
    assert parser.feed(' "name": "get_weather", "arguments": {"city"') == Parsed()
    out = parser.feed(': "Paris"}}')
    assert out.text == "" and len(out.calls) == 1
    # text that cannot be a call is released as soon as that is clear
    parser = ToolCallParser(ids())
    assert parser.feed("{") == Parsed()
    assert parser.feed("oops") == Parsed("{oops")
    parser = ToolCallParser(ids())
    assert parser.feed("[") == Parsed()
    assert parser.feed("1") == Parsed("[1")


def test_each_call_is_emitted_when_it_closes() -> None:
    parser = ToolCallParser(ids())
    out = parser.feed(f"<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{TIME[:10]}")
    assert [d.name for d in out.calls] == ["get_weather"]
    out = parser.feed(TIME[10:] + "\n</tool_call>")
    assert [(d.index, d.name) for d in out.calls] == [(1, "get_time")]


MALFORMED = [
    # (reply, expected (name, arguments as written))
    ('<tool_call>{"name": "f", "arguments": {"city": Paris}}</tool_call>', [("f", '{"city": Paris}')]),
    ('<tool_call>{"name": "f", "arguments": {"city": "Paris"}</tool_call>', [("f", '{"city": "Paris"}')]),
    # cut short (max_tokens): the tag never closes, the arguments as far as they go
    ('<tool_call>\n{"name": "f", "arguments": {"city": "Par', [("f", '{"city": "Par')]),
    ('{"name": "f", "arguments": {"city": "Par', [("f", '{"city": "Par')]),
    ('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": ', [("a", "{}"), ("b", '{"x":')]),
    ('<tool_call>{"name": "f", "arguments": 12, }</tool_call>', [("f", "12")]),
    ('<tool_call>{"name": "f", "arguments": "not json"}</tool_call>', [("f", "not json")]),
    # no name at all: a call named "" carrying what was written
    ("<tool_call>garbage</tool_call>", [("", "garbage")]),
    ("<tool_call></tool_call>", [("", "")]),
    ("<tool_call>\n", [("", "")]),
    ('```json\n{"name": "f", "arguments": {"x": 1}\n```', [("f", '{"x": 1}')]),
    ('<tool_call>{"name": "f"</tool_c', [("f", "{}")]),
]


@pytest.mark.parametrize(("reply", "calls"), MALFORMED)
def test_malformed_calls_are_passed_through_as_written(reply: str, calls: list[tuple[str, str]]) -> None:
    for pieces in chunkings(reply):
        texts, deltas, _ = run(pieces)
        assert "".join(texts) == ""
        assert [(d.name, d.arguments) for d in deltas] == calls, pieces


def test_call_ids_are_unique_and_openai_shaped() -> None:
    made = {new_call_id() for _ in range(1000)}
    assert len(made) == 1000
    assert all(i.startswith("call_") and len(i) == 29 for i in made)
    _, calls = parse_tool_calls(f"<tool_call>{WEATHER}</tool_call><tool_call>{WEATHER}</tool_call>")
    assert len({c.call_id for c in calls}) == 2


def test_parse_tool_calls_whole_text() -> None:
    text, calls = parse_tool_calls(f"Checking.<tool_call>{WEATHER}</tool_call>", ids())
    assert text == "Checking."
    assert calls == [ToolCall("c0", "get_weather", '{"city": "Paris"}')]


def test_feed_after_finish_is_an_error_and_finish_is_idempotent() -> None:
    parser = ToolCallParser(ids())
    parser.feed("{")
    assert parser.finish() == Parsed("{")
    assert parser.finish() == Parsed()
    with pytest.raises(RuntimeError):
        parser.feed("x")


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ('{"a": 1}', 0, 8),
        ('{"a": "}"} tail', 0, 10),
        ('[{"a": [1, 2]}, 3]x', 0, 18),
        ('{"a": "\\"}"}', 0, 12),
        ('"str\\"ing" x', 0, 10),
        ('{"a": ', 0, None),
        ('xx{"a": 1}', 2, 10),
    ],
)
def test_json_value_end(text: str, start: int, end: int | None) -> None:
    assert json_value_end(text, start) == end


def test_salvage_takes_every_named_call() -> None:
    assert salvage_calls('{"name": "a"} {"name": "b", "arguments": {"q": 1}') == [
        ("a", "{}"),
        ("b", '{"q": 1}'),
    ]
    assert salvage_calls('{"name": "caf\\u00e9", "arguments": {}}') == [("café", "{}")]


def test_named_call_stream_streams_the_arguments() -> None:
    stream = NamedCallStream("get_weather", ids())
    first = stream.feed('{"city": ')
    assert first == Parsed("", (ToolCallDelta(0, "c0", "get_weather", '{"city": '),))
    assert stream.feed("") == Parsed()
    assert stream.feed('"Paris"}') == Parsed("", (ToolCallDelta(0, None, None, '"Paris"}'),))
    assert stream.finish() == Parsed()
    assert stream.calls == [ToolCall("c0", "get_weather", '{"city": "Paris"}')]
    # a reply with no text at all is still the one call
    empty = NamedCallStream("f", ids())
    assert empty.finish() == Parsed("", (ToolCallDelta(0, "c0", "f", ""),))
    assert empty.calls == [ToolCall("c0", "f", "")]


def test_collector_joins_deltas_by_index() -> None:
    collector = ToolCallCollector()
    collector.add_all(
        [
            ToolCallDelta(0, "id0", "a", '{"x"'),
            ToolCallDelta(1, "id1", "b", "{}"),
            ToolCallDelta(0, None, None, ": 1}"),
        ]
    )
    assert collector.calls() == [ToolCall("id0", "a", '{"x": 1}'), ToolCall("id1", "b", "{}")]
    assert json.loads(collector.calls()[0].arguments) == {"x": 1}
    assert ToolCallCollector().calls() == []


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [('{"a": 1}', {"a": 1}), ("[1]", None), ("{bad", None), ("", None)],
)
def test_arguments_object(arguments: str, expected: object) -> None:
    assert arguments_object(arguments) == expected
