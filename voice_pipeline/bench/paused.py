"""Speech with pauses inside sentences, the way people speak (pure, given a synthesizer).

Real speakers pause 0.5-1.2 s in the middle of a sentence ("I'd like to book a table
for ... four people ... at seven tonight"); synthetic voices never do, which is why
a pipeline tested only on them cuts real users into fragments. :func:`paused_clip`
makes such speech from any synthesizer:

1. the whole sentence is synthesized at once, its phrases joined by commas, so each
   phrase keeps the intonation of a sentence that goes on (synthesizing fragments
   one by one would give each a falling, final-sounding end);
2. the silent gaps the commas left are found on the audio (:func:`find_gaps`: the
   longest runs of 10 ms frames 40 dB below the loudest, :func:`asr.pauses.silent_runs`);
3. each is stretched to the pause wanted.

If the voice left fewer gaps than there are commas, the phrases are synthesized one
by one and joined with the pauses instead (and the clip says so). The clip records
where each pause begins (``phrase_ends``), so a benchmark can tell a turn that ended
while the speaker had more to say from one that ended with the sentence.

Synthetic voices are kinder than people, and their prosody at a comma is their own (espeak's
en-gb falls there as at a full stop). :data:`RECORDED_SENTENCES` are sentences people said,
recorded, with their own short pauses; :func:`recorded_clip` makes those pauses longer by
repeating the recording's room tone there, so the speaker's intonation before each pause is
a person's.

:func:`degrade` varies what the microphone hears: level, a noise floor; :func:`phone_line`
what a phone call carries of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from asr.pauses import silent_runs
from voice_pipeline.audio import resample, to_float32, to_int16
from voice_pipeline.telephony import mulaw

#: sentences said with pauses at the phrase boundaries; the pauses fall where people
#: hesitate: after a preposition or a filler, before an afterthought, inside a list
PAUSED_SENTENCES: tuple[tuple[str, ...], ...] = (
    ("I'd like to book a table for", "four people", "at seven tonight."),
    ("The thing is", "I don't really know", "what to cook."),
    ("I need eggs", "milk", "and some bread."),
    ("So um", "I was wondering if", "you could help me."),
    ("Can you tell me", "what the weather will be like", "tomorrow morning?"),
    ("My favourite animal is", "the elephant", "because it is so big."),
)
#: complete questions said without a pause (answered as fast as before)
COMPLETE_QUESTIONS: tuple[str, ...] = (
    "What is the capital of France?",
    "How many days are in a week?",
    "What do bees make?",
)


@dataclass(frozen=True, slots=True)
class Recording:
    """A sentence a person said, recorded (``tests/data/human``: where each file comes from,
    and its checksum, is in the README there), with the speaker's own short pauses at
    ``splits_s``, where :func:`recorded_clip` makes them longer."""

    file: str
    #: what was said, as the publisher transcribed it, split at the pauses
    phrases: tuple[str, ...]
    #: the quietest moment of each pause between two phrases (s into the recording)
    splits_s: tuple[float, ...]


#: people's own prosody at a pause, which synthetic voices lack: read speech (LibriVox, one
#: reader) with pauses after a clause, a title and a preposition-less fragment, and a list
#: said item by item (a second speaker), each item ending as if it were the last
RECORDED_SENTENCES: tuple[Recording, ...] = (
    Recording(
        "austen-0870.flac",
        (
            "and mister",
            "john dashwood had then",
            "leisure to consider how much there might be prudently in his power to do for them",
        ),
        (0.68, 2.23),
    ),
    Recording(
        "austen-0890.flac",
        ("unless to be rather", "cold hearted and rather selfish is to be ill disposed"),
        (1.30,),
    ),
    Recording(
        "austen-0920.flac",
        (
            "had he married a more a amiable woman",
            "he might have been made still more respectable than he was",
        ),
        (2.54,),
    ),
    Recording("cards-005.flac", ("eight of spades", "four of clubs", "seven of hearts"), (1.27, 2.21)),
)
#: finished things people said, each a whole recording with no pause to make longer: a turn
#: whose end a person's voice marks (the reader's "himself" closes a clause in the book; the
#: last two are one sentence said twice, "Feels like these days go on forever.")
RECORDED_UTTERANCES: tuple[Recording, ...] = (
    Recording("austen-0930.flac", ("he might even have been made amiable himself",), ()),
    Recording("cards-001.flac", ("ten of clubs",), ()),
    Recording("cards-003.flac", ("seven of clubs",), ()),
    Recording("forever-2.flac", ("feels like these days go on forever",), ()),
    Recording("forever-4.flac", ("feels like these days go on forever",), ()),
)
#: a phone call's audio rate (G.711)
PHONE_RATE_HZ = 8000
#: words people say while holding the floor; Whisper usually leaves them out
FILLERS = frozenset({"um", "uh", "er", "erm", "uhm", "hmm"})

#: a gap is at least this long (and 40 dB below the loudest 10 ms frame: asr.pauses)
MIN_GAP_S = 0.06

Synth = Callable[[str], NDArray[np.float32]]


@dataclass(frozen=True, slots=True)
class PausedSpeech:
    """One sentence spoken with pauses: mono float32 at ``rate_hz``."""

    phrases: tuple[str, ...]
    samples: NDArray[np.float32]
    rate_hz: int
    #: where each pause begins (the end of every phrase but the last), samples
    phrase_ends: tuple[int, ...]
    pauses_s: tuple[float, ...]
    #: the phrases were synthesized one by one (the voice left no gap at a comma)
    spliced: bool = False

    @property
    def text(self) -> str:
        """What was said, as one sentence."""
        return " ".join(p.strip().rstrip(",") for p in self.phrases)

    @property
    def words_said(self) -> str:
        """The words a transcript should hold: the sentence without its fillers."""
        return " ".join(w for w in self.text.split() if w.lower().strip(",.?!") not in FILLERS)


def find_gaps(samples: NDArray[np.float32], rate_hz: int, count: int) -> list[tuple[int, int]]:
    """The ``count`` longest silent gaps inside the speech (at least :data:`MIN_GAP_S`, 40 dB
    below the loudest 10 ms frame), in time order, as [start, end) sample spans."""
    if count <= 0:
        return []
    runs = silent_runs(samples, rate_hz, MIN_GAP_S)
    return sorted(sorted(runs, key=lambda r: r[1] - r[0], reverse=True)[:count])


def _silence(seconds: float, rate_hz: int) -> NDArray[np.float32]:
    return np.zeros(round(seconds * rate_hz), dtype=np.float32)


def paused_clip(
    synth: Synth, phrases: Sequence[str], pauses_s: Sequence[float], rate_hz: int
) -> PausedSpeech:
    """``phrases`` said as one sentence with ``pauses_s[i]`` of silence after phrase ``i``.

    ``synth(text)`` returns mono float32 speech at ``rate_hz``.
    """
    if len(pauses_s) != len(phrases) - 1:
        raise ValueError(f"{len(phrases)} phrases need {len(phrases) - 1} pauses, got {len(pauses_s)}")
    joined = ", ".join(p.strip().rstrip(",.") for p in phrases[:-1])
    text = f"{joined}, {phrases[-1].strip()}" if len(phrases) > 1 else phrases[0]
    whole = np.asarray(synth(text), dtype=np.float32)
    gaps = find_gaps(whole, rate_hz, len(pauses_s))
    if len(gaps) == len(pauses_s):
        parts: list[NDArray[np.float32]] = []
        ends: list[int] = []
        pos = 0
        length = 0
        for (start, end), pause in zip(gaps, pauses_s, strict=True):
            parts.append(whole[pos:start])
            length += start - pos
            ends.append(length)
            parts.append(_silence(pause, rate_hz))
            length += round(pause * rate_hz)
            pos = end
        parts.append(whole[pos:])
        return PausedSpeech(tuple(phrases), np.concatenate(parts), rate_hz, tuple(ends), tuple(pauses_s))
    # the voice ran the phrases together: say them one by one
    parts, ends, length = [], [], 0
    for i, phrase in enumerate(phrases):
        said = np.asarray(synth(phrase), dtype=np.float32)
        parts.append(said)
        length += len(said)
        if i < len(pauses_s):
            ends.append(length)
            parts.append(_silence(pauses_s[i], rate_hz))
            length += round(pauses_s[i] * rate_hz)
    return PausedSpeech(tuple(phrases), np.concatenate(parts), rate_hz, tuple(ends), tuple(pauses_s), True)


#: the stretch of a recording whose sound fills the pauses made longer: its room tone
ROOM_TONE_S = 0.1


def room_tone(samples: NDArray[np.float32], rate_hz: int) -> NDArray[np.float32]:
    """The recording's quietest :data:`ROOM_TONE_S` (on 10 ms frames): its noise floor, which
    a longer pause keeps hearing (digital silence in a recording would be a cue no microphone gives)."""
    frame = max(1, rate_hz // 100)
    n = len(samples) // frame
    width = max(1, round(ROOM_TONE_S * rate_hz / frame))
    if n < width:
        raise ValueError(f"a recording of {len(samples)} samples is shorter than {ROOM_TONE_S} s")
    energy = np.mean(samples[: n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1)
    start = int(np.argmin(np.convolve(energy, np.ones(width), mode="valid"))) * frame
    return samples[start : start + width * frame]


def recorded_clip(
    samples: NDArray[np.float32], rate_hz: int, rec: Recording, pauses_s: Sequence[float]
) -> PausedSpeech:
    """``rec``'s recording (mono float32 at ``rate_hz``) with ``pauses_s[i]`` more of its room
    tone at its split ``i``: the speaker's own pause, made that much longer."""
    if len(pauses_s) != len(rec.splits_s):
        raise ValueError(f"{rec.file} has {len(rec.splits_s)} pauses, got {len(pauses_s)} lengths")
    tone = room_tone(samples, rate_hz)
    parts: list[NDArray[np.float32]] = []
    ends: list[int] = []
    pos = length = 0
    for split, pause in zip(rec.splits_s, pauses_s, strict=True):
        at = round(split * rate_hz)
        if not pos < at < len(samples):
            raise ValueError(f"{rec.file}: split {split} s is outside the recording or out of order")
        parts.append(samples[pos:at])
        length += at - pos
        ends.append(length)
        parts.append(np.resize(tone, round(pause * rate_hz)))
        length += round(pause * rate_hz)
        pos = at
    parts.append(samples[pos:])
    return PausedSpeech(
        rec.phrases, np.concatenate(parts).astype(np.float32), rate_hz, tuple(ends), tuple(pauses_s)
    )


def degrade(
    samples: NDArray[np.float32], *, gain_db: float = 0.0, noise_dbfs: float | None = None, seed: int = 0
) -> NDArray[np.float32]:
    """The speech at another level, over a white noise floor at ``noise_dbfs`` (RMS)."""
    out = samples.astype(np.float64) * 10 ** (gain_db / 20)
    if noise_dbfs is not None:
        rng = np.random.default_rng(seed)
        out = out + rng.standard_normal(len(out)) * 10 ** (noise_dbfs / 20)
    return np.clip(out, -1.0, 1.0).astype(np.float32)


def phone_line(samples: NDArray[np.float32], rate_hz: int) -> NDArray[np.float32]:
    """What a phone call carries of the speech: 8 kHz G.711 µ-law (a Twilio Media Stream), brought
    back to ``rate_hz`` as the telephony bridge brings it to the pipeline, the same length."""
    narrow = resample(np.clip(samples, -1.0, 1.0).astype(np.float32), rate_hz, PHONE_RATE_HZ)
    coded = to_float32(mulaw.decode(mulaw.encode(to_int16(narrow))))
    back = resample(coded, PHONE_RATE_HZ, rate_hz)[: len(samples)]
    return np.pad(back, (0, len(samples) - len(back))).astype(np.float32)


#: a 10 ms frame of the reply louder than this (RMS, full scale 1.0) counts as heard
HEARD_RMS = 0.01
#: the next phrase's first moments count too: flushing a reply takes a frame or two
FLUSH_S = 0.3


def reply_heard_in_pauses(
    output: NDArray[np.generic], rate_hz: int, clip: PausedSpeech, lead_s: float
) -> list[float]:
    """Seconds of reply audio audible in each of ``clip``'s pauses (and :data:`FLUSH_S` into
    the phrase after it): what a speaker who is not done hears the assistant say over them.
    ``output`` is the session's output timeline (int16 or float) at ``rate_hz``, and the clip
    began ``lead_s`` into the input."""
    raw = np.asarray(output)
    out = raw.astype(np.float32) / (32768.0 if np.issubdtype(raw.dtype, np.integer) else 1.0)
    frame = max(1, rate_hz // 100)  # 10 ms
    heard = []
    for end, pause in zip(clip.phrase_ends, clip.pauses_s, strict=True):
        a = lead_s + end / clip.rate_hz
        window = out[round(a * rate_hz) : round((a + pause + FLUSH_S) * rate_hz)]
        frames = window[: len(window) // frame * frame].reshape(-1, frame)
        loud = int(np.sum(np.sqrt(np.mean(frames**2, axis=1)) > HEARD_RMS))
        heard.append(loud * frame / rate_hz)
    return heard
