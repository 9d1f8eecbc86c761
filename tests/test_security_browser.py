"""The demo page with a server that requires a token (real Chromium, real server and models).

Opened as ``/?token=T`` the page passes the token on to ``/ws`` (a browser cannot
set headers on a WebSocket) and removes it from the address bar; opened without
it, the handshake is refused (HTTP 401) and the page says the connection failed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import quote

import pytest
import soundfile as sf
from playwright.async_api import async_playwright
from speech import concat, espeak, silence
from test_browser import CHROMIUM, chromium_args
from test_server_e2e import running_server

from voice_pipeline.config import Config
from voice_pipeline.engines import Engines

pytestmark = pytest.mark.real_models

TOKEN = "page-t0ken/with+odd&chars"


async def test_the_page_passes_its_token_to_ws_and_drops_it_from_the_address_bar(
    engines: Engines, config: Config, tmp_path: Path
) -> None:
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    wav = tmp_path / "mic.wav"
    sf.write(wav, concat(silence(0.5), espeak("Hello."), silence(5.0)), 16000, subtype="PCM_16")
    async with running_server(engines, config, host="127.0.0.1", auth_token=TOKEN) as srv:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(wav))
            try:
                page = await browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                # with the token (URL-encoded, as a user would paste it)
                await page.goto(f"{srv.url}?token={quote(TOKEN, safe='')}&aec=1")
                assert "token" not in page.url and "aec=1" in page.url
                await page.click("#start")
                await page.wait_for_function("window.demo.state === 'live'", timeout=60_000)
                assert srv.metrics.sessions_total == 1
                await page.click("#start")
                await page.wait_for_function("window.demo.state === 'closed'", timeout=30_000)
                # without it
                await page.goto(srv.url)
                await page.click("#start")
                await page.wait_for_function("window.demo.state === 'failed'", timeout=60_000)
                assert srv.metrics.sessions_refused == {"auth": 1}
                assert srv.metrics.sessions_total == 1
            finally:
                await browser.close()
        assert errors == []
