"""The ``/v1/realtime`` connection's decisions (pure): what each client event asks of
the session, and which server events each session event and reply audio become.

:class:`RealtimeBridge` holds one realtime session's protocol state -- the effective
config, the conversation (the LLM's one source of truth, :mod:`.context`), the
input buffer's and each response's sequencers -- and is told everything that
happens; it returns the server events to send. The connection
(:mod:`.connection`) is the thin asyncio side: it parses client events, calls the
bridge, carries out on the :class:`~voice_pipeline.conversation.session.Session` what the bridge
answered (``configure``, ``commit``, ``respond``, ``cancel``, ...), and the transport
(:mod:`.transport`) hands the session's events and audio back to the bridge.

Session events -> server events (the session runs the same turn machine as ``/ws``):

=============================  ==========================================================
``SpeechStarted``              ``input_audio_buffer.speech_started`` (not with manual turns)
``EndpointDetected``           ``speech_stopped``, ``committed``, ``conversation.item.added`` / ``.done``
``TurnContinued``              the committed item is deleted (its words are heard again as
                               part of the continued utterance), a response started for it
                               is cancelled (``turn_detected``), ``speech_started`` anew
``TranscriptFinalized``        ``...input_audio_transcription.delta`` / ``.completed``
``ReplyStarted``               ``response.created`` (for a reply the server started itself)
``AssistantTextStreamed``      ``response.output_text.delta`` (text responses)
``ClauseSynthesized``          ``response.output_audio_transcript.delta`` (each clause's words
                               as its audio is next); reply audio -> ``response.output_audio.delta``
``ToolCallStreamed``           a ``function_call`` output item and its arguments' deltas
``ToolCallDone``               its ``.done`` events (``error`` if not usable as written), see
                               :mod:`.calls` (tools run on the client: the reply ends with its calls)
``ReplyGenerated``             ``response.done`` ``completed`` / ``incomplete`` (the token
                               limit), with its items' ``.done`` events -- playback may go on
``ReplyInterrupted``           ``output_audio_buffer.cleared``
``TurnCompleted``              ``response.done`` if still open (``cancelled`` -- ``turn_detected``
                               or ``client_cancelled`` -- or ``failed``), the heard cut
                               (``conversation.item.truncated`` at the server's playout
                               estimate, unless the client truncated), ``output_audio_buffer.stopped``,
                               the user item deleted if the turn was only noise, a backchannel or
                               echo (as the History on ``/ws`` keeps none of those), then
                               ``voice_pipeline.turn.latency`` (the turn's ledger record)
=============================  ==========================================================

A response is *active* from ``response.created`` to ``response.done``; its audio
may still play after that (``output_audio_buffer.stopped`` says when it ended).
Each response's own events (its audio's deltas and playback, its end) are
:class:`~.response_state.ResponseState`'s; the bridge keeps the turns and routes.
"""

from __future__ import annotations

from dataclasses import dataclass

from voice_pipeline import events as ev
from voice_pipeline.audio import Float32, Int16
from voice_pipeline.conversation.steering import ReplyRequest
from voice_pipeline.ledger.records import TurnRecord
from voice_pipeline.realtime.audio import InputDecoder
from voice_pipeline.realtime.client_events import CreateItem, ResponseParams, TruncateItem
from voice_pipeline.realtime.context import RealtimeContext, prompt_tokens
from voice_pipeline.realtime.conversation import Conversation
from voice_pipeline.realtime.errors import ErrorCode, ErrorType, ProtocolError, refuse
from voice_pipeline.realtime.ids import IdKind, Ids
from voice_pipeline.realtime.input import InputSequencer
from voice_pipeline.realtime.items import untranscribed_audio
from voice_pipeline.realtime.response import ResponseSettings, resolve_response
from voice_pipeline.realtime.response_state import OUTPUT_RATE_HZ, ResponseState
from voice_pipeline.realtime.server_events import (
    InputTranscriptCompleted,
    ItemAdded,
    ItemDeleted,
    ItemDone,
    ItemTruncated,
    ServerEvent,
    SessionCreated,
    SessionUpdated,
    TurnLatencyMeasured,
)
from voice_pipeline.realtime.session_config import (
    ServerProfile,
    SessionBase,
    Steering,
    initial_config,
    steering,
)
from voice_pipeline.realtime.session_update import SessionUpdate, apply_update
from voice_pipeline.turntaking.bargein import InterruptionKind

__all__ = ["OUTPUT_RATE_HZ", "RealtimeBridge", "ResponseState", "Steering", "steering"]


@dataclass(slots=True)
class _Turn:
    item_id: str | None = None  # the user item (pending, then committed)
    committed: bool = False
    start_ms: int = 0
    end_ms: int = 0
    response: ResponseState | None = None


class RealtimeBridge:
    def __init__(self, profile: ServerProfile, base: SessionBase, ids: Ids, *, origin_ns: int) -> None:
        """``base``: what the session takes of the server's config (the realtime settings are
        applied onto its turn-taking sections);
        ``origin_ns``: the session's start (the latency records' marks count from it)."""
        self.profile = profile
        self._base = base
        self._ids = ids
        self._origin_ns = origin_ns
        self.session_id = ids.new(IdKind.SESSION)
        self.cfg = initial_config(profile)
        self.conversation = Conversation(ids)
        self.input = InputSequencer(self.conversation)
        budget = base.history_max_tokens
        self.context = RealtimeContext(self.conversation, self.cfg.instructions, budget)
        self.decoder = InputDecoder(self.cfg.input_format, base.pipeline_rate_hz)
        self._turns: dict[int, _Turn] = {}
        self._user: int | None = None  # the turn whose input is being taken

    @property
    def manual(self) -> bool:
        return self.cfg.turn_detection is None

    def steering(self) -> Steering:
        return steering(self.cfg, self._base)

    def _turn(self, turn_id: int) -> _Turn:
        return self._turns.setdefault(turn_id, _Turn())

    def _changed(self, events: list[ServerEvent], own: str | None = None) -> list[ServerEvent]:
        """Tell the context when ``events`` changed the conversation (but for ``own``: the
        user item of the turn being answered, which its request renders itself)."""
        for e in events:
            if isinstance(e, ItemAdded | ItemDone):
                if e.item.id != own:
                    self.context.changed()
            elif isinstance(e, ItemDeleted | ItemTruncated) and e.item_id != own:
                self.context.changed()
        return events

    # ------------------------------------------------------------ client events

    def created(self) -> list[ServerEvent]:
        return [SessionCreated(self.cfg, self.session_id)]

    def update(self, update: SessionUpdate) -> tuple[list[ServerEvent], Steering]:
        """``session.update``: the new config (RealtimeClientError: nothing changes)."""
        cfg = apply_update(self.cfg, update, self.profile)
        old, self.cfg = self.cfg, cfg
        self.context.instructions = cfg.instructions
        if cfg.input_format is not old.input_format:
            self.decoder = InputDecoder(cfg.input_format, self._base.pipeline_rate_hz)
        if (old.turn_detection is None) != (cfg.turn_detection is None):
            self._user = None  # the session drops the turn in progress
            self.input.clear()
        return [SessionUpdated(cfg, self.session_id)], self.steering()

    def append(self, data: bytes) -> Float32:
        """``input_audio_buffer.append``: the audio for the session."""
        self.input.appended(self.cfg.input_format.duration_ms(len(data)))
        return self.decoder.decode(data)

    def commit(self) -> None:
        """Check that ``input_audio_buffer.commit`` has something to commit (the session
        then ends the turn in progress, and the commit's events follow from it)."""
        if self._user is None:
            raise refuse(
                ErrorCode.INPUT_BUFFER_EMPTY,
                "nothing to commit: no speech is in progress (with turn detection on, the "
                "server commits speech itself)",
            )
        if self.manual:
            self.input.check_commit()

    def clear(self) -> list[ServerEvent]:
        """``input_audio_buffer.clear`` (the session drops the turn in progress)."""
        self._user = None
        return self.input.clear()

    def create_item(self, event: CreateItem) -> tuple[list[ServerEvent], list[tuple[str, int, Float32]]]:
        """``conversation.item.create``; also the user audio to transcribe: (item id, content
        index, samples at the pipeline rate) for each audio part sent without a transcript."""
        audio = untranscribed_audio(event.item)
        events = self._changed(self.conversation.create(event.item, event.previous_item_id))
        item_id = next(e.item.id for e in events if isinstance(e, ItemAdded))
        rate = self._base.pipeline_rate_hz
        fmt = self.cfg.input_format
        todo = [(item_id, n, InputDecoder(fmt, rate).decode(data, last=True)) for n, data in audio]
        return events, todo

    def item_transcribed(
        self, item_id: str, content_index: int, text: str, seconds: float
    ) -> list[ServerEvent]:
        """The ASR's words for the audio part ``content_index`` of a client's item."""
        if item_id not in self.conversation:
            return []
        self.conversation.set_transcript(item_id, content_index, text)
        self.context.changed()
        if self.cfg.transcription is None:
            return []
        return [InputTranscriptCompleted(item_id, content_index, text, seconds)]

    def delete(self, item_id: str) -> list[ServerEvent]:
        return self._changed(self.conversation.delete(item_id))

    def truncate(self, event: TruncateItem) -> list[ServerEvent]:
        """``conversation.item.truncate``; an item still being generated is cut when it is done."""
        item_id, index, ms = event.item_id, event.content_index, event.audio_end_ms
        for t in self._turns.values():
            if t.response is not None and t.response.truncate_open(item_id, index, ms):
                return [ItemTruncated(item_id, index, ms)]
        events = self._changed(self.conversation.truncate(item_id, index, ms))
        for t in self._turns.values():
            if t.response is not None and item_id in t.response.seq.item_ids:
                t.response.truncated_by_client = True
        return events

    def create_response(
        self, params: ResponseParams
    ) -> tuple[list[ServerEvent], ReplyRequest, ResponseState]:
        """``response.create``: the reply to ask the session for (``bind`` its turn after)."""
        active = self._active()
        if active is not None:
            raise refuse(
                ErrorCode.RESPONSE_ALREADY_ACTIVE,
                f"Conversation already has an active response in progress: {active.seq.response_id}. "
                "Wait until the response is finished before creating a new one.",
            )
        settings = resolve_response(params, self.cfg, self.profile)
        request = self.context.reply_request(settings)
        response = self._new_response(settings, prompt_tokens(request.messages))
        return self._changed(response.seq.created()), request, response

    def bind(self, turn_id: int, response: ResponseState) -> None:
        """``response`` is the reply of the session's turn ``turn_id``."""
        self._turn(turn_id).response = response

    def cancel_response(self, response_id: str | None) -> int:
        """``response.cancel``: the turn whose reply to cancel."""
        for turn_id, t in self._turns.items():
            r = t.response
            if r is not None and not r.seq.done and response_id in (None, r.seq.response_id):
                r.by_client = True
                return turn_id
        raise refuse(ErrorCode.NO_ACTIVE_RESPONSE, "Cancellation failed: no active response found")

    def clear_output(self) -> list[int]:
        """``output_audio_buffer.clear``: the turns whose audio is to stop."""
        out = []
        for turn_id, t in self._turns.items():
            r = t.response
            if r is not None and r.audio_started and not r.cleared:
                r.by_client = True
                out.append(turn_id)
        return out

    def _active(self) -> ResponseState | None:
        return next(
            (t.response for t in self._turns.values() if t.response and not t.response.seq.done), None
        )

    def _new_response(self, settings: ResponseSettings, prompt: int) -> ResponseState:
        return ResponseState.start(settings, self._ids, self.conversation, prompt)

    def _response_of(self, turn_id: int) -> ResponseState | None:
        t = self._turns.get(turn_id)
        return None if t is None else t.response

    # ------------------------------------------------------------ session events

    def on_event(self, event: ev.Event) -> list[ServerEvent]:
        match event:
            case ev.SpeechStarted(turn_id=tid, audio_start_ms=ms):
                return self._speech_started(tid, ms)
            case ev.EndpointDetected(turn_id=tid, audio_end_ms=ms):
                return self._committed(tid, ms)
            case ev.TurnContinued(turn_id=tid):
                return self._continued(tid)
            case ev.TranscriptFinalized(turn_id=tid, text=text):
                return self._transcribed(tid, text)
            case ev.ReplyStarted(turn_id=tid):
                return self._response(tid)[1]
            case ev.AssistantTextStreamed(turn_id=tid, text=text):
                r, events = self._response(tid)
                return events + r.text(text)
            case ev.ClauseSynthesized(turn_id=tid, text=text, samples=n):
                r, events = self._response(tid)
                return self._changed(events + r.clause(text, n))
            case ev.ToolCallStreamed(turn_id=tid) | ev.ToolCallDone(turn_id=tid):
                r, events = self._response(tid)
                return self._changed(events + r.calls.on_event(event))
            case ev.ReplyGenerated(turn_id=tid):
                ended = self._response_of(tid)
                return [] if ended is None else self._changed(ended.generated(event))
            case ev.ReplyInterrupted(turn_id=tid):
                cut = self._response_of(tid)
                return [] if cut is None else cut.stop_audio()
            case ev.TurnFailed(turn_id=tid, stage=stage, message=message):
                return self._failed(tid, stage, message)
            case ev.TurnCompleted(turn_id=tid, record=record):
                return self._completed(tid, record)
        return []

    def _speech_started(self, turn_id: int, start_ms: int) -> list[ServerEvent]:
        t = self._turn(turn_id)
        t.start_ms, self._user = start_ms, turn_id
        if self.manual:
            return []
        events = self.input.speech_started(start_ms)
        t.item_id = self.input.pending_item_id
        if t.item_id is not None:
            self.context.turn_items[turn_id] = t.item_id
        return events

    def _committed(self, turn_id: int, end_ms: int) -> list[ServerEvent]:
        t = self._turn(turn_id)
        t.end_ms = max(end_ms, t.start_ms)
        if self._user == turn_id:
            self._user = None
        events = [] if self.manual else self.input.speech_stopped(t.end_ms)
        committed = self.input.commit()
        t.item_id = next(e.item.id for e in committed if isinstance(e, ItemAdded))
        t.committed = True
        self.context.turn_items[turn_id] = t.item_id
        return self._changed(events + committed, own=t.item_id)

    def _continued(self, turn_id: int) -> list[ServerEvent]:
        t = self._turn(turn_id)
        events: list[ServerEvent] = []
        r, t.response = t.response, None
        if r is not None:
            events += r.superseded()
        if t.committed and t.item_id is not None and t.item_id in self.conversation:
            events += self.conversation.delete(t.item_id)
        t.item_id, t.committed = None, False
        return self._changed(events) + self._speech_started(turn_id, t.start_ms)

    def _transcribed(self, turn_id: int, text: str) -> list[ServerEvent]:
        t = self._turns.get(turn_id)
        if t is None or t.item_id is None:
            return []
        seconds = (t.end_ms - t.start_ms) / 1000
        done = self.input.transcript_completed(t.item_id, text, seconds)  # the item's transcript too
        if self.cfg.transcription is None:
            return []
        return [*self.input.transcript_delta(t.item_id, text), *done] if text else done

    def _response(self, turn_id: int) -> tuple[ResponseState, list[ServerEvent]]:
        """The turn's response; one the server starts itself is created now."""
        t = self._turn(turn_id)
        if t.response is not None:
            return t.response, []
        settings = resolve_response(ResponseParams(), self.cfg, self.profile)
        t.response = self._new_response(settings, self.context.prompt_tokens(turn_id) or 0)
        return t.response, t.response.seq.created()

    def _failed(self, turn_id: int, stage: str, message: str) -> list[ServerEvent]:
        t = self._turn(turn_id)
        error = ProtocolError(ErrorCode.SERVER_ERROR, f"{stage} failed: {message}", type=ErrorType.SERVER)
        if t.response is not None:
            t.response.failed = error
            return []
        if stage == "asr" and t.item_id is not None and t.committed:
            self.conversation.no_words(t.item_id)
            return self.input.transcript_failed(t.item_id, error)
        return []

    def _completed(self, turn_id: int, record: TurnRecord) -> list[ServerEvent]:
        t = self._turns.pop(turn_id, None) or _Turn()
        self.context.turn_items.pop(turn_id, None)
        if self._user == turn_id:
            self._user = None
        events: list[ServerEvent] = []
        r = t.response
        if r is not None:
            events += r.turn_completed(record, self.conversation)
        unheard = not record.user_text or record.interruption not in (None, InterruptionKind.WORDS)
        if t.committed and t.item_id is not None and unheard and t.item_id in self.conversation:
            events += self.conversation.delete(t.item_id)  # noise, a backchannel, echo: not a turn
        rid = None if r is None else r.seq.response_id
        events.append(TurnLatencyMeasured(record.as_dict(self._origin_ns), rid, t.item_id))
        return self._changed(events)

    # ------------------------------------------------------------ reply audio

    def on_audio(self, turn_id: int, pcm: Int16) -> list[tuple[ServerEvent, int]]:
        """Reply audio at :data:`OUTPUT_RATE_HZ` -> its deltas, each with the samples (at that
        rate) it carries; nothing for a response that has none (text only, or cleared)."""
        r = self._response_of(turn_id)
        out = [] if r is None else r.audio_deltas(pcm)
        self._changed([e for e, _ in out])
        return out

    def audio_written(self, turn_id: int) -> list[ServerEvent]:
        """The turn's audio is being written to the socket (its playback starts)."""
        r = self._response_of(turn_id)
        return [] if r is None else r.audio_written()
