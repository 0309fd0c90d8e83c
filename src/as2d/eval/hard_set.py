"""The hard benchmark set: the speech users have, not the drafter's easy case (issue 18).

The bench set (one professional voice reading telephone prompts, and Piper's synthetic
speech) is where a drafter does best. The hard set beside it has four subsets; every
recording is a 16 kHz FLAC listed in the manifest with its `subset`, its `language` and,
where the package has transcripts, its reference:

- varied: other real voices and languages, a voice's prompts joined into a recording of
  about a minute: asterisk-core-sounds-{fr,it,ru}-wav (June, fr-CA; Carlo, it; a Russian
  voice; with transcripts), asterisk-prompt-fr-armelle (Armelle Desjardins),
  asterisk-prompt-es-co (July Jiménez, es-CO) and asterisk-prompt-it-menardi-wav (Paola Dal
  Zot); and codec2-examples' English talkers (radio amateurs on the air, Harvard sentences)
  joined into one recording;
- short: single utterances of 1-8 s, one file (one window) each: pocketsphinx-testdata
  (a LibriVox reader, spoken cards, commands), codec2-examples' short clips, a few prompts
  of each varied voice, and Allison's English prompts to make up the total;
- conversation: turns of different English voices (Allison, Piper's joe, the codec2 and
  pocketsphinx talkers) with 0.2-1.0 s pauses between them;
- degraded: Allison's prompts and joe's sentences joined, then each of `DEGRADATIONS`:
  telephone band, babble of the varied voices at 5 and 15 dB SNR, a reverberant room,
  0.9x and 1.1x speed.

Debian packages are fetched into the cache with `apt-get download` and unpacked there
(`builders.fetch_debian`): nothing is installed system-wide. Every choice is seeded, so a
build makes the same recordings; recordings already written are kept.
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import soundfile as sf

from as2d.audio.load import audio_duration, load_audio
from as2d.eval.builders import (
    GAP_S,
    Clip,
    asterisk_prompts,
    fetch_debian,
    joined_text,
    plan_long_form,
    silence,
    write_recording,
    written,
)
from as2d.eval.datasets import Recording
from as2d.eval.degrade import (
    babble,
    change_speed,
    mix_at_snr,
    reverberate,
    telephone_band,
)
from as2d.eval.speech import PASSAGES, piper_clips
from as2d.types import SAMPLE_RATE

SUBSETS = ("varied", "short", "conversation", "degraded")
SEED = 18  # the number; each subset draws from its own generator seeded from it

VARIED_MINUTES = 1.2  # per voice
SHORT_S = (1.0, 8.0)  # how long a short utterance may be
SHORT_MINUTES = 5.5  # the short subset in all
SHORT_PER_VOICE = 4  # prompts of each varied voice among the short utterances
CONVERSATION_COUNT, CONVERSATION_MINUTES = 3, 2.3
TURN_GAP_S = (0.2, 1.0)  # silence between two turns
IN_TURN_GAP_S = (0.1, 0.3)  # silence between two clips of one turn
TURN_CLIP_S = 12.0  # longer prompts are not used as turns
DEGRADED_MINUTES = 0.9  # each clean recording that is then degraded
BABBLE_TALKERS = 6
ROOM_M = (6.0, 4.5, 3.0)  # length, width, height of the simulated room

CORE_VOICES = (("june", "fr"), ("carlo", "it"), ("ivr", "ru"))  # asterisk-core-sounds-LANG
PROMPT_VOICES = (  # name, language, Debian package (prompts without transcripts)
    ("armelle", "fr", "asterisk-prompt-fr-armelle"),
    ("july", "es", "asterisk-prompt-es-co"),
    ("menardi", "it", "asterisk-prompt-it-menardi-wav"),
)
CODEC2_LONG = (  # under usr/share/codec2/: several English talkers, 8 kHz (16 kHz: _16k)
    "wav/ve9qrp.wav",
    "raw/hts.raw",
    "raw/speech_orig_16k.wav",
    "wav/vk5qi.wav",
    "raw/cq_ref.raw",
)
CODEC2_SHORT = (
    "wav/big_dog.wav",
    "wav/cross.wav",
    "wav/forig.wav",
    "wav/morig.wav",
    "wav/mmt1.wav",
    "raw/g3plx.raw",
    "raw/kristoff.raw",
    "wav/wia_16kHz.wav",
)
POCKETSPHINX_RAW = ("goforward.raw", "something.raw", "numbers.raw")  # 16 kHz, no transcript


@dataclass(frozen=True)
class Voice:
    """Recordings of one speaker (or of a few, from one package) in one language."""

    name: str  # as it appears in file names
    language: str  # Whisper's code
    clips: tuple[Clip, ...]


@dataclass(frozen=True)
class Degradation:
    """One way the degraded subset spoils clean speech; its name goes in the file name."""

    name: str
    telephone: bool = False
    babble_snr_db: float | None = None
    rt60_s: float | None = None  # a reverberant room
    speed: float = 1.0


DEGRADATIONS = (
    Degradation("telephone", telephone=True),
    Degradation("babble5db", babble_snr_db=5.0),
    Degradation("babble15db", babble_snr_db=15.0),
    Degradation("reverb", rt60_s=0.6),
    Degradation("speed0.9", speed=0.9),
    Degradation("speed1.1", speed=1.1),
)


@dataclass(frozen=True)
class Plan:
    """One recording to make: clips joined with gaps, then degraded (or not)."""

    name: str
    subset: str
    language: str
    clips: tuple[Clip, ...]
    gaps: tuple[float, ...]  # silence after each clip, seconds
    degradation: Degradation | None = None


class Sources:
    """Every voice of the hard set, fetched (or synthesised) into the cache on first use."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    @cached_property
    def allison(self) -> Voice:
        return Voice("allison", "en", tuple(asterisk_prompts(self.cache, "en")))

    @cached_property
    def joe(self) -> Voice:
        sentences = [s for p in PASSAGES for s in re.split(r"(?<=[.?!])\s+", p)]
        return Voice("joe", "en", tuple(piper_clips(sentences, self.cache / "piper" / "joe")))

    @cached_property
    def varied(self) -> list[Voice]:
        """The other languages' voices, transcribed ones first."""
        core = [
            Voice(n, lang, tuple(asterisk_prompts(self.cache, lang))) for n, lang in CORE_VOICES
        ]
        prompts = [
            Voice(name, language, tuple(prompt_clips(self.cache, package)))
            for name, language, package in PROMPT_VOICES
        ]
        return [*core, *prompts]

    @cached_property
    def codec2(self) -> dict[str, Clip]:
        """codec2-examples' English clips by their path under usr/share/codec2/."""
        root = fetch_debian(self.cache, ["codec2-examples"], "debian/codec2-examples")
        files = root / "usr/share/codec2"
        return {name: _clip(files / name, 8000, None) for name in (*CODEC2_LONG, *CODEC2_SHORT)}

    @cached_property
    def pocketsphinx(self) -> Voice:
        """pocketsphinx-testdata's English utterances (transcribed where it says what)."""
        root = fetch_debian(self.cache, ["pocketsphinx-testdata"], "debian/pocketsphinx-testdata")
        data = root / "usr/share/pocketsphinx/test/data"
        texts = _sphinx_transcripts(data / "librivox/transcription")
        texts |= _sphinx_transcripts(data / "cards/cards.transcription")
        wavs = sorted([*data.glob("librivox/*.wav"), *data.glob("cards/*.wav")])
        clips = [_clip(path, SAMPLE_RATE, texts.get(path.stem)) for path in wavs]
        clips += [_clip(data / name, SAMPLE_RATE, None) for name in POCKETSPHINX_RAW]
        return Voice("sphinx", "en", tuple(clips))

    @cached_property
    def others(self) -> Voice:
        """The short English clips of several talkers (codec2 and pocketsphinx)."""
        codec2 = tuple(self.codec2[name] for name in CODEC2_SHORT)
        return Voice("others", "en", codec2 + self.pocketsphinx.clips)


def prompt_clips(cache: Path, package: str) -> list[Clip]:
    """Every spoken prompt of an asterisk-prompt-* package (no beeps, no silence), sorted."""
    sounds = fetch_debian(cache, [package], f"debian/{package}") / "usr/share/asterisk/sounds"
    paths = sorted(
        p
        for p in sounds.rglob("*")
        if p.suffix in (".wav", ".gsm")
        and not p.stem.startswith("beep")
        and "silence" not in p.relative_to(sounds).parts
    )
    return [Clip(path, None, audio_duration(path)) for path in paths]


def build_hard_set(out: Path, cache: Path, progress: bool = True) -> list[Recording]:
    """Every recording of the hard set in OUT (those already there are kept), in plan order.

    Args:
        out: where the FLAC files (and their references) go.
        cache: where Debian packages and Piper's sentences are kept between builds.
        progress: a line on stderr per recording.

    Raises:
        DatasetError: a package cannot be fetched, or Piper is not installed (one line).
    """
    sources = Sources(cache)
    plans = plan_hard_set(sources)
    recordings = []
    for number, plan in enumerate(plans, start=1):
        path = out / f"{plan.name}.flac"
        kept = path.is_file()
        if not kept:
            write_recording(path, [render(plan, sources)], SAMPLE_RATE, joined_text(plan.clips))
        if progress:
            seconds = sf.info(path).duration
            state = "kept" if kept else "written"
            print(
                f"hard set [{number}/{len(plans)}] {plan.subset}: {path.name}, "
                f"{seconds:.1f} s ({state})",
                file=sys.stderr,
                flush=True,
            )
        recordings.append(written(path, plan.language, plan.subset))
    return recordings


def plan_hard_set(sources: Sources) -> list[Plan]:
    """What every recording of the hard set is made of, subset by subset (seeded)."""
    varied = plan_varied(sources, np.random.default_rng([SEED, 0]))
    used = {clip.path for plan in varied for clip in plan.clips}
    short = plan_short(sources, used, np.random.default_rng([SEED, 1]))
    conversation = plan_conversation(sources, np.random.default_rng([SEED, 2]))
    degraded = plan_degraded(sources, np.random.default_rng([SEED, 3]))
    return [*varied, *short, *conversation, *degraded]


def plan_varied(sources: Sources, rng: np.random.Generator) -> list[Plan]:
    """A recording of about VARIED_MINUTES per varied voice, and codec2's English talkers."""
    plans = []
    for voice in sources.varied:
        for clips, gaps in plan_long_form(voice.clips, 1, VARIED_MINUTES, rng):
            name = f"varied-{voice.name}-{voice.language}-00"
            plans.append(Plan(name, "varied", voice.language, tuple(clips), tuple(gaps)))
    talkers = [sources.codec2[name] for name in CODEC2_LONG]
    order = [talkers[i] for i in rng.permutation(len(talkers))]
    pauses = tuple(float(gap) for gap in rng.uniform(*GAP_S, size=len(order)))
    plans.append(Plan("varied-codec2-en-00", "varied", "en", tuple(order), pauses))
    return plans


def plan_short(sources: Sources, used: set[Path], rng: np.random.Generator) -> list[Plan]:
    """Utterances of SHORT_S seconds, one a recording: every codec2 and pocketsphinx one,
    SHORT_PER_VOICE of each varied voice (none in `used`), then Allison's up to the total."""
    chosen = [(sources.others, clip) for clip in sources.others.clips if _short(clip)]
    for voice in sources.varied:
        fits = [clip for clip in voice.clips if _short(clip) and clip.path not in used]
        picks = rng.choice(len(fits), size=min(SHORT_PER_VOICE, len(fits)), replace=False)
        chosen += [(voice, fits[i]) for i in sorted(picks)]
    allison = [clip for clip in sources.allison.clips if _short(clip)]
    seconds = sum(clip.seconds for _, clip in chosen)
    for i in rng.permutation(len(allison)):
        if seconds >= SHORT_MINUTES * 60:
            break
        chosen.append((sources.allison, allison[i]))
        seconds += allison[i].seconds
    plans = []
    for n, (voice, clip) in enumerate(chosen):
        name = f"short-{n:03d}-{voice.name}-{clip.path.stem}"
        plans.append(Plan(name, "short", voice.language, (clip,), (0.0,)))
    return plans


def plan_conversation(sources: Sources, rng: np.random.Generator) -> list[Plan]:
    """CONVERSATION_COUNT recordings of turns: each turn one or two clips of a voice other
    than the last turn's (Allison and joe most often), then a pause of TURN_GAP_S."""
    voices = [sources.allison, sources.joe, sources.others]
    weights = np.array([0.45, 0.4, 0.15])
    queues: list[list[Clip]] = [[] for _ in voices]
    plans = []
    for n in range(CONVERSATION_COUNT):
        clips: list[Clip] = []
        gaps: list[float] = []
        last, seconds = -1, 0.0
        while seconds < CONVERSATION_MINUTES * 60:
            p = np.where(np.arange(len(voices)) == last, 0.0, weights)
            last = int(rng.choice(len(voices), p=p / p.sum()))
            turn, pauses = _turn(voices[last], queues[last], rng)
            clips += turn
            gaps += pauses
            seconds += sum(clip.seconds for clip in turn) + sum(pauses)
        plans.append(Plan(f"conversation-{n:02d}", "conversation", "en", tuple(clips), tuple(gaps)))
    return plans


def plan_degraded(sources: Sources, rng: np.random.Generator) -> list[Plan]:
    """Allison's prompts and joe's sentences joined (about DEGRADED_MINUTES each), then each
    joined recording degraded in every way of DEGRADATIONS."""
    plans = []
    for voice in (sources.allison, sources.joe):
        for clips, gaps in plan_long_form(voice.clips, 1, DEGRADED_MINUTES, rng):
            for d in DEGRADATIONS:
                name = f"degraded-{d.name}-{voice.name}-00"
                plans.append(Plan(name, "degraded", "en", tuple(clips), tuple(gaps), d))
    return plans


def render(plan: Plan, sources: Sources) -> np.ndarray:
    """The samples of `plan` (16 kHz mono float32): its clips joined, then degraded."""
    pieces = []
    for clip, gap in zip(plan.clips, plan.gaps, strict=True):
        pieces += [load_audio(clip.path), silence(gap, SAMPLE_RATE)]
    audio = np.concatenate(pieces)
    d = plan.degradation
    if d is None:
        return audio
    if d.telephone:
        audio = telephone_band(audio)
    if d.babble_snr_db is not None:
        rng = np.random.default_rng([SEED, zlib.crc32(plan.name.encode())])
        talkers = [_talker(voice, len(audio), rng) for voice in sources.varied[:BABBLE_TALKERS]]
        audio = mix_at_snr(audio, babble(talkers), d.babble_snr_db)
    if d.rt60_s is not None:
        audio = reverberate(audio, d.rt60_s, ROOM_M)
    if d.speed != 1.0:
        audio = change_speed(audio, d.speed)
    return audio


def subset_minutes(recordings: Sequence[Recording]) -> dict[str, float]:
    """Minutes of audio per subset, in the order subsets first appear."""
    minutes: dict[str, float] = {}
    for r in recordings:
        key = r.subset or "-"
        minutes[key] = minutes.get(key, 0.0) + sf.info(r.audio).duration / 60
    return minutes


def _talker(voice: Voice, length: int, rng: np.random.Generator) -> np.ndarray:
    """`length` samples of `voice` talking on: its prompts in a random order, back to back."""
    pieces: list[np.ndarray] = []
    total = 0
    for i in rng.permutation(len(voice.clips)):
        if total >= length:
            break
        pieces.append(load_audio(voice.clips[i].path))
        total += len(pieces[-1])
    return np.resize(np.concatenate(pieces), length)


def _turn(
    voice: Voice, queue: list[Clip], rng: np.random.Generator
) -> tuple[list[Clip], list[float]]:
    """One turn of `voice`: one or two clips, the pauses after each (the last a turn's).

    The clips come from `queue`, refilled with a shuffled round of the voice's clips of
    up to TURN_CLIP_S whenever it runs out, so a voice repeats itself only after a round.
    """
    clips = []
    for _ in range(int(rng.integers(1, 3))):
        if not queue:
            fits = [clip for clip in voice.clips if clip.seconds <= TURN_CLIP_S]
            queue += [fits[i] for i in rng.permutation(len(fits))]
        clips.append(queue.pop())
    pauses = [float(rng.uniform(*IN_TURN_GAP_S)) for _ in clips[1:]]
    return clips, [*pauses, float(rng.uniform(*TURN_GAP_S))]


def _short(clip: Clip) -> bool:
    return SHORT_S[0] <= clip.seconds <= SHORT_S[1]


def _clip(path: Path, raw_rate: int, text: str | None) -> Clip:
    """A clip of `path`; headerless .raw (16-bit, `raw_rate`) is first copied to a .wav."""
    if path.suffix == ".raw":
        wav = path.with_suffix(".wav")
        if not wav.is_file():
            samples = np.fromfile(path, dtype="<i2")
            partial = wav.with_suffix(".partial.wav")
            sf.write(partial, samples, raw_rate, "PCM_16")
            partial.replace(wav)
        path = wav
    return Clip(path, text, sf.info(path).duration)


def _sphinx_transcripts(path: Path) -> dict[str, str]:
    """`<s> words </s> (id)` lines of a Sphinx transcription file, as id -> words."""
    texts = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\s*<s>(.*)</s>\s*\((\S+)\)\s*", line)
        if match:
            texts[match.group(2)] = " ".join(match.group(1).split())
    return texts
