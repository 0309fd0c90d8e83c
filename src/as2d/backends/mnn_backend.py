"""MNN as a `Backend`: Alibaba's mobile inference engine (the seed's runtime) on the CPU.

An MNN module runs on the thread count it was loaded with, so `MnnGraph` keeps one module
per count asked for (loaded on first use) and every call runs on the backend's count at the
time: core lending changes it between passes as it does torch's. A call returns once its
outputs are read, so there is no queued work to wait for.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from as2d.engine.costs import machine_key

# The largest score difference (logits) between a row of MNN's k-row decoder pass and the
# single step target-only decoding runs at that position, at `PRECISION`: measured with
# scripts/mnn_probe.py and `as2d exactness --runtime mnn` (re-measure after changing MNN, the
# precision or the graphs), with a margin.
ROUNDING_BOUND = 0.1
PRECISION = "High"  # MNN's PrecisionMode (Normal, High, Low, Low_BF16) its graphs run at


def import_mnn() -> Any:
    """MNN's expression module, imported with its start-up banner (printed by its C++ on
    stdout) sent to stderr, so a command's stdout stays its own (`exactness` prints JSON)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        import MNN.expr

        ctypes.CDLL(None).fflush(None)  # the banner, still in C's buffer, goes to stderr
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return MNN.expr


class MnnBackend:
    """MNN on the CPU: its thread count per call, its precision, rounding bound and costs'
    key (`precision` other than `PRECISION` is for measuring: the bound is `PRECISION`'s)."""

    name = "mnn-cpu"

    def __init__(
        self, threads: int = 1, bound: float = ROUNDING_BOUND, precision: str = PRECISION
    ) -> None:
        self._threads = threads
        self.bound = bound
        self.precision = precision

    def threads(self) -> int:
        return self._threads

    def set_threads(self, threads: int) -> None:
        self._threads = threads

    def sync(self) -> None:
        """Nothing queued: an MNN call returns with its outputs read."""

    def cost_key(self) -> str:
        return machine_key("cpu", runtime="mnn")


class MnnGraph:
    """One .mnn graph called with numpy arrays, on its backend's thread count at each call.

    Args:
        path: the graph's file.
        inputs: its input names, in call order.
        outputs: its output names, in the order returned.
        backend: whose `threads()` each call runs on.
    """

    def __init__(
        self, path: Path, inputs: Sequence[str], outputs: Sequence[str], backend: MnnBackend
    ) -> None:
        self._expr: Any = import_mnn()
        self.path, self.inputs, self.outputs = path, list(inputs), list(outputs)
        self.backend = backend
        self._modules: dict[int, Any] = {}  # by thread count

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        expr = self._expr
        inputs = [
            expr.const(a, list(a.shape), expr.NCHW, expr.int if a.dtype.kind == "i" else expr.float)
            for a in (np.ascontiguousarray(a) for a in arrays)
        ]
        module = self._module(self.backend.threads())
        return [np.array(out.read(), copy=True) for out in module.forward(inputs)]

    def _module(self, threads: int) -> Any:
        """The graph loaded for `threads` (precision and threads as arguments: a runtime
        manager built from a config dict ran the same graph slower)."""
        if threads not in self._modules:
            import MNN.nn

            self._modules[threads] = MNN.nn.load_module_from_file(
                str(self.path),
                self.inputs,
                self.outputs,
                shape_mutable=True,
                precision_mode=getattr(self._expr.PrecisionMode, self.backend.precision),
                thread_num=threads,
            )
        return self._modules[threads]
