"""Server-side tools for the tool tests (``dialogue.tools: [tool_fixtures:get_weather]``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

from voice_pipeline.tools import tool

#: a /v1/realtime client's own function (the client runs it: tests/test_e2e_realtime_tools*.py)
WEATHER_FUNCTION = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city"}},
        "required": ["city"],
    },
}

#: what ``get_weather`` answers: the end-to-end test listens for its "17"
WEATHER = "The temperature in Paris is 17 degrees."


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Get the current temperature in a city.

    Args:
        city: the city's name, e.g. Paris
        unit: the unit of the temperature
    """
    return WEATHER


#: what ``capital_of`` answers: the browser test looks for it on the demo page
CAPITAL = "The capital of France is Paris."


def capital_of(country: str) -> str:
    """Get the capital city of a country.

    Args:
        country: the country's name, e.g. France
    """
    return CAPITAL


#: set by the tests to hold ``slow_lookup`` / ``finish_booking`` until they say go
gate = asyncio.Event()
#: what ``finish_booking`` was asked to book, once it has finished
booked: list[str] = []


async def slow_lookup(order: int) -> dict[str, object]:
    """Look up an order (slow: waits for the test's gate).

    Args:
        order: the order number
    """
    await gate.wait()
    return {"order": order, "status": "shipped"}


@tool(cancel_on_interruption=False)
async def finish_booking(name: str) -> str:
    """Book a table; barge-in lets it finish.

    Args:
        name: whose name the table is under
    """
    await gate.wait()
    booked.append(name)
    return f"booked for {name}"


@tool(timeout_s=0.05)
async def hangs() -> str:
    """Never returns (its own timeout stops it)."""
    await asyncio.Event().wait()
    return "never"


def broken(x: int) -> str:
    """Raises.

    Args:
        x: anything
    """
    raise RuntimeError(f"no luck with {x}")


thread_calls: list[str] = []


def in_thread(word: str) -> str:
    """Runs in a worker thread.

    Args:
        word: a word
    """
    thread_calls.append(threading.current_thread().name)
    return word.upper()


@tool(schema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
def explicit(**kwargs: object) -> str:
    """Searches (its schema given explicitly)."""
    return f"found {kwargs['q']}"


def untyped(x):  # type: ignore[no-untyped-def]
    """No hints: cannot be described."""
    return x


NOT_CALLABLE = 42
