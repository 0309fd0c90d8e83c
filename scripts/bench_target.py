"""Target-only decoding against CTranslate2 (faster-whisper) greedy, on the same windows.

Every runtime decodes the same speech windows of one recording greedily, without
timestamps, with the same whisper-base weights (ours: float32 torch; CTranslate2: float32
and int8), at 1 and 2 threads. Runs are interleaved (each repeat visits every
configuration in turn) after a warm-up pass, and medians are reported with WER.

    .venv/bin/python scripts/bench_target.py [AUDIO] [--reference TXT] [--repeats 3] [--generate]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from faster_whisper import WhisperModel

from as2d.api import Transcriber
from as2d.audio.windows import iter_windows
from as2d.eval.metrics import wer
from as2d.models.bundled import ct2_dir
from as2d.types import Window

ROOT = Path(__file__).resolve().parent.parent
Decode = Callable[[list[Window]], tuple[str, int]]  # windows -> (text, output tokens)


def ours(threads: int, target: str, language: str) -> Decode:
    torch.set_num_threads(threads)
    transcriber = Transcriber(target=target, method="target", language=language, threads=threads)

    def decode(windows: list[Window]) -> tuple[str, int]:
        torch.set_num_threads(threads)
        results = [transcriber.decode_window(w, language)[0] for w in windows]
        return " ".join(r.text for r in results), sum(len(r.token_ids) for r in results)

    return decode


def generate(threads: int, target: str, language: str) -> Decode:
    """transformers' own `generate` (greedy, no timestamps) on the converted weights."""
    transcriber = Transcriber(target=target, method="target", language=language, threads=threads)
    model, tokenizer = transcriber.target.model, transcriber.tokenizer
    features = transcriber.target.features

    def decode(windows: list[Window]) -> tuple[str, int]:
        torch.set_num_threads(threads)
        texts, tokens = [], 0
        for w in windows:
            feats = features(w.audio, sampling_rate=16_000, return_tensors="pt").input_features
            with torch.inference_mode():
                out = model.generate(feats, language=language)[0].tolist()
            ids = [t for t in out if t < tokenizer.eot]
            texts.append(tokenizer.decode(ids).strip())
            tokens += len(ids)
        return " ".join(texts), tokens

    return decode


def ctranslate2(threads: int, compute_type: str, target: str, language: str) -> Decode:
    model = WhisperModel(str(ct2_dir(target)), compute_type=compute_type, cpu_threads=threads)

    def decode(windows: list[Window]) -> tuple[str, int]:
        texts, tokens = [], 0
        for w in windows:
            segments, _ = model.transcribe(
                w.audio,
                language=language,
                beam_size=1,
                temperature=0.0,
                without_timestamps=True,
                condition_on_previous_text=False,
                vad_filter=False,
            )
            for segment in segments:
                texts.append(segment.text.strip())
                tokens += len(segment.tokens)
        return " ".join(texts), tokens

    return decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio", nargs="?", default=str(ROOT / "tests/data/long_en.flac"))
    parser.add_argument("--reference", default=None, help="default: AUDIO with .txt")
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument("--language", default="en")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--generate", action="store_true", help="also time transformers generate")
    args = parser.parse_args()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    print(f"# {command}\n# load average at start: {os.getloadavg()}")
    reference = Path(args.reference or Path(args.audio).with_suffix(".txt")).read_text()
    windows = list(iter_windows(args.audio))
    audio_s = windows[-1].end if windows else 0.0
    configs: dict[str, Decode] = {}
    for threads in (1, 2):
        configs[f"as2d target-only, torch fp32, {threads} thr"] = ours(
            threads, args.target, args.language
        )
        if args.generate:
            configs[f"transformers generate, fp32, {threads} thr"] = generate(
                threads, args.target, args.language
            )
        for compute in ("float32", "int8"):
            configs[f"CTranslate2 {compute}, {threads} thr"] = ctranslate2(
                threads, compute, args.target, args.language
            )
    times: dict[str, list[float]] = {name: [] for name in configs}
    outputs: dict[str, tuple[str, int]] = {}
    for repeat in range(args.repeats + 1):  # repeat 0 is the warm-up pass, not counted
        names = list(configs)
        names = names[repeat % len(names) :] + names[: repeat % len(names)]  # rotate order
        for name in names:
            start = time.perf_counter()
            outputs[name] = configs[name](windows)
            if repeat > 0:
                times[name].append(time.perf_counter() - start)
    print(f"\n{len(windows)} windows, {audio_s:.1f} s of audio, {args.repeats} repeats (medians)\n")
    print("| runtime | wall s | RTF | tokens/s | WER % |\n| --- | --- | --- | --- | --- |")
    for name, samples in times.items():
        wall = statistics.median(samples)
        text, tokens = outputs[name]
        error = 100 * wer([reference], [text], args.language)
        print(f"| {name} | {wall:.2f} | {wall / audio_s:.3f} | {tokens / wall:.1f} | {error:.1f} |")
    print(f"\n# load average at end: {os.getloadavg()}\n# {command}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
