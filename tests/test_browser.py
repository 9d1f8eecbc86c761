"""The browser demo (clients/static) end to end: real Chromium, real server, real models.

Debian's Chromium (``/usr/bin/chromium``) is driven by Playwright (its Python
package only: no browser download). Chromium's fake microphone plays a WAV made
here with espeak-ng: "What is the capital of France?" and then a long silence
(Chromium loops the file; the silence lets the reply finish before the question
comes round again). The page captures it through its AudioWorklet, streams it
to the real server (``VoiceServer`` started in-process on a free port, sharing
the session's engines), and plays the reply through its playback worklet, whose
played-sample count the page reports back. Chromium's noise suppression and gain
control, which the page turns on, make tiny.en hear "friends" for "France" in
some passes, so the test waits for the first turn whose transcript is the
question. The page's counters are read from ``window.demo``. A screenshot of
the page is saved and its path printed. Run twice: plain, and with a server-side tool
(``tool_choice: required``): then the page shows the call, its result, and the
waterfall's tool stages.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import soundfile as sf
from playwright.async_api import Page, async_playwright
from servers import running_server
from speech import concat, espeak, normalize, silence
from tool_fixtures import CAPITAL

from voice_pipeline.ledger.ledger import CRITICAL_PATH, TOOL_PATH
from voice_pipeline.server.app import VoiceServer

if TYPE_CHECKING:
    from voice_pipeline.config import Config
    from voice_pipeline.engines import Engines

pytestmark = pytest.mark.real_models

CHROMIUM = "/usr/bin/chromium"
QUESTION = "What is the capital of France?"
#: a guard against a hang, not a timing assertion: the question comes round every
#: ~13 s, so a pass misheard or clipped by the page still starting gets another try
TURN_TIMEOUT_MS = 240_000


def chromium_args(wav: Path) -> list[str]:
    return [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        # a microphone without a prompt, fed from the WAV file (looped)
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
        # nothing may reach the network
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
    ]


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("browser") / "question.wav"
    audio = concat(silence(1.0), espeak(QUESTION), silence(10.0))
    sf.write(path, audio, 16000, subtype="PCM_16")
    return path


@pytest.fixture
async def server(engines: Engines, config: Config, tool: bool) -> AsyncIterator[VoiceServer]:
    if tool:
        dialogue = dataclasses.replace(
            config.dialogue,
            tools=("tool_fixtures:capital_of",),
            tool_choice="required",
            system_prompt="You are a voice assistant. Answer by repeating the tool's result in one sentence.",
        )
        config = dataclasses.replace(config, dialogue=dialogue)
    async with running_server(engines, config, host="127.0.0.1") as srv:
        yield srv


def asks_the_question(text: str) -> bool:
    words = normalize(text).split()
    return "capital" in words and "france" in words


async def wait_for_answered_question(page: Page) -> dict[str, Any]:
    """The first turn.latency record whose user text is the question."""
    await page.wait_for_function(
        """() => window.demo.completed.some(
             (r) => /\\bcapital\\b/i.test(r.user_text) && /\\bfrance\\b/i.test(r.user_text))""",
        timeout=TURN_TIMEOUT_MS,
        polling=250,
    )
    records: list[dict[str, Any]] = await page.evaluate("window.demo.completed")
    return next(r for r in records if asks_the_question(r["user_text"]))


@pytest.mark.parametrize("tool", [False, True], ids=["plain", "tool"])
async def test_demo_page_talks_to_the_real_server(
    server: VoiceServer, question_wav: Path, tmp_path: Path, tool: bool
) -> None:
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    page_errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(question_wav))
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda exc: page_errors.append(str(exc)))
            await page.goto(server.url)
            await page.click("#start")
            record = await wait_for_answered_question(page)
            turn = page.locator(f'.turn[data-turn-id="{record["turn_id"]}"]')
            await turn.locator("svg.wf").wait_for()
            demo: dict[str, Any] = await page.evaluate("window.demo")
            user_shown = await turn.locator(".msg.user .text").inner_text()
            reply_shown = await turn.locator(".msg.assistant .text").inner_text()
            stage_rows = await turn.locator("svg.wf .wf-stage").count()
            bars = await turn.locator("svg.wf .wf-bar").count()
            tools_shown = not await turn.locator(".msg.tools").is_hidden()
            calls_shown = await turn.locator(".msg.tools li.call").all()
            calls = [
                (await c.locator("code").inner_text(), await c.locator(".result").inner_text(),
                 await c.get_attribute("class"))
                for c in calls_shown
            ]  # fmt: skip

            shot = tmp_path / "demo.png"
            await page.screenshot(path=str(shot), full_page=True)
            print(f"\nscreenshot of the demo page: {shot}")

            await page.click("#start")  # Stop: the server closes with 1000
            await page.wait_for_function("window.demo.state === 'closed'", timeout=30_000)
        finally:
            await browser.close()

    assert page_errors == []
    # the question's transcript is on the page
    assert asks_the_question(user_shown), user_shown
    # the assistant's reply text streamed in and is shown
    assert record["assistant_text"].strip()
    assert normalize(reply_shown) == normalize(record["assistant_text"])
    # reply audio arrived, was played, and the played position was reported
    assert demo["audioFramesReceived"] > 0
    assert demo["samplesReceived"] > 0
    assert demo["samplesPlayed"] > 0
    assert demo["playbackReportsSent"] > 0
    assert record["work"]["audio_heard_s"] > 0
    # the waterfall: a row per critical-path stage and a bar for each measured one
    path = TOOL_PATH if tool else CRITICAL_PATH
    assert stage_rows == len(path)
    assert bars >= sum(1 for s in path if s.name in record["stages_ms"])
    # the tool call (name and arguments) and its result are shown, the call no longer running
    if tool:
        assert tools_shown and len(calls) == 1, calls
        signature, result, classes = calls[0]
        assert signature.startswith("capital_of(") and signature.endswith(")"), signature
        assert isinstance(json.loads(signature[len("capital_of(") : -1]).get("country"), str), signature
        assert result == f"→ {CAPITAL}" and (classes or "").split() == ["call"], (result, classes)
    else:
        assert not tools_shown and calls == []
    assert demo["waterfallsDrawn"] >= 1
    # the page never misused the protocol
    protocol_errors = [e for e in demo["errors"] if not e["where"].startswith(("turn ", "close"))]
    assert protocol_errors == [], protocol_errors
