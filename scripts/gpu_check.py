"""GPU exactness check: every speculative method's tokens equal target-only greedy's.

On a GPU in float16/bfloat16 a verify pass of k + 1 rows and a single-token step run
different kernels, so their logits differ in the last bits; the engine's guard recomputes a
verify row whose top-2 margin is under `as2d.backends.torch_backend.rounding_bound(dtype)`.
This script builds tiny random-weight Whisper and Qwen2-Audio checkpoints, decodes the first
windows of tests/data/long_en.flac with target-only, pld and as2d through the public API,
counts the positions where a method's tokens differ from target-only's, and measures how far
a 16-token pass lies from 16 single steps, next to the bound that should cover it.

as2d drafts with the random Whisper itself; the drafter process runs it in int8 (and a
bfloat16 encoder), so its drafts agree with a Whisper target in stretches. A Qwen target
re-encodes that Whisper's text, so few of its drafts are accepted. Either way every verify
pass decides its tokens from multi-row logits, which is what the guard protects; the
`accepted` column (accepted/drafted tokens) shows how much of that each method did.

Example:
    .venv/bin/python scripts/gpu_check.py                    # cuda, both families, 3 dtypes
    .venv/bin/python scripts/gpu_check.py --device cpu --dtypes float32 --windows 1

Exit status: 0 every method equal to target-only, 1 a mismatch or a failed run, 2 usage.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2Tokenizer,
    WhisperConfig,
    WhisperForConditionalGeneration,
)
from transformers.utils.logging import disable_progress_bar

from as2d.api import Options, Transcriber
from as2d.audio.windows import iter_windows
from as2d.backends.torch_backend import rounding_bound
from as2d.eval.exactness import count_mismatches, window_margin
from as2d.models.bundled import source_files
from as2d.models.tokenizer import WhisperTokenizer
from as2d.target import Request, TargetAdapter
from as2d.types import WindowResult

AUDIO = Path(__file__).resolve().parents[1] / "tests" / "data" / "long_en.flac"
FAMILIES = ("whisper", "qwen2-audio")
DTYPES = ("float32", "float16", "bfloat16")
METHODS = ("target", "pld", "as2d")
QWEN_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"]
QWEN_CORPUS = [
    "You are a helpful assistant. Transcribe the audio. Translate the speech into English.",
    "the quick brown fox jumps over the lazy dog, then the dog sleeps in the sun.",
]
CONTEXT, PROBE = 64, 16  # row-vs-step: tokens of context, then PROBE steps against one pass


@dataclass
class Row:
    """One family x dtype x method: agreement with target-only, and the row-vs-step figures."""

    family: str
    dtype: str
    method: str
    windows: int = 0
    positions: int = 0  # target-only's tokens, or the method's where it made more
    mismatches: int = 0  # positions whose token differs from target-only's (missing included)
    guarded: int = 0
    min_margin: float = math.inf
    accepted: int = 0
    drafted: int = 0
    max_diff: float = math.nan  # row-vs-step: largest |logit difference|, finite entries
    flips: int = 0  # row-vs-step: rows whose argmax differs
    seconds: float = 0.0
    error: str = ""


def whisper_checkpoint(out: Path) -> str:
    """A random Whisper (d_model 256, 4 + 4 layers) with the multilingual vocabulary."""
    vocab_dir = source_files("whisper-base")[0]  # the bundled base model's tokenizer.json
    tokenizer = WhisperTokenizer.from_model_dir(vocab_dir)
    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=51865,
        d_model=256,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=1024,
        decoder_ffn_dim=1024,
        max_target_positions=128,  # random weights rarely end: this caps a window's output
        eos_token_id=tokenizer.eot,
        pad_token_id=tokenizer.eot,
        decoder_start_token_id=tokenizer.sot,
        init_std=0.1,  # varied output; at 0.5 the int8 drafter agrees on almost nothing
    )
    WhisperForConditionalGeneration(config).save_pretrained(out)
    shutil.copy(vocab_dir / "tokenizer.json", out)
    return str(out)


def qwen_checkpoint(out: Path) -> str:
    """A random Qwen2-Audio (4 decoder layers of 256) with a ~370-token byte-level BPE."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=360, initial_alphabet=alphabet, show_progress=False)
    bpe.train_from_iterator(QWEN_CORPUS * 4, trainer)
    merges: Any = [tuple(m) for m in json.loads(bpe.to_str())["model"]["merges"]]  # pairs
    tokenizer = Qwen2Tokenizer(
        vocab=bpe.get_vocab(), merges=merges, additional_special_tokens=QWEN_SPECIALS
    )
    ids = tokenizer.get_vocab()
    ends = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text = {"vocab_size": len(tokenizer), "hidden_size": 256, "intermediate_size": 512}
    text |= {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2}
    audio = {"num_mel_bins": 128, "d_model": 256, "encoder_layers": 2, "encoder_ffn_dim": 512}
    config = Qwen2AudioConfig(
        audio_config={**audio, "encoder_attention_heads": 4, "initializer_range": 0.2},
        text_config={**text, "model_type": "qwen2", "initializer_range": 0.2},
        audio_token_index=ids["<|AUDIO|>"],
    )
    torch.manual_seed(0)
    model = Qwen2AudioForConditionalGeneration(config).eval()
    # max_new_tokens caps a window's output: random weights rarely end on their own
    model.generation_config = GenerationConfig(
        eos_token_id=ends, pad_token_id=ends[1], max_new_tokens=96
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def decode(transcriber: Transcriber, windows: int) -> list[WindowResult]:
    """The first `windows` windows of AUDIO, decoded by `transcriber`."""
    return list(itertools.islice(transcriber.transcribe(AUDIO), windows))


def compare(row: Row, reference: list[WindowResult], results: list[WindowResult]) -> None:
    """Fills `row` from a method's windows against target-only's."""
    row.windows = len(results)
    for expected, got in itertools.zip_longest(reference, results):
        want, out = expected.token_ids if expected else [], got.token_ids if got else []
        row.positions += max(len(want), len(out))
        row.mismatches += count_mismatches(want, out)
        if got is not None:
            row.guarded += got.guarded
            row.min_margin = min(row.min_margin, window_margin(got))
            row.accepted += got.accepted_tokens
            row.drafted += got.drafted_tokens


def row_vs_step(target: TargetAdapter[Any], tokens: list[int]) -> tuple[float, int]:
    """(largest finite |logit difference|, argmax flips) of PROBE single steps against one
    PROBE-token pass over the same tokens, after a prefill and CONTEXT tokens of context."""
    encoded = target.encode(next(iter_windows(AUDIO)).audio)
    target.prefill(encoded, target.prompt(encoded, Request("transcribe", "en")))
    tokens = list(itertools.islice(itertools.cycle(tokens or [0]), CONTEXT + PROBE))
    target.forward(tokens[:CONTEXT])
    probe = tokens[CONTEXT:]
    steps = torch.cat([target.forward([t]) for t in probe]).float()  # [PROBE, V]
    target.rollback(target.length - PROBE)
    rows = target.forward(probe).float()  # [PROBE, V]
    finite = steps.isfinite() & rows.isfinite()
    diff = float((steps - rows).abs()[finite].max())
    return diff, int((steps.argmax(-1) != rows.argmax(-1)).sum())


def check(
    family: str, dtype: str, target_dir: str, drafter_dir: str, args: argparse.Namespace
) -> list[Row]:
    """Every method on one family and dtype, sharing one loaded target."""
    start = time.perf_counter()
    base = Options(target=target_dir, device=args.device, dtype=dtype, method="target")
    base = replace(base, language="en", drafter=drafter_dir, budget=args.budget)
    rows = [Row(family, dtype, m) for m in METHODS]
    with Transcriber(base) as first:
        reference = decode(first, args.windows)
        compare(rows[0], reference, reference)
        for row in rows[1:]:
            method_start = time.perf_counter()
            try:
                options = replace(base, method=row.method)
                with Transcriber(options, shared_target=first.target) as transcriber:
                    compare(row, reference, decode(transcriber, args.windows))
            except Exception as err:  # one failed method must not hide the others' results
                traceback.print_exc()
                row.error = f"{type(err).__name__}: {err}"
            row.seconds = time.perf_counter() - method_start
        diff, flips = row_vs_step(first.target, reference[0].token_ids if reference else [])
    for row in rows:
        row.max_diff, row.flips = diff, flips
    rows[0].seconds = time.perf_counter() - start - sum(r.seconds for r in rows[1:])
    return rows


def bound(dtype: str) -> float:
    """The guard's rounding bound for `dtype`."""
    return rounding_bound(getattr(torch, dtype))


def print_table(rows: list[Row]) -> None:
    head = "family      dtype    method windows positions mismatches guarded min_margin"
    print(f"{head} accepted row_vs_step flips  bound  seconds")
    for r in rows:
        if r.error:
            print(f"{r.family:<11} {r.dtype:<8} {r.method:<6} FAILED {r.error}")
            continue
        drafts = f"{r.accepted}/{r.drafted}"
        print(
            f"{r.family:<11} {r.dtype:<8} {r.method:<6} {r.windows:>7} {r.positions:>9} "
            f"{r.mismatches:>10} {r.guarded:>7} {r.min_margin:>10.3g} {drafts:>8} "
            f"{r.max_diff:>11.3g} {r.flips:>5} {bound(r.dtype):>6.3g} {r.seconds:>8.1f}"
            + (
                "  row_vs_step > bound: the guard may miss a flip"
                if r.max_diff > bound(r.dtype)
                else ""
            )
        )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (or cuda:N), or cpu: a dry run")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated")
    parser.add_argument("--windows", type=int, default=2, help="first windows of the audio")
    parser.add_argument("--budget", type=int, default=8, help="fixed k of pld and as2d")
    args = parser.parse_args(argv)
    args.families, args.dtypes = args.families.split(","), args.dtypes.split(",")
    unknown = set(args.families) - set(FAMILIES) | set(args.dtypes) - set(DTYPES)
    if unknown:
        usage_error(f"unknown families or dtypes: {', '.join(sorted(unknown))}")
    if args.windows < 1 or not 1 <= args.budget <= Options.max_k:
        usage_error(f"--windows must be >= 1 and --budget between 1 and {Options.max_k}")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        usage_error(f"unknown device {args.device!r}; use cuda[:N] or cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        usage_error(f"--device {args.device}, but torch sees no CUDA GPU (try --device cpu)")
    return args


def usage_error(message: str) -> NoReturn:
    print(f"gpu_check: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    disable_progress_bar()  # "Loading weights" bars, here and (via the variable) in the drafter
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        whisper = whisper_checkpoint(Path(tmp) / "whisper")
        dirs = {"whisper": whisper, "qwen2-audio": qwen_checkpoint(Path(tmp) / "qwen")}
        for family, dtype in itertools.product(args.families, args.dtypes):
            try:
                rows += check(family, dtype, dirs[family], whisper, args)
            except Exception as err:
                traceback.print_exc()
                rows.append(Row(family, dtype, "target", error=f"{type(err).__name__}: {err}"))
    print_table(rows)
    print(f"device {args.device}; wall {time.perf_counter() - start:.1f} s")
    print("reproduce:", shlex.join([sys.executable, sys.argv[0], *argv]))
    return int(any(r.mismatches or r.error for r in rows))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
