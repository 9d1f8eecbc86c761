"""Turn-taking on speech with pauses: premature ends of turn and the latency of complete questions.

    .venv/bin/python benchmarks/bench_turn_taking.py [--pauses 0.4,0.8,1.2] [--voices en-us+f3,en-us+m3]
                                                     [--modes old,new] [--json out.json]

Every sentence of :data:`voice_pipeline.bench.paused.PAUSED_SENTENCES` is spoken by
espeak-ng (several voices) with a pause of each length between its phrases (``--voices
human``: the recorded sentences of people, :data:`~voice_pipeline.bench.paused.RECORDED_SENTENCES`,
each of their own pauses made that much longer), and every
complete question without one; each goes through the real pipeline (Silero, Whisper,
the turn model, vLLM, Piper) in its own session, in real time, as from a microphone.
Modes: ``old`` = the end of a turn decided by silence alone and no continuation (the
behaviour before the semantic policy), ``new`` = the defaults, ``nopatience`` = the
defaults with ``turn.patience_ms: 0`` (a continued speaker's waits do not grow),
``noverdict`` = the defaults with no longer wait for a turn model's verdict on its way
after neutral words (``turn.verdict_silence_ms`` = ``unsure_silence_ms``), ``wait<N>`` = the
short wait ``vad.end_silence_ms`` N ms (``wait600``; :mod:`voice_pipeline.bench.variants`):
what keeping quiet through longer pauses costs complete questions, ``sound<N>`` = the wait
when only the sound says unfinished (``turn.sound_silence_ms``) N ms, ``grace<N>`` = speech
up to N ms after a reply's first audio continues its turn (``turn.continuation_grace_ms``),
``statement<N>`` = neutral words that sound finished wait N ms (``turn.statement_silence_ms``).
``--question-voices human``: instead of espeak's questions, finished things people said
(:data:`~voice_pipeline.bench.paused.RECORDED_UTTERANCES`), timed apart (``v2v_human``).

``--line phone``: every clip, paused or not, through an 8 kHz G.711 µ-law phone line and back
(:func:`voice_pipeline.bench.paused.phone_line`), as a Twilio call brings speech to the pipeline.

``--conversation``: one session per voice and pause hears all the paused sentences one
after another, each followed by ``--reply-gap`` seconds for its (short: 24 tokens at most)
reply, as a user who pauses the same way all along. It prints, per session, which
sentences had reply audio in a pause (``X``), and in sum the sentences after the first
such one of their session that had it too: what patience is for (the first one is where
the speaker is first seen to go on; no policy can know them before).

Per paused sentence it counts the user turns the pipeline made of it: one is right;
more is a premature end of turn (the speaker had more to say), whether or not the
fragment got an answer. ``endpoints inside`` counts ends of turn decided during a
pause that continuation then undid (no fragment answered), and the reply audio heard
in each pause (and 0.3 s into the phrase after it): what the speaker hears the assistant
say over them while they are not done. Prints, per mode: the premature end-of-turn rate,
the sentences with reply audio in a pause (the target: none), of the pauses after a
sentence's first the ones with reply audio (patience's business: by then the speaker had
been seen to pause; the first pause of each is where the known misses are), WER of the answered
transcript, voice-to-voice p50/p95 of the complete questions, the rules that ended the
turns, and the turn model's cost per call and how much of it came back within the short
silence. Prints figures; asserts nothing. Name the CPU beside any figure you publish (it is printed first).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from speech import espeak, recorded_speech, recording, word_error_rate

from voice_pipeline import events as ev
from voice_pipeline.bench.paused import (
    COMPLETE_QUESTIONS,
    PAUSED_SENTENCES,
    RECORDED_SENTENCES,
    RECORDED_UTTERANCES,
    PausedSpeech,
    paused_clip,
    phone_line,
    reply_heard_in_pauses,
)
from voice_pipeline.bench.variants import turn_variant
from voice_pipeline.config import Config, load_config
from voice_pipeline.cpu import this_cpu
from voice_pipeline.engines import Engines
from voice_pipeline.ledger.aggregate import percentile
from voice_pipeline.models import prepare_models
from voice_pipeline.runner import run_audio

RATE = 16000
#: silence before each clip (s)
LEAD_S = 0.5


def cpu_name() -> str:
    cpu = this_cpu()
    return f"{cpu.label}, {cpu.cores} cores"


def mode_config(base: Config, mode: str) -> Config:
    if mode == "old":
        return dataclasses.replace(
            base, turn=dataclasses.replace(base.turn, semantic=False, continuation=False)
        )
    if mode == "nopatience":
        return dataclasses.replace(base, turn=dataclasses.replace(base.turn, patience_ms=0))
    return turn_variant(base, mode) or base


async def run_one(engines: Engines, cfg: Config, audio: np.ndarray) -> dict[str, Any]:
    continued = 0

    def count(e: ev.Event) -> None:
        nonlocal continued
        if isinstance(e, ev.TurnContinued):
            continued += 1

    lead = np.zeros(round(LEAD_S * RATE), np.float32)
    res = await run_audio(
        engines, cfg, np.concatenate([lead, audio, np.zeros(RATE, np.float32)]), RATE, on_event=count
    )
    turns = [r for r in res.records if r.user_text or r.assistant_text]
    return {"records": res.records, "turns": turns, "continued": continued, "result": res}


def question_row(mode: str, voice: str, q: str, r: Any) -> dict[str, Any]:
    eot = r.end_of_turn.as_dict() if r.end_of_turn is not None else None
    v2v, ep = r.stages_ms.get("voice_to_voice", float("nan")), r.stages_ms.get("endpointing", float("nan"))
    rule, p = (eot or {}).get("rule"), (eot or {}).get("p_complete")
    print(f"[{mode}] {voice:9} v2v {v2v:5.0f} ms endpointing {ep:4.0f} {rule} p={p} {q!r}", flush=True)
    return {"mode": mode, "voice": voice, "question": q, "stages_ms": r.stages_ms, "end_of_turn": eot}


def on_line(line: str, samples: np.ndarray) -> np.ndarray:
    """``samples`` as the server hears them over ``line`` (``phone``: an 8 kHz µ-law call)."""
    return phone_line(samples, RATE) if line == "phone" else samples


def complete_items(voice: str, line: str) -> list[tuple[str, np.ndarray]]:
    """What is said without a pause, as (text, audio): the complete questions in ``voice`` (an
    espeak-ng voice), or for ``human`` the finished utterances people said (recorded)."""
    if voice == "human":
        return [(rec.phrases[0], on_line(line, recording(rec.file, RATE))) for rec in RECORDED_UTTERANCES]
    return [(q, on_line(line, espeak(q, voice=voice))) for q in COMPLETE_QUESTIONS]


def sentence_clips(voice: str, pause: float, line: str) -> list[PausedSpeech]:
    """The paused sentences in ``voice`` (an espeak-ng voice, or ``human``: the recorded ones),
    each pause ``pause`` s long (``human``: the speaker's own pause made ``pause`` s longer),
    as heard over ``line``."""
    if voice != "human":
        clips = [
            paused_clip(lambda t: espeak(t, voice=voice), phrases, [pause] * (len(phrases) - 1), RATE)
            for phrases in PAUSED_SENTENCES
        ]
    else:
        clips = [recorded_speech(rec, pause, RATE) for rec in RECORDED_SENTENCES]
    return [dataclasses.replace(c, samples=on_line(line, c.samples)) for c in clips]


async def paused_set(
    engines: Engines, cfg: Config, mode: str, voices: list[str], pauses: list[float], short_ms: int, line: str
) -> dict[str, Any]:
    split = total = inside = talked_over = next_over = next_pauses = 0
    heard_max: list[float] = []
    wers: list[float] = []
    rules: Counter[str] = Counter()
    sound_ms: list[float] = []
    sound_late: list[float] = []
    t0 = time.monotonic()
    for voice in voices:
        by_pause = {pause: sentence_clips(voice, pause, line) for pause in pauses}
        for i in range(len(by_pause[pauses[0]])):
            for pause in pauses:
                clip = by_pause[pause][i]
                out = await run_one(engines, cfg, clip.samples)
                turns = out["turns"]
                total += 1
                split += len(turns) > 1
                inside += out["continued"]
                res = out["result"]
                heard = reply_heard_in_pauses(res.output, res.output_rate_hz, clip, LEAD_S)
                talked_over += any(h > 0 for h in heard)
                # the pauses after a sentence's first: patience's business (the speaker had shown they pause)
                next_over += sum(h > 0 for h in heard[1:])
                next_pauses += len(heard) - 1
                heard_max.append(max(heard))
                answered = [r for r in turns if r.assistant_text]
                said = " ".join(r.user_text for r in turns)
                wers.append(word_error_rate(clip.words_said, said))
                for r in out["records"]:
                    if r.end_of_turn is not None:
                        rules[r.end_of_turn.rule] += 1
                        if r.end_of_turn.sound_compute_ms is not None:
                            sound_ms.append(r.end_of_turn.sound_compute_ms)
                        if r.end_of_turn.sound_after_ms is not None:
                            sound_late.append(r.end_of_turn.sound_after_ms)
                mark = "ok" if len(turns) == 1 else f"SPLIT x{len(turns)}"
                # how each turn ended: the rule, after how much silence (ms), the turn model's P(complete),
                # the words' cue; "undone" = an end the speaker then went on after (in a pause)
                eots = [
                    (tag, e.as_dict())
                    for r in out["records"]
                    for tag, e in [*(("undone ", u) for u in r.undone_ends), ("", r.end_of_turn)]
                    if e is not None
                ]
                ends = " ".join(
                    f"{tag}{e['rule']}@{e['silence_ms']:.0f}(p={e['p_complete']},{e['cue']})"
                    for tag, e in eots
                )
                print(
                    f"[{mode}] {voice:9} pause {pause:.1f}s {mark:9} answered {len(answered)} "
                    f"continued {out['continued']} heard in pauses {' '.join(f'{h:.2f}' for h in heard)} s "
                    f"{said!r} ends: {ends}",
                    flush=True,
                )
    hidden = sum(1 for t in sound_late if t <= short_ms) / len(sound_late) if sound_late else float("nan")
    return {
        "paused_utterances": total,
        "premature_end_of_turn_rate": split / total if total else float("nan"),
        "endpoints_undone_by_continuation": inside,
        # the target "no reply audio while a paused speaker is still speaking"
        "sentences_with_reply_audio_in_a_pause": talked_over,
        "pauses_after_the_first_with_reply_audio": f"{next_over} of {next_pauses}",
        "reply_audio_in_a_pause_max_s": max(heard_max, default=float("nan")),
        "wer_mean": float(np.mean(wers)) if wers else float("nan"),
        "rules": dict(rules),
        "turn_model_ms_p50": percentile(sound_ms, 50),
        "turn_model_back_after_speech_end_p50_ms": percentile(sound_late, 50),
        "turn_model_back_within_short_silence": hidden,
        "seconds": round(time.monotonic() - t0),
    }


async def conversation_set(
    engines: Engines, cfg: Config, mode: str, voices: list[str], pauses: list[float], gap_s: float, line: str
) -> dict[str, Any]:
    """Each voice and pause: one session, every paused sentence in turn, ``gap_s`` after each."""
    cfg = dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, max_tokens=min(cfg.llm.max_tokens, 24)))
    gap = np.zeros(round(gap_s * RATE), np.float32)
    over_total = later_over = sessions = later = extra_turns = undone = said = 0
    t0 = time.monotonic()
    for voice in voices:
        for pause in pauses:
            clips = sentence_clips(voice, pause, line)
            said += len(clips)
            starts, pos = [], LEAD_S
            for clip in clips:
                starts.append(pos)
                pos += len(clip.samples) / RATE + gap_s
            out = await run_one(engines, cfg, np.concatenate([x for c in clips for x in (c.samples, gap)]))
            res = out["result"]
            over = [
                any(h > 0 for h in reply_heard_in_pauses(res.output, res.output_rate_hz, c, at))
                for c, at in zip(clips, starts, strict=True)
            ]
            sessions += 1
            over_total += sum(over)
            if any(over):  # after the first sentence talked over
                after = over[over.index(True) + 1 :]
                later += len(after)
                later_over += sum(after)
            extra_turns += max(0, len(out["turns"]) - len(clips))
            undone += out["continued"]
            print(
                f"[{mode}] {voice:9} pause {pause:.1f}s reply audio in a pause: "
                f"{''.join('X' if o else '.' for o in over)} turns {len(out['turns'])} of {len(clips)} "
                f"continued {out['continued']}",
                flush=True,
            )
    return {
        "conversation_sessions": sessions,
        "sentences": said,
        "sentences_with_reply_audio_in_a_pause": over_total,
        "after_the_first_such_one": later,
        "after_the_first_such_one_with_reply_audio_in_a_pause": later_over,
        "turns_beyond_one_per_sentence": extra_turns,
        "endpoints_undone_by_continuation": undone,
        "seconds": round(time.monotonic() - t0),
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pauses", default="0.4,0.8,1.2", help="pause lengths (s), comma-separated")
    ap.add_argument(
        "--voices",
        default="en-us+f3,en-us+m3,en-gb+m1",
        help="espeak-ng voices; 'human' = the recorded sentences (tests/data/human), pauses made longer",
    )
    ap.add_argument("--modes", default="old,new")
    ap.add_argument("--questions", type=int, default=2, help="repeats of each complete question per voice")
    ap.add_argument(
        "--question-voices",
        default="en-us+f3,en-gb+m1",
        help="voices of the complete questions (same in every mode); 'human' = finished things people "
        "said (tests/data/human), reported apart as v2v_human",
    )
    ap.add_argument("--skip-paused", action="store_true", help="only the complete questions (voice-to-voice)")
    ap.add_argument(
        "--conversation",
        action="store_true",
        help="the paused sentences one after another in one session per voice and pause",
    )
    ap.add_argument(
        "--reply-gap", type=float, default=10.0, help="--conversation: seconds after each sentence"
    )
    ap.add_argument(
        "--line",
        choices=("wideband", "phone"),
        default="wideband",
        help="phone: all speech through an 8 kHz G.711 mu-law line, as a Twilio call carries it",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--config", type=Path, help="YAML config the modes start from (default: the defaults)")
    args = ap.parse_args()
    pauses = [float(p) for p in args.pauses.split(",")]
    voices = args.voices.split(",")
    base = load_config(args.config)
    engines = Engines.load(
        base, prepare_models(base, progress=lambda m: None), lambda m: print(m, file=sys.stderr)
    )
    await engines.warm_up()
    print(
        f"machine: {cpu_name()}; turn model: {'on' if engines.turn else 'off'}; line: {args.line}", flush=True
    )
    report: dict[str, Any] = {"machine": cpu_name(), "line": args.line, "modes": {}}
    modes = args.modes.split(",")
    summaries: dict[str, dict[str, Any]] = {}
    for mode in modes:
        cfg = mode_config(base, mode)
        await run_one(engines, cfg, espeak(COMPLETE_QUESTIONS[0]))  # warm, not counted
        if args.conversation:
            summaries[mode] = await conversation_set(
                engines, cfg, mode, voices, pauses, args.reply_gap, args.line
            )
        elif not args.skip_paused:
            summaries[mode] = await paused_set(
                engines, cfg, mode, voices, pauses, base.vad.end_silence_ms, args.line
            )
        else:
            summaries[mode] = {}
    # complete questions: the modes interleaved question by question, so that the machine's
    # load (shared, noisy) falls on both alike
    # (``human``: the finished utterances people said, counted apart from the espeak questions)
    v2v: dict[str, dict[str, list[float]]] = {m: {"complete": [], "human": []} for m in modes}
    rules: dict[str, Counter[str]] = {m: Counter() for m in modes}
    rows: list[dict[str, Any]] = []
    for _ in range(args.questions):
        for voice in args.question_voices.split(","):
            for q, audio in complete_items(voice, args.line):
                for mode in modes:
                    out = await run_one(engines, mode_config(base, mode), audio)
                    for r in out["turns"]:
                        row = question_row(mode, voice, q, r)
                        rows.append(row)
                        if "voice_to_voice" in r.stages_ms:
                            v2v[mode]["human" if voice == "human" else "complete"].append(
                                r.stages_ms["voice_to_voice"]
                            )
                        if row["end_of_turn"] is not None:
                            rules[mode][row["end_of_turn"]["rule"]] += 1
    report["questions"] = rows
    for mode in modes:
        complete, human = v2v[mode]["complete"], v2v[mode]["human"]
        summaries[mode].update(
            {
                "v2v_complete_p50_ms": percentile(complete, 50),
                "v2v_complete_p95_ms": percentile(complete, 95),
                "v2v_n": len(complete),
                "question_rules": dict(rules[mode]),
            }
        )
        if human:
            summaries[mode].update(
                {
                    "v2v_human_p50_ms": percentile(human, 50),
                    "v2v_human_p95_ms": percentile(human, 95),
                    "v2v_human_n": len(human),
                }
            )
        report["modes"][mode] = summaries[mode]
        print(f"\n== {mode}: " + json.dumps(summaries[mode], indent=1), flush=True)
    await engines.aclose()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
