"""torch as a `Backend`: the one place that sets torch's thread count, waits for a GPU's
kernels and knows how far a verify pass may round from a single step, per dtype.

torch's thread count is per OS thread (its intra-op pool is process-wide, its setting is
read by the calling thread), so a thread that runs target passes sets it itself.
"""

from __future__ import annotations

import torch

from as2d.engine.costs import machine_key

# The largest score difference (logits) that rounding may put between a verify row and the
# single-token steps of target-only decoding, per dtype of the target's weights. float32: the
# CPU's oneDNN passes against MKL steps and 1 against 2 threads differ by at most 2.5e-4 on
# whisper-base (re-measure with `as2d exactness` and scripts/gpu_check.py), so 2e-3 leaves a
# margin of 8. float16 and bfloat16 (GPUs): a Qwen2-7B-shaped bfloat16 decoder differed by up
# to 0.31 between one 16-token pass and 16 steps; float16 keeps 3 more mantissa bits.
ROUNDING_BOUND = {torch.float32: 2e-3, torch.float16: 0.25, torch.bfloat16: 1.0}


def rounding_bound(dtype: torch.dtype) -> float:
    """The guard's bound for a target computing in `dtype` (the largest known for others)."""
    return ROUNDING_BOUND.get(dtype, max(ROUNDING_BOUND.values()))


class TorchBackend:
    """torch on `device` computing in `dtype`: the CPU, or a CUDA GPU (whose passes are
    timed and synchronised on the device)."""

    def __init__(
        self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
    ) -> None:
        self.device = torch.device(device)
        self.name = f"torch-{self.device.type}"
        self.bound = rounding_bound(dtype)

    def threads(self) -> int:
        return torch.get_num_threads()

    def set_threads(self, threads: int) -> None:
        torch.set_num_threads(threads)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def cost_key(self) -> str:
        if self.device.type == "cuda":
            return machine_key("cuda", torch.cuda.get_device_name(self.device))
        return machine_key(self.device.type)
