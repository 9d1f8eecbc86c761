"""A finished turn's record as a tree of spans (pure: no OpenTelemetry, no clock).

Every time is one of the ledger's own marks (``TurnRecord.marks_ns``, the session's
clock); nothing is timed again. The tree of one turn::

    turn                         speech_start -> turn_end (the last mark)
    ├── endpointing              speech_end -> endpoint          ┐
    ├── asr_final                endpoint -> transcript_final    │ the critical path:
    ├── llm_first_token          transcript_final -> llm_first_token   consecutive, so
    ├── first_clause             llm_first_token -> first_clause │ they add up to the
    ├── tts_first_audio          first_clause -> tts_first_audio │ turn's voice_to_voice
    ├── transport                tts_first_audio -> first_audio_sent ┘
    │   (a turn whose server-side tool ran before its first words: tool_call, tool and
    │   tool_answer in place of first_clause -- voice_pipeline.ledger.ledger.TOOL_PATH;
    │   a reply asked for directly: asr_final from reply_asked, the wait for its words,
    │   and the stages add up to asked_to_audio -- path_of)
    ├── barge_in                 one per pause of the reply (an interrupted reply)
    │   ├── barge_in.pause       onset of the speech over it -> the listener flushed
    │   ├── barge_in.resume      flushed -> resumed (a false interruption)  or
    │   ├── barge_in.confirm     flushed -> the interruption decided for good
    │   └── barge_in.stop        decided -> the LLM request aborted and synthesis stopped
    └── wasted_work              the cut -> the work stopped, with what nobody heard

A stage whose two marks are not both there has no span (a failed or text-only turn).
Attribute keys are namespaced: ``voice.*`` for this project's, ``gen_ai.*`` (the
OpenTelemetry GenAI conventions) on the LLM span. Keys that carry what was said --
``voice.content.*``, ``gen_ai.input.messages``, ``gen_ai.output.messages`` (see
:data:`CONTENT_KEYS`) -- are set only with ``include_text``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from voice_pipeline.config import BudgetConfig
from voice_pipeline.ledger.ledger import BARGE_IN_STOP, TOTAL, Mark, path_of
from voice_pipeline.ledger.records import StageName, TurnRecord

AttrValue = str | bool | int | float | tuple[str, ...]

#: attribute keys that carry content (a prefix ends with a dot)
CONTENT_KEYS = ("voice.content.", "gen_ai.input.messages", "gen_ai.output.messages")
#: the attribute every critical-path stage span has (True), and its stage's name
CRITICAL = "voice.critical_path"
STAGE = "voice.stage"


def is_content(key: str) -> bool:
    return any(key.startswith(k) if k.endswith(".") else key == k for k in CONTENT_KEYS)


@dataclass(frozen=True, slots=True)
class SpanSpec:
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    children: tuple[SpanSpec, ...] = ()
    #: a request to another process (the LLM server): span kind CLIENT
    client: bool = False
    #: the span failed: its status is ERROR with this description
    error: str | None = None
    #: the span's id, if it must be this one (the ``traceparent`` the LLM request carried)
    span_id: int | None = None

    def walk(self) -> list[SpanSpec]:
        """This span and every descendant, depth first."""
        return [self, *(s for c in self.children for s in c.walk())]


@dataclass(frozen=True, slots=True)
class TurnOptions:
    budget: BudgetConfig
    include_text: bool = False
    #: ``gen_ai.request.model`` (None: not said)
    model: str | None = None
    provider: str = "vllm"


def _r(v: float, nd: int = 3) -> float:
    return round(v, nd)


def turn_span(
    record: TurnRecord,
    opts: TurnOptions,
    *,
    pauses: Sequence[int] = (),
    resumes: Sequence[int] = (),
    llm_span_id: int | None = None,
) -> SpanSpec | None:
    """The turn's span tree; None for a record without marks. ``pauses`` / ``resumes``: when
    the reply was paused and resumed (the session's ReplyPaused / ReplyResumed events; without
    them the ledger's first pause is used); ``llm_span_id``: the id the LLM request's
    ``traceparent`` named."""
    marks = record.marks_ns
    if not marks:
        return None
    start = marks.get(Mark.SPEECH_START, min(marks.values()))
    end = max(marks.values())
    children = [*_stages(record, opts, llm_span_id), *_barge_ins(record, opts, pauses, resumes)]
    wasted = _wasted(record)
    if wasted is not None:
        children.append(wasted)
    return SpanSpec(
        "turn",
        min(start, *(c.start_ns for c in children)) if children else start,
        end,
        _turn_attributes(record, opts),
        tuple(children),
        error=None if record.failed is None else f"{record.failed} failed",
    )


def _turn_attributes(record: TurnRecord, opts: TurnOptions) -> dict[str, AttrValue]:
    w = record.work
    a: dict[str, AttrValue] = {
        "voice.turn.id": record.turn_id,
        "voice.turn.interrupted": record.interrupted,
        "voice.turn.budgets_broken": tuple(str(b.stage) for b in record.budgets_broken),
        "voice.turn.false_interruptions": record.false_interruptions,
        "voice.turn.continuations": record.continuations,
        "voice.work.llm_tokens": w.llm_tokens,
        "voice.work.wasted_tokens": w.wasted_tokens,
        "voice.work.audio_synthesized_s": _r(w.audio_synthesized_s),
        "voice.work.audio_heard_s": _r(w.audio_heard_s),
        "voice.work.wasted_audio_s": _r(w.wasted_audio_s),
        "voice.work.discarded_tokens": record.discarded_tokens,
        "voice.work.discarded_audio_s": _r(record.discarded_audio_s),
    }
    spec = record.speculation
    if spec is not None:  # the speculative replies of the turn's pauses (conversation/speculation.py)
        for name in ("prepared", "held", "released", "dropped", "skipped", "wasted_tokens"):
            a[f"voice.speculation.{name}"] = getattr(spec, name)
        a["voice.speculation.wasted_audio_s"] = _r(spec.wasted_audio_s)
    optional: dict[str, AttrValue | None] = {
        "voice.turn.voice_to_voice_ms": record.stages_ms.get(StageName.VOICE_TO_VOICE),
        "voice.turn.voice_to_voice_budget_ms": float(getattr(opts.budget, TOTAL.budget_key)),
        "voice.turn.asked_to_audio_ms": record.stages_ms.get(StageName.ASKED_TO_AUDIO),
        "voice.turn.failed_stage": None if record.failed is None else str(record.failed),
        "voice.turn.interruption": None if record.interruption is None else str(record.interruption),
        "voice.turn.filler_ms": record.filler_ms,
        "voice.turn.overhead_ms": record.overhead_ms,
        "voice.end_of_turn.rule": None if record.end_of_turn is None else str(record.end_of_turn.rule),
    }
    a.update({k: v for k, v in optional.items() if v is not None})
    a.update({f"voice.compute.{name}_ms": ms for name, ms in record.compute_ms.items()})
    if opts.include_text:
        a["voice.content.user_text"] = record.user_text
        a["voice.content.assistant_text"] = record.assistant_text
        a["voice.content.heard_text"] = record.heard_text
    return a


def _stages(record: TurnRecord, opts: TurnOptions, llm_span_id: int | None) -> list[SpanSpec]:
    marks = record.marks_ns
    broken = {b.stage for b in record.budgets_broken}
    out = []
    for stage in path_of(marks):  # with tools, or an asked reply's
        a, b = marks.get(stage.start), marks.get(stage.end)
        if a is None or b is None or b < a:
            continue
        attrs: dict[str, AttrValue] = {
            STAGE: str(stage.name),
            CRITICAL: True,
            "voice.stage.duration_ms": (b - a) / 1e6,
            "voice.stage.budget_ms": float(getattr(opts.budget, stage.budget_key)),
            "voice.stage.over_budget": stage.name in broken,
        }
        attrs.update(_stage_detail(stage.name, record, opts))
        llm = stage.name is StageName.LLM_FIRST_TOKEN
        out.append(SpanSpec(str(stage.name), a, b, attrs, client=llm, span_id=llm_span_id if llm else None))
    return out


def _stage_detail(name: StageName, record: TurnRecord, opts: TurnOptions) -> dict[str, AttrValue]:
    d: dict[str, AttrValue | None] = {}
    if name is StageName.ENDPOINTING and record.end_of_turn is not None:
        eot = record.end_of_turn
        d = {
            "voice.end_of_turn.rule": str(eot.rule),
            "voice.end_of_turn.silence_ms": eot.silence_ms,
            "voice.end_of_turn.wait_ms": eot.wait_ms,
            "voice.end_of_turn.patience_ms": eot.patience_ms,
            "voice.end_of_turn.p_complete": eot.p_complete,
            "voice.end_of_turn.cue": None if eot.cue is None else str(eot.cue),
        }
    elif name is StageName.ASR_FINAL:
        d = {"voice.asr.decode_ms": record.asr_decode_ms, "voice.asr.speculative": record.asr_speculative}
    elif name is StageName.LLM_FIRST_TOKEN:
        d = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": opts.provider,
            "gen_ai.request.model": opts.model,
            "gen_ai.usage.input_tokens": record.llm_prompt_tokens,
            "gen_ai.usage.cache_read.input_tokens": record.llm_cached_tokens,
            "gen_ai.usage.output_tokens": record.work.llm_tokens,
            "voice.llm.prefetched": record.llm_prefetched,
            "voice.llm.prefill_ms": record.llm_prefill_ms,
        }
        if opts.include_text:
            d["gen_ai.input.messages"] = _messages("user", record.user_text)
            d["gen_ai.output.messages"] = _messages("assistant", record.assistant_text)
    elif name is StageName.TTS_FIRST_AUDIO:
        d = {"voice.tts.audio_synthesized_s": _r(record.work.audio_synthesized_s)}
    return {k: v for k, v in d.items() if v is not None}


def _messages(role: str, text: str) -> str:
    """One message in the GenAI conventions' JSON shape (the turn's words only, not the history)."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def _barge_ins(
    record: TurnRecord, opts: TurnOptions, pauses: Sequence[int], resumes: Sequence[int]
) -> list[SpanSpec]:
    marks = record.marks_ns
    onset, flush = marks.get(Mark.BARGE_IN_ONSET), marks.get(Mark.FLUSH_SENT)
    confirmed = marks.get(Mark.BARGE_IN_CONFIRMED)
    stopped = marks.get(Mark.LLM_ABORTED, marks.get(Mark.TTS_STOPPED))
    paused = sorted(pauses) or ([flush] if flush is not None else [])
    if flush is not None and flush <= paused[0]:  # the first pause: the ledger's own mark
        paused[0] = flush
    out: list[SpanSpec] = []
    for i, p in enumerate(paused):
        later = paused[i + 1] if i + 1 < len(paused) else None
        resumed = next((r for r in sorted(resumes) if r >= p and (later is None or r <= later)), None)
        began = onset if i == 0 and onset is not None and onset <= p else p
        pause = SpanSpec("barge_in.pause", began, p, {"voice.barge_in.stop_ms": (p - began) / 1e6})
        if resumed is not None:
            kids: tuple[SpanSpec, ...] = (pause, SpanSpec("barge_in.resume", p, resumed))
            out.append(SpanSpec("barge_in", began, resumed, {"voice.barge_in.outcome": "resumed"}, kids))
        elif confirmed is not None and confirmed >= p:
            out.append(
                _confirmed(began, confirmed, stopped, (pause, SpanSpec("barge_in.confirm", p, confirmed)))
            )
            confirmed = None
        else:  # the reply ended while paused (a false interruption that was not resumed)
            out.append(SpanSpec("barge_in", began, p, {"voice.barge_in.outcome": "ended"}, (pause,)))
    if confirmed is not None:  # decided at once (an explicit interrupt): no pause
        out.append(_confirmed(confirmed, confirmed, stopped, ()))
    stop_ms = record.stages_ms.get(StageName.BARGE_IN_STOP)
    if out and stop_ms is not None:  # the ledger's barge_in_stop is the first pause's
        budget = float(getattr(opts.budget, BARGE_IN_STOP.budget_key))
        figures: dict[str, AttrValue] = {
            "voice.barge_in.stop_budget_ms": budget,
            "voice.barge_in.over_budget": stop_ms > budget,
        }
        first = out[0]
        out[0] = SpanSpec(
            first.name, first.start_ns, first.end_ns, {**first.attributes, **figures}, first.children
        )
    return out


def _confirmed(began: int, confirmed: int, stopped: int | None, kids: tuple[SpanSpec, ...]) -> SpanSpec:
    stop_end = confirmed if stopped is None else max(confirmed, stopped)
    stop = SpanSpec("barge_in.stop", confirmed, stop_end)
    return SpanSpec("barge_in", began, stop_end, {"voice.barge_in.outcome": "confirmed"}, (*kids, stop))


def _wasted(record: TurnRecord) -> SpanSpec | None:
    """What an interrupted reply made that nobody heard, from the cut to the end of the work."""
    w = record.work
    if not record.interrupted or (w.wasted_tokens <= 0 and w.wasted_audio_s <= 0):
        return None
    marks = record.marks_ns
    cut = marks.get(Mark.FLUSH_SENT, marks.get(Mark.BARGE_IN_CONFIRMED))
    if cut is None:
        return None
    ends = [marks.get(m) for m in (Mark.LLM_ABORTED, Mark.TTS_STOPPED, Mark.LLM_DONE)]
    work_end = max([cut, *(t for t in ends if t is not None)])
    attrs: dict[str, AttrValue] = {
        "voice.work.wasted_tokens": w.wasted_tokens,
        "voice.work.llm_tokens": w.llm_tokens,
        "voice.work.wasted_audio_s": _r(w.wasted_audio_s),
        "voice.work.audio_synthesized_s": _r(w.audio_synthesized_s),
        "voice.work.audio_heard_s": _r(w.audio_heard_s),
    }
    return SpanSpec("wasted_work", cut, work_end, attrs)
