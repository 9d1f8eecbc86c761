"""Whisper's short-window fast path: decode time and WER per window size, per thread count.

    .venv/bin/python benchmarks/bench_asr_window.py [--threads 1 2] [--windows 4 5 6 8 10]
        [--voices en-us+f3 en-us+m3 en-gb+m1 piper] [--sets questions sentences held-out]
        [--pads silence zeros] [--encoder-only]

    # the AVX2 code paths on an AVX-512 machine (labelled "emulated" in the output):
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 CT2_FORCE_CPU_ISA=AVX2 \\
        .venv/bin/python benchmarks/bench_asr_window.py

Clips: three sets of sentences (12 questions of 0.9-7.1 s, 32 sentences, 24 held-out),
spoken by espeak-ng (150 wpm) in each voice given and by Piper (the project's voice,
``piper``), each bare and "framed" (150 ms of silence before, 300 ms after, as the VAD
delivers an utterance). Every clip is decoded in every window that holds it with at
least ``--min-room`` seconds to spare, with every thread count, interleaved clip by
clip (the machine is shared: a burst of other load hits all configurations alike). A
decode the guards reject falls back to the full 30 s window and is charged for both.

Printed per thread count and the CPU class (:func:`voice_pipeline.cpu.this_cpu`):

* the encoder alone per window, ms p50 (``--encoder-only``: only this);
* per window W: the clips W holds with 1 s of room, decode ms p50 / p90 in W and in
  10 s on the same clips, WER in each, and how many fell back;
* per window rule, over all clips: the current one (10 s only), the adaptive rule of
  :func:`asr.window.choose_window` with a 1 s margin, with a relative margin too, and
  with too little room (0.5 s; shows what the guards catch).

WER is corpus-level (edits over all reference words, case and punctuation folded); "end
mark" counts transcripts ending in the sentence's own mark ("?" or ".", not "..."), which the
end-of-turn policy reads.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from speech import espeak, normalize, word_error_rate

from asr.faster_whisper import FasterWhisperASR
from asr.window import choose_window
from voice_pipeline.config import ASRConfig, load_config
from voice_pipeline.cpu import this_cpu

RATE = 16000
FRAME_BEFORE_S = 0.15
FRAME_AFTER_S = 0.30

QUESTIONS = (
    "Hello there.",
    "What time is it?",
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Can you set a timer for ten minutes?",
    "What is the weather going to be like tomorrow?",
    "How far is it from London to Paris by train?",
    "Could you remind me to call my mother at six this evening?",
    "What is the difference between a crocodile and an alligator?",
    "I would like to book a table for four people at seven tonight, please.",
    "Can you tell me what the weather will be like in London tomorrow morning?",
    "Please read me the news headlines and then tell me how the stock market did today.",
)
SENTENCES = (
    "Turn on the lights.",
    "Play some music.",
    "What day is it today?",
    "Stop the alarm.",
    "I am looking for a good book to read.",
    "The train to Manchester leaves at half past nine.",
    "My sister lives in a small house near the river.",
    "Please add eggs, milk and bread to the shopping list.",
    "How do I make a cup of tea?",
    "Tell me a joke about a cat.",
    "The meeting has been moved to Thursday afternoon.",
    "I think it is going to rain later today.",
    "Can you help me write an email to my landlord?",
    "What is the tallest mountain in the world?",
    "We should leave early to avoid the traffic on the motorway.",
    "The children played in the garden until it got dark.",
    "How many ounces are in a pound?",
    "Send a message to John saying I will be ten minutes late.",
    "Why is the sky blue?",
    "Remind me to water the plants on Sunday.",
    "What is the best way to cook rice without it sticking to the pan?",
    "The restaurant on the corner serves excellent pizza and pasta.",
    "Yes, please.",
    "No, thank you.",
    "Who wrote the play Romeo and Juliet?",
    "Set the thermostat to twenty one degrees.",
    "My flight was delayed by three hours because of the fog.",
    "How long should I boil an egg for a soft yolk?",
    "Translate good morning into Spanish.",
    "The library closes at eight o'clock on weekdays and at five on Saturdays.",
    "What are the symptoms of a common cold?",
    "I need to buy a present for my brother's birthday next week.",
)
HELD_OUT = (
    "Open the garage door.",
    "What is the population of Japan?",
    "Call my wife.",
    "The museum is free on the first Sunday of every month.",
    "How do you spell necessary?",
    "I left my keys on the kitchen table this morning.",
    "Is it safe to swim in the lake?",
    "Order a large pizza with mushrooms and olives.",
    "What is the square root of one hundred and forty four?",
    "Our neighbours are having a party on Saturday night.",
    "Show me the route to the nearest petrol station.",
    "Good night.",
    "Which planet is closest to the sun?",
    "The doctor said I should drink more water and sleep longer.",
    "Can you recommend a film for a rainy evening?",
    "Switch off the television in the living room.",
    "How many people live in New York City?",
    "I forgot to bring my umbrella and now I am soaking wet.",
    "What does the word serendipity mean?",
    "Book a taxi to the airport for five o'clock tomorrow morning.",
    "Please pause the podcast.",
    "The price of petrol has gone up again this month.",
    "Where can I find a good bakery around here?",
    "Tell me something interesting about octopuses.",
)
SETS = {"questions": QUESTIONS, "sentences": SENTENCES, "held-out": HELD_OUT}
ESPEAK_VOICES = ("en-us+f3", "en-us+m3", "en-gb+m1")


@dataclass(frozen=True, slots=True)
class Clip:
    set_name: str
    text: str
    voice: str
    framed: bool
    audio: NDArray[np.float32]

    @property
    def audio_s(self) -> float:
        return self.audio.size / RATE


@dataclass(slots=True)
class Decode:
    ms: float
    text: str
    fell_back: bool


@dataclass(slots=True)
class Results:
    #: (clip index, engine, window) -> decode
    decodes: dict[tuple[int, str, float], Decode] = field(default_factory=dict)
    #: (clip index, engine) -> the full 30 s decode, when some window fell back
    full: dict[tuple[int, str], Decode] = field(default_factory=dict)


def edits(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edits, reference words), case and punctuation folded."""
    words = len(normalize(reference).split())
    return (round(word_error_rate(reference, hypothesis) * words) if words else 0), words


def make_clips(sets: Sequence[str], voices: Sequence[str]) -> list[Clip]:
    piper = _piper() if "piper" in voices else None
    clips: list[Clip] = []
    for set_name in sets:
        for text in SETS[set_name]:
            for voice in voices:
                bare = piper(text) if voice == "piper" and piper else espeak(text, voice=voice)
                for framed in (False, True):
                    audio = bare
                    if framed:
                        audio = np.concatenate([_zeros(FRAME_BEFORE_S), bare, _zeros(FRAME_AFTER_S)]).astype(
                            np.float32
                        )
                    clips.append(Clip(set_name, text, voice, framed, audio))
    return clips


def _zeros(seconds: float) -> NDArray[np.float32]:
    return np.zeros(round(seconds * RATE), dtype=np.float32)


def _piper() -> Callable[[str], NDArray[np.float32]]:
    from tts import build_tts
    from voice_pipeline.audio import resample, to_float32
    from voice_pipeline.models import prepare_models

    cfg = load_config(None)
    no_llm = replace(cfg, llm=replace(cfg.llm, engine="remote"))
    paths = prepare_models(no_llm, progress=lambda msg: None)
    tts = build_tts(cfg.tts, paths.tts)

    def say(text: str) -> NDArray[np.float32]:
        return resample(to_float32(tts.synthesize(text)), tts.sample_rate_hz, RATE)

    return say


def asr_model_dir() -> Path:
    from voice_pipeline.models import prepare_models

    cfg = load_config(None)
    return prepare_models(replace(cfg, llm=replace(cfg.llm, engine="remote")), progress=lambda m: None).asr


def run(
    clips: Sequence[Clip], engines: dict[str, FasterWhisperASR], windows: Sequence[float], min_room: float
) -> Results:
    results = Results()
    full = results.full
    for i, clip in enumerate(clips):
        fits = [w for w in windows if clip.audio_s + min_room <= w]
        # the order rotates clip by clip, so no configuration always runs first
        order = [(t, w) for t in engines for w in fits]
        shift = i % max(1, len(order))
        for t, w in order[shift:] + order[:shift]:
            engine = engines[t]
            t0 = time.perf_counter()
            fast = engine.transcribe_window(clip.audio, window_s=w)
            ms = (time.perf_counter() - t0) * 1000
            if fast is not None:
                results.decodes[(i, t, w)] = Decode(ms, fast.text, False)
                continue
            if (i, t) not in full:
                t1 = time.perf_counter()
                text = engine.transcribe_full(clip.audio).text
                full[(i, t)] = Decode((time.perf_counter() - t1) * 1000, text, True)
            fb = full[(i, t)]
            results.decodes[(i, t, w)] = Decode(ms + fb.ms, fb.text, True)
        if (i + 1) % 50 == 0:
            print(f"  {i + 1}/{len(clips)} clips", file=sys.stderr)
    return results


def _summary(rows: list[tuple[Clip, Decode]]) -> str:
    if not rows:
        return "(no clips)"
    ms = sorted(d.ms for _, d in rows)
    errors = words = 0
    for clip, d in rows:
        e, n = edits(clip.text, d.text)
        errors, words = errors + e, words + n
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    fallbacks = sum(d.fell_back for _, d in rows)
    # the last mark as said ("?" or "."): the end-of-turn policy reads it ("..." = trailing off)
    ends = sum(
        d.text.rstrip().endswith(clip.text[-1]) and not d.text.rstrip().endswith("..") for clip, d in rows
    )
    return (
        f"p50 {statistics.median(ms):6.1f} ms  p90 {p90:6.1f} ms  "
        f"WER {100 * errors / max(1, words):5.1f} %  fallbacks {fallbacks}  end mark {ends}/{len(rows)}"
    )


def report(clips: Sequence[Clip], results: Results, engines: Sequence[str], windows: Sequence[float]) -> None:
    largest = max(windows)
    rules: dict[str, Callable[[float], float | None]] = {
        f"{largest:g} s only (before)": lambda a: largest if a + 1.0 <= largest else None,
        "adaptive, 1 s room": lambda a: choose_window(a, largest, windows=windows, margin_s=1.0),
        "adaptive, room max(1 s, 50 %)": lambda a: choose_window(
            a, largest, windows=windows, margin_s=1.0, margin_share=0.5
        ),
        "adaptive, 0.5 s room (too little)": lambda a: choose_window(
            a, largest, windows=windows, margin_s=0.5
        ),
    }
    for t in engines:
        print(f"\n== {t}, {this_cpu().label}")
        print("per window, on the clips it holds with 1 s of room (same clips in the largest window):")
        for w in windows:
            ids = [i for i, c in enumerate(clips) if c.audio_s + 1.0 <= w]
            here = [(clips[i], results.decodes[(i, t, w)]) for i in ids if (i, t, w) in results.decodes]
            there = [(clips[i], results.decodes[(i, t, largest)]) for i in ids]
            print(f"  {w:>4g} s  {len(ids):>3} clips  {_summary(here)}")
            if w != largest:
                print(f"  {'':>4}    in {largest:g} s  {_summary(there)}")
        print(f"rejected by the guards, by room after the audio (windows below {largest:g} s):")
        for low, high in ((0.5, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 99.0)):
            keys = [
                (i, w)
                for (i, tt, w) in results.decodes
                if tt == t and w < largest and low <= w - clips[i].audio_s < high
            ]
            rejected = sum(results.decodes[(i, t, w)].fell_back for i, w in keys)
            print(
                f"  room {low:g}-{high:g} s: {rejected}/{len(keys)} "
                f"({100 * rejected / max(1, len(keys)):.0f} %)"
            )
        print("per rule, all clips (a rejected decode: the full 30 s window, or the largest window first):")
        for name, rule in rules.items():
            for retry in (False, True):
                if retry and name.startswith(f"{largest:g} s only"):
                    continue
                _rule_rows(
                    clips, results, t, largest, name + (f", then {largest:g} s" if retry else ""), rule, retry
                )
        loops = [
            (clips[i], d)
            for (i, tt, w), d in results.decodes.items()
            if tt == t and len(normalize(d.text).split()) > 2 * len(normalize(clips[i].text).split()) + 2
        ]
        print(f"transcripts over twice the words said (loops that got through): {len(loops)}")
        for clip, d in loops[:5]:
            print(f"  {clip.text!r} -> {d.text!r}")


def _rule_rows(
    clips: Sequence[Clip],
    results: Results,
    t: str,
    largest: float,
    name: str,
    rule: Callable[[float], float | None],
    retry: bool,
) -> None:
    rows: list[tuple[Clip, Decode]] = []
    by_set: dict[str, list[tuple[Clip, Decode]]] = defaultdict(list)
    skipped = 0
    for i, clip in enumerate(clips):
        w = rule(clip.audio_s)
        if w is None or (i, t, w) not in results.decodes:
            skipped += 1
            continue
        d = results.decodes[(i, t, w)]
        if retry and d.fell_back and w != largest:
            # the small window's attempt (its cost less the full decode it was charged)
            # plus the largest window's decode, with its own fallback
            big = results.decodes[(i, t, largest)]
            small_ms = d.ms - _full_ms(results, i, t)
            d = Decode(small_ms + big.ms, big.text, big.fell_back)
        rows.append((clip, d))
        by_set[clip.set_name].append(rows[-1])
    print(f"  {name:<46} {_summary(rows)}" + (f"  ({skipped} not decoded)" if skipped else ""))
    for set_name, set_rows in by_set.items():
        print(f"  {'':<6}{set_name:<40} {_summary(set_rows)}")


def _full_ms(results: Results, i: int, t: str) -> float:
    return results.full[(i, t)].ms


def encoder_ms(model_dir: Path, threads: Sequence[int], windows: Sequence[float], reps: int) -> None:
    """The encoder alone per window (a decode is this plus one decoder step per token)."""
    import ctranslate2
    from faster_whisper import WhisperModel

    cfg = ASRConfig()
    models = {
        t: WhisperModel(str(model_dir), device="cpu", compute_type=cfg.compute_type, cpu_threads=t)
        for t in threads
    }
    samples: dict[tuple[int, float], list[float]] = defaultdict(list)
    for rep in range(reps + 1):
        for t, model in models.items():
            for w in windows:
                mels = np.zeros((1, 80, round(w * 100)), dtype=np.float32)
                t0 = time.perf_counter()
                model.model.encode(ctranslate2.StorageView.from_array(mels))
                if rep:  # the first round warms up
                    samples[(t, w)].append((time.perf_counter() - t0) * 1000)
    for t in threads:
        cells = "  ".join(f"{w:g} s {statistics.median(samples[(t, w)]):5.1f}" for w in windows)
        print(f"encoder alone, {t} thread{'s' if t > 1 else ''}, ms p50 of {reps}: {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--windows", type=float, nargs="+", default=[4.0, 5.0, 6.0, 8.0, 10.0])
    ap.add_argument("--voices", nargs="+", default=[*ESPEAK_VOICES, "piper"])
    ap.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    ap.add_argument(
        "--pads",
        nargs="+",
        choices=["silence", "zeros"],
        default=["zeros"],
        help="what fills a window after the audio: zeros in feature units (faster-whisper's "
        "pad_or_trim, the engine's default) or silence (Whisper's reference); both = compared "
        "clip by clip",
    )
    ap.add_argument("--min-room", type=float, default=0.5, help="least room after the audio, seconds")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N clips (a quick look)")
    ap.add_argument("--encoder-reps", type=int, default=30, help="encoder-alone timings per window")
    ap.add_argument("--encoder-only", action="store_true", help="only time the encoder per window")
    args = ap.parse_args()
    if any(t < 1 for t in args.threads) or any(not 2.0 <= w <= 30.0 for w in args.windows):
        sys.exit("--threads must be >= 1 and --windows between 2 and 30 seconds")
    windows = sorted(args.windows)
    clips = make_clips(args.sets, args.voices)
    if args.limit:
        clips = clips[: args.limit]
    model_dir = asr_model_dir()
    engines = {
        f"{t} CTranslate2 thread{'s' if t > 1 else ''}, {pad} after the audio": FasterWhisperASR(
            ASRConfig(cpu_threads=t),
            model_dir,
            window_s=max(windows),
            windows=(),
            pad_silence=pad == "silence",
        )
        for t in args.threads
        for pad in args.pads
    }
    for engine in engines.values():  # warm-up: first calls allocate
        for w in windows:
            engine.transcribe_window(clips[0].audio, window_s=w)
    isa = " ".join(
        f"{k}={os.environ[k]}" for k in ("CT2_FORCE_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ
    )
    print(
        f"machine: {this_cpu().label}{'; ' + isa if isa else ''}; "
        f"{len(clips)} clips ({', '.join(args.sets)} x {', '.join(args.voices)} x bare/framed), "
        f"{min(c.audio_s for c in clips):.1f}-{max(c.audio_s for c in clips):.1f} s; tiny.en int8, beam 1"
    )
    encoder_ms(model_dir, sorted(args.threads), windows, args.encoder_reps)
    if args.encoder_only:
        return
    t0 = time.monotonic()
    results = run(clips, engines, windows, args.min_room)
    report(clips, results, list(engines), windows)
    print(f"\n{time.monotonic() - t0:.0f} s; load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
