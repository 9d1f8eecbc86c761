"""One client on ``/v1/realtime``: its events in, its session, its writer.

The asyncio side of the endpoint, and thin: each text frame is parsed
(:func:`~voice_pipeline.realtime.client_events.parse_client_event`), handed to the
:class:`~voice_pipeline.realtime.bridge.RealtimeBridge` (which decides and answers
with server events), and what the bridge asked for is carried out on the session
-- the same :class:`~voice_pipeline.conversation.session.Session` and turn machine as ``/ws``:

=============================  ==========================================================
``session.update``             ``Session.configure`` (turn detection, VAD, barge-in,
                               auto replies, how they are given); a new input decoder
``input_audio_buffer.append``  decoded to 16 kHz -> ``Session.push_audio``
``input_audio_buffer.commit``  ``Session.commit``; ``.clear``: ``Session.clear_input``
``conversation.item.*``        the conversation (the bridge); user audio sent in an item
                               is transcribed by the ASR in a worker thread
``response.create``            ``Session.respond`` (the messages rendered from the items)
``response.cancel``            ``Session.cancel``; ``output_audio_buffer.clear`` likewise
                               for every reply whose audio plays
=============================  ==========================================================

Every client event that cannot be carried out is answered with an ``error`` event
in the protocol's shape and the session goes on; an unexpected exception while
carrying one out is logged and answered with a ``server_error`` (never a crash).
No client event for ``server.idle_timeout_s`` closes the connection (1000, ``idle``).

The session, its idle deadline and its close are the shared edge's
(:class:`~voice_pipeline.edge.SessionScope`, as on ``/ws``, ``/twilio`` and
AudioSocket): on this protocol every client event counts as activity, and the
scope closes the session, then the transcriptions, then the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voice_pipeline import events as ev
from voice_pipeline.audio import Float32
from voice_pipeline.clock import now_ns
from voice_pipeline.config import Config
from voice_pipeline.conversation.session import Session
from voice_pipeline.conversation.steering import ReplyRequest
from voice_pipeline.edge import IDLE, EdgeMetrics, SessionScope
from voice_pipeline.edge.outbound import Outbound, bound_send_buffer
from voice_pipeline.engines import Engines
from voice_pipeline.models import LLM_DIR, llm_dir
from voice_pipeline.realtime import client_events as ce
from voice_pipeline.realtime.bridge import OUTPUT_RATE_HZ, RealtimeBridge, Steering
from voice_pipeline.realtime.context import prompt_tokens
from voice_pipeline.realtime.errors import ErrorCode, ErrorType, ProtocolError, RealtimeClientError
from voice_pipeline.realtime.event_json import ServerEventEncoder, dumps, encode
from voice_pipeline.realtime.ids import Ids
from voice_pipeline.realtime.response_state import ResponseState
from voice_pipeline.realtime.server_events import ErrorOccurred, InputTranscriptFailed
from voice_pipeline.realtime.session_config import ServerProfile, SessionBase, profile_from_config
from voice_pipeline.realtime.tools import chat_template_supports_tools
from voice_pipeline.realtime.transport import RealtimeTransport

log = logging.getLogger(__name__)

IDLE_CLOSE_CODE = 1000
#: the name the default model is announced with (its prepared folder is voice_pipeline.models.LLM_DIR)
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
#: websockets' own limit is this many times the event limit: bigger messages close with 1009
MESSAGE_LIMIT_FACTOR = 4
#: the longest a response waits for the words of user audio it reads (then it goes on without them)
WORDS_WAIT_S = 15.0


def server_profile(cfg: Config, voice: str) -> ServerProfile:
    """What this server announces on ``/v1/realtime``: the model (its folder's name, or the
    remote model asked for), the TTS engine's ``voice``, and whether the model's chat template can
    call tools (read from the prepared model folder; a remote model is assumed not to)."""
    tools = False
    if cfg.llm.engine == "remote":
        model = cfg.llm.remote_model or "remote"
    else:
        folder = llm_dir(cfg)  # llm.model_path, else the prepared folder of llm.model
        model = DEFAULT_MODEL_NAME if folder.name == LLM_DIR else folder.name
        tools = chat_template_supports_tools(_chat_template(folder))
    return profile_from_config(cfg, model=model, voice=voice, tools_supported=tools)


def _chat_template(folder: Path) -> str:
    try:
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    except OSError:
        pass
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    template = config.get("chat_template") if isinstance(config, dict) else None
    return template if isinstance(template, str) else ""


def refusal(code: ErrorCode, message: str) -> str:
    """An ``error`` event sent before the server closes a connection it will not serve."""
    error = ProtocolError(code, message, type=ErrorType.SERVER)
    return dumps(encode(ErrorOccurred(error), "event_refused"))


class RealtimeConnection:
    def __init__(
        self,
        ws: ServerConnection,
        engines: Engines,
        cfg: Config,
        metrics: EdgeMetrics,
        profile: ServerProfile,
        *,
        clock: Callable[[], int] = now_ns,
    ) -> None:
        s = cfg.server
        self._ws = ws
        self._engines = engines
        self._cfg = cfg
        self._clock = clock
        self._max_event_bytes = s.max_realtime_event_bytes
        bound_send_buffer(ws.transport)
        self._out = Outbound(
            ws,
            max_events=s.max_queued_events,
            max_audio_samples=round(s.max_queued_audio_s * OUTPUT_RATE_HZ),
            clock=clock,
        )
        ids = Ids()
        self.bridge = RealtimeBridge(profile, SessionBase.of(cfg), ids, origin_ns=clock())
        self.session_id = self.bridge.session_id
        self.transport = RealtimeTransport(
            self._out,
            self.bridge,
            ServerEventEncoder(ids),
            drain_grace_s=s.drain_grace_s,
            on_event=self._observe,
            clock=clock,
        )
        self._metrics = metrics
        self._news = asyncio.Event()  # set as the session tells of anything: words may have come
        self._out.on_audio_sent = self.transport.audio_sent
        # partial transcripts are never sent on this protocol: they would only cost CPU
        session_cfg = dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, partial_interval_ms=0))
        self.scope = SessionScope(engines, cfg, clock=clock, label="realtime session")
        self.scope.session_id = self.session_id  # one id in the log and in session.created
        self.scope.adopt(
            Session(engines, session_cfg, self.transport, clock=clock, context=self.bridge.context)
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.scope.close_after(self._cancel_tasks)
        self.scope.close_after(self._out.aclose)

    @property
    def session(self) -> Session:
        assert self.scope.session is not None  # adopted at construction
        return self.scope.session

    @property
    def outbound(self) -> Outbound:
        return self._out

    async def run(self) -> None:
        """Serve the client until it leaves, goes idle or the server closes."""
        self._out.start()
        self._steer(self.bridge.steering())
        self.transport.send(self.bridge.created())
        log.info("realtime session %s started", self.session_id)
        await self.scope.run(self._serve, gone=(ConnectionClosed,), on_error=self._failed)

    async def _failed(self) -> None:
        await self._ws.close(1011, "internal server error")

    async def _serve(self) -> None:
        while True:
            data = await self.scope.receive(self._ws.recv)
            if data is IDLE:
                await self._ws.close(IDLE_CLOSE_CODE, f"idle: no client event for {self.scope.idle_s:g} s")
                return
            self.scope.active()  # on this protocol every client event is activity
            await self._on_frame(data)

    async def _on_frame(self, data: str | bytes) -> None:
        event = ce.parse_client_event(data, max_bytes=self._max_event_bytes)
        if isinstance(event, ProtocolError):
            self._error(event)
            return
        try:
            await self._handle(event)
        except RealtimeClientError as exc:
            self._error(exc.error.for_event(event.event_id))
        except Exception:  # a bug, not the client's: answered, logged, and the session goes on
            log.exception("realtime session %s: %s failed", self.session_id, type(event).__name__)
            failure = ProtocolError(ErrorCode.SERVER_ERROR, "internal server error", type=ErrorType.SERVER)
            self._error(failure.for_event(event.event_id))

    def _error(self, error: ProtocolError) -> None:
        log.debug("realtime session %s: client error %s: %s", self.session_id, error.code, error.message)
        self.transport.send([ErrorOccurred(error)])

    async def _handle(self, event: ce.ClientEvent) -> None:
        bridge, session, send = self.bridge, self.session, self.transport.send
        match event:
            case ce.UpdateSession(session=update):
                events, steer = bridge.update(update)
                send(events)
                self._steer(steer)
            case ce.AppendInputAudio(audio=data):
                samples = bridge.append(data)
                if len(samples):
                    await session.push_audio(samples, self._clock())
            case ce.CommitInputAudio():
                bridge.commit()
                session.commit()
            case ce.ClearInputAudio():
                session.clear_input()
                send(bridge.clear())
            case ce.CreateItem():
                events, audio = bridge.create_item(event)
                send(events)
                for item_id, index, samples in audio:
                    self._spawn(self._transcribe(item_id, index, samples), f"transcribe-{item_id}")
            case ce.RetrieveItem(item_id=item_id):
                send(bridge.conversation.retrieve(item_id))
            case ce.TruncateItem():
                send(bridge.truncate(event))
            case ce.DeleteItem(item_id=item_id):
                send(bridge.delete(item_id))
            case ce.CreateResponse(response=params):
                events, request, response = bridge.create_response(params)
                send(events)
                if bridge.context.awaiting_words(response.seq.settings):
                    words_in = functools.partial(self._words_in, response, request)
                    request = dataclasses.replace(request, ready=words_in)
                bridge.bind(session.respond(request), response)
            case ce.CancelResponse(response_id=response_id):
                session.cancel(bridge.cancel_response(response_id))
            case ce.ClearOutputAudio():
                for turn_id in bridge.clear_output():
                    session.cancel(turn_id)

    def _steer(self, s: Steering) -> None:
        self.session.configure(s.vad, s.turn, s.barge_in, s.options, s.reply)

    async def _transcribe(self, item_id: str, index: int, samples: Float32) -> None:
        """A client's user audio item: the ASR's words become its transcript."""
        try:
            result = await asyncio.to_thread(self._engines.asr.transcribe, samples)
        except Exception as exc:
            log.warning("realtime session %s: cannot transcribe %s", self.session_id, item_id, exc_info=True)
            error = ProtocolError(ErrorCode.SERVER_ERROR, f"asr failed: {exc}", type=ErrorType.SERVER)
            self.bridge.conversation.no_words(item_id)
            self.transport.send([InputTranscriptFailed(item_id, index, error)])
        else:
            words = result.text.strip()
            self.transport.send(self.bridge.item_transcribed(item_id, index, words, result.audio_s))
        self._news.set()

    def _observe(self, event: ev.Event) -> None:
        self._metrics.observe(event)
        self._news.set()

    async def _words_in(self, response: ResponseState, asked: ReplyRequest) -> ReplyRequest:
        """``response``'s request once the user audio it reads is transcribed -- a push-to-talk
        client commits and asks for a response at once, and the words come a moment later
        (at most :data:`WORDS_WAIT_S` later: then it goes on without them). ``asked``: the
        request as it was asked for (made if an item it names was deleted meanwhile)."""
        settings, context = response.seq.settings, self.bridge.context
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WORDS_WAIT_S):
                while context.awaiting_words(settings):
                    self._news.clear()
                    await self._news.wait()
        if context.awaiting_words(settings):
            log.warning("realtime session %s: a response goes on without words to come", self.session_id)
        try:
            request = context.reply_request(settings)
        except RealtimeClientError:
            return asked
        response.prompt_tokens = prompt_tokens(request.messages)
        return request

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self, code: int, reason: str) -> None:
        """Close the WebSocket (the session is closed as :meth:`run` returns)."""
        await self._ws.close(code, reason)

    async def _cancel_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Close the session (cancelling its turns), the transcriptions and the writer. Idempotent."""
        await self.scope.aclose()
