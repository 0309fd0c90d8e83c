"""Whisper on MNN against our torch target: exactness and speed, one table (issue 33).

For a bundled model and MNN weight format, on a real clip:
- greedy tokens of the MNN target against `WhisperTarget`'s (they must be equal);
- max |diff| of the encoder's output and of a k-token verify pass's logits against torch;
- max |diff| between MNN's k-token pass and k single steps over the same tokens (MNN runs them
  with different kernels), with torch's own for reference;
- median seconds of the encoder, a step (k = 1) and a k-token pass, torch and MNN, per thread
  count.

Needs the `mnn` extra (MNN, onnx). Reproduce:
    python scripts/mnn_probe.py --model whisper-tiny.en --weights float32 --threads 1 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from as2d.audio.load import load_audio
from as2d.audio.mel import log_mel
from as2d.backends.mnn_backend import PRECISION, MnnBackend
from as2d.models.bundled import load_whisper_net
from as2d.models.mnn_graphs import exported
from as2d.models.mnn_whisper import MnnWhisperTarget, greedy
from as2d.models.whisper import WhisperTarget
from as2d.target import Request

CLIP = "tests/data/asterisk/en/demo-nogo.wav"
REPEATS = 5  # timed runs after one warm-up; the median is reported


@dataclass(frozen=True)
class Timings:
    """Median seconds of one runtime's encoder, step and k-token pass."""

    encoder: float
    step: float
    k_pass: float


def median_seconds(call: Callable[[], object], repeats: int = REPEATS) -> float:
    """Median wall time of `call` over `repeats` runs after one warm-up."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def decoder_timings(target: Any, encoded: Any, prompt: list[int], tokens: list[int], k: int):
    """(step, k-pass) seconds at the cache's position after the prompt and `tokens`."""
    target.prefill(encoded, prompt)
    target.forward(tokens)
    at = target.length

    def run(chunk: list[int]) -> None:
        target.forward(chunk)
        target.rollback(at)

    return median_seconds(lambda: run(tokens[:1])), median_seconds(lambda: run(tokens[:k]))


def k_pass_vs_steps(target: Any, encoded: Any, prompt: list[int], tokens: list[int]) -> Any:
    """[k, V] scores of one k-token pass and of k single steps over the same tokens."""
    target.prefill(encoded, prompt)
    together = target.forward(tokens).clone()
    target.rollback(len(prompt))
    apart = torch.cat([target.forward([t]).clone() for t in tokens])
    return together, apart


def max_diff(a: Any, b: Any) -> float:
    """Max |a - b| over the finite entries (suppressed scores are -inf in both)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(a[finite] - b[finite]).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="whisper-tiny.en")
    parser.add_argument("--weights", default="float32", choices=("float32", "int8", "int4"))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("-k", type=int, default=8, help="verify pass length")
    parser.add_argument(
        "--precision", default=PRECISION, help="MNN's CPU precision (normal, high, low)"
    )
    args = parser.parse_args()

    directory = exported(args.model, args.weights)
    torch_target = WhisperTarget(*load_whisper_net(args.model, torch.float32))
    audio = load_audio(CLIP)
    features = log_mel(audio, torch_target.n_mels)  # [1, n_mels, 3000]
    torch_encoded = torch_target.encode(audio)
    prompt = torch_target.prompt(torch_encoded, Request(language="en"))
    reference = greedy(torch_target, torch_encoded, prompt)
    k = args.k
    tokens = reference[: 2 * k]  # the pass is timed after the first k tokens
    if len(tokens) < 2 * k:
        raise SystemExit(f"clip too short: {len(reference)} tokens, need {2 * k}")

    net, tokenizer = load_whisper_net(args.model, torch.float32)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        backend = MnnBackend(threads, precision=args.precision)
        target = MnnWhisperTarget(directory, net.shape, net.suppression, tokenizer, backend)
        encoded = target.encode(audio)
        if threads == args.threads[0]:
            report_exactness(target, encoded, torch_target, torch_encoded, prompt, reference, k)
        with torch.inference_mode():
            seconds = median_seconds(lambda: torch_target.model.model.encoder(features))
        step, k_pass = decoder_timings(torch_target, torch_encoded, prompt, tokens, k)
        rows.append(("torch float32", threads, Timings(seconds, step, k_pass)))
        seconds = median_seconds(lambda t=target: t.graphs["encoder"](features.numpy()))
        step, k_pass = decoder_timings(target, encoded, prompt, tokens, k)
        rows.append((f"mnn {args.weights}", threads, Timings(seconds, step, k_pass)))

    print(f"\n{args.model}, k = {k}: median of {REPEATS} after a warm-up")
    print("| runtime | threads | encoder ms | step ms | k-pass ms |")
    print("|---|---|---|---|---|")
    for name, threads, t in rows:
        ms = (t.encoder * 1e3, t.step * 1e3, t.k_pass * 1e3)
        print(f"| {name} | {threads} | {ms[0]:.1f} | {ms[1]:.2f} | {ms[2]:.2f} |")


def report_exactness(target, encoded, torch_target, torch_encoded, prompt, reference, k) -> None:
    """Prints greedy agreement and the max differences (see the module docstring)."""
    tokens = greedy(target, encoded, prompt)
    pairs = enumerate(zip(tokens, reference, strict=False))
    first = next((i for i, (a, b) in pairs if a != b), None)
    print(f"greedy tokens equal torch's: {tokens == reference} (first difference at {first})")
    print(f"encoder max |diff| vs torch: {max_diff(encoded.hidden, torch_encoded.hidden):.3g}")
    mnn_pass, mnn_steps = k_pass_vs_steps(target, encoded, prompt, reference[:k])
    torch_pass, torch_steps = k_pass_vs_steps(torch_target, torch_encoded, prompt, reference[:k])
    print(f"k-pass logits max |diff| mnn vs torch: {max_diff(mnn_pass, torch_pass):.3g}")
    print(f"step logits max |diff| mnn vs torch: {max_diff(mnn_steps, torch_steps):.3g}")
    print(
        f"k-pass vs k steps max |diff|: mnn {max_diff(mnn_pass, mnn_steps):.3g}, "
        f"torch {max_diff(torch_pass, torch_steps):.3g}"
    )
    same_argmax = bool((mnn_pass.argmax(-1) == mnn_steps.argmax(-1)).all())
    print(f"mnn k-pass and k steps pick the same tokens: {same_argmax}")


if __name__ == "__main__":
    main()
