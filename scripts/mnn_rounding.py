"""How far MNN's k-row verify pass rounds from its single steps, per precision mode (issue 37).

The guard (DESIGN.md, Verification rules) recomputes a verify row whose top-2 margin is within
the runtime's rounding bound, so the bound must cover the largest difference between a row of
a k-token pass and the single step target-only runs at that position. For each clip: greedy
target-only decoding by single steps (their scores kept), then k-token passes over the same
tokens from every `--stride`-th position; the max |pass - step| over all rows, and each side's
max |diff| against torch's target (which of the two kernels rounds away); and the max |diff|
of the single steps on 1 and on 2 threads (as2d's target and target-only may run on other
counts: those steps are not guarded). Reproduce:
    python scripts/mnn_rounding.py --model whisper-base --precision high normal low -k 8
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from as2d.audio.load import load_audio
from as2d.backends.mnn_backend import MnnBackend
from as2d.models.bundled import load_whisper_net
from as2d.models.mnn_graphs import exported
from as2d.models.mnn_whisper import MnnWhisperTarget
from as2d.models.whisper import WhisperTarget
from as2d.target import Request

CLIPS = sorted(Path("tests/data/asterisk/en").glob("*.wav"))


def step_scores(target, encoded, prompt: list[int]) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens by single steps, and the [V] scores each step gave (the first is the
    prompt's last row)."""
    scores = [target.prefill(encoded, prompt).clone()]
    tokens: list[int] = []
    while len(prompt) + len(tokens) < target.max_length - 1:
        token = int(scores[-1].argmax())
        if token in target.eot_ids:
            break
        tokens.append(token)
        scores.append(target.forward([token])[-1].clone())
    return tokens, scores


def pass_rows(target, encoded, prompt, tokens, at: int, k: int) -> torch.Tensor:
    """[k + 1, V]: one pass over tokens[at - 1 : at + k] from the prefix prompt + tokens[:at - 1]
    (row j predicts the token after tokens[: at + j])."""
    target.prefill(encoded, [*prompt, *tokens[: at - 1]])
    return target.forward(tokens[at - 1 : at + k]).clone()


def finite_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    finite = torch.isfinite(a) & torch.isfinite(b)
    return float((a[finite].double() - b[finite].double()).abs().max())


def measure(target, reference, clip: Path, k: int, stride: int) -> tuple[float, float, float]:
    """(max |pass - step|, max |step - torch step|, max |pass - torch step|) on one clip."""
    audio = load_audio(str(clip))
    encoded = target.encode(audio)
    prompt = target.prompt(encoded, Request(language="en"))
    tokens, steps = step_scores(target, encoded, prompt)
    ref_tokens, ref_steps = step_scores(reference, reference.encode(audio), prompt)
    n = min(len(tokens), len(ref_tokens))
    same = next((i for i in range(n) if tokens[i] != ref_tokens[i]), n)
    worst = [0.0, 0.0, 0.0]
    for at in range(1, max(1, len(tokens) - k) + 1, stride):
        rows = pass_rows(target, encoded, prompt, tokens, at, min(k, len(tokens) - at + 1))
        for j, row in enumerate(rows):
            step = steps[at + j - 1 + 1] if at + j < len(steps) else None
            if step is None:
                continue
            worst[0] = max(worst[0], finite_diff(row, step))
            if at + j < same:
                worst[1] = max(worst[1], finite_diff(step, ref_steps[at + j]))
                worst[2] = max(worst[2], finite_diff(row, ref_steps[at + j]))
    return worst[0], worst[1], worst[2]


def threads_diff(target, clip: Path) -> float:
    """Max |diff| of the encoder and the greedy steps' scores on 1 against 2 threads."""
    audio = load_audio(str(clip))
    runs = []
    for threads in (1, 2):
        target.backend.set_threads(threads)
        encoded = target.encode(audio)
        prompt = target.prompt(encoded, Request(language="en"))
        runs.append((encoded, step_scores(target, encoded, prompt)))
    target.backend.set_threads(1)
    (e1, (_, s1)), (e2, (_, s2)) = runs
    steps = max(finite_diff(a, b) for a, b in zip(s1, s2, strict=False))
    return max(float(np.abs(e1.hidden - e2.hidden).max()), steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--precision", nargs="+", default=["high"])
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--stride", type=int, default=4, help="a pass every N positions")
    parser.add_argument("--clips", type=int, default=len(CLIPS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    directory = exported(args.model)
    net, tokenizer = load_whisper_net(args.model, torch.float32)
    reference = WhisperTarget(*load_whisper_net(args.model, torch.float32))
    print("| precision | clip | pass vs step | step vs torch | pass vs torch |")
    print("|---|---|---|---|---|")
    for precision in args.precision:
        backend = MnnBackend(1, precision=precision)
        target = MnnWhisperTarget(directory, net.shape, net.suppression, tokenizer, backend)
        for clip in CLIPS[: args.clips]:
            a, b, c = measure(target, reference, clip, args.k, args.stride)
            print(f"| {precision} | {clip.stem} | {a:.4g} | {b:.4g} | {c:.4g} |", flush=True)
        print(f"1 vs 2 threads, {CLIPS[0].stem}: max |diff| {threads_diff(target, CLIPS[0]):.4g}")


if __name__ == "__main__":
    main()
