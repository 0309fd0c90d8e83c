"""MNN as a `Backend`: Alibaba's mobile inference engine (the seed's runtime) on the CPU.

An MNN module runs on the thread count of the runtime manager it was loaded with, so
`MnnGraph` keeps one module per count asked for (loaded on first use) and every call runs on
the backend's count at the time: core lending changes it between passes as it does torch's.
A call returns once its outputs are read, so there is no queued work to wait for.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from as2d.engine.costs import machine_key

# The largest score difference (logits) between a row of MNN's k-row decoder pass and the
# single step target-only decoding runs at that position, at `PRECISION`: measured with
# scripts/mnn_probe.py and `as2d exactness --runtime mnn` (re-measure after changing MNN, the
# precision or the graphs), with a margin.
ROUNDING_BOUND = 0.1
PRECISION = "high"  # the precision of MNN's CPU runtime its graphs run at (normal, high, low)


def import_mnn() -> Any:
    """MNN's expression module, imported with its start-up banner (printed by its C++ on
    stdout) sent to stderr, so a command's stdout stays its own (`exactness` prints JSON)."""
    with _c_stdout_to(2):
        import MNN.expr
    return MNN.expr


@contextmanager
def _c_stdout_to(fd: int) -> Iterator[None]:
    """What MNN's C++ prints on stdout meanwhile goes to `fd` instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(fd, 1)
    try:
        yield
        ctypes.CDLL(None).fflush(None)  # what is still in C's buffer goes there too
    finally:
        os.dup2(saved, 1)
        os.close(saved)


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
        return f"{machine_key('cpu', runtime='mnn')}-{self.precision}"


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

    def __call__(self, *arrays: np.ndarray | Any) -> list[np.ndarray]:
        """The graph's outputs for its inputs: arrays, or `const`s made once for many calls."""
        inputs = [a if not isinstance(a, np.ndarray) else self.const(a) for a in arrays]
        threads = self.backend.threads()
        module = self._module(threads)
        _size_pool(threads, self.backend.precision)
        return [np.array(out.read(), copy=True) for out in module.forward(inputs)]

    def const(self, array: np.ndarray) -> Any:
        """`array` as an MNN input, copied once: an input that many calls share (a window's
        cross-attention keys and values, 37 MB on whisper-base) is made once, not per step
        (whisper-base's step on two threads: 42 -> 15 ms)."""
        expr, array = self._expr, np.ascontiguousarray(array)
        kind = expr.int if array.dtype.kind == "i" else expr.float
        return expr.const(array, list(array.shape), expr.NCHW, kind)

    def _module(self, threads: int) -> Any:
        """The graph loaded for `threads`, with a runtime manager of that many threads (the
        module's own `thread_num` argument is not honoured: one thread asked for, two ran)."""
        if threads not in self._modules:
            import MNN.nn

            runtime = _runtime(threads, self.backend.precision)
            self._modules[threads] = MNN.nn.load_module_from_file(
                str(self.path),
                self.inputs,
                self.outputs,
                runtime_manager=runtime,
                shape_mutable=True,
            )
        return self._modules[threads]


_pool: dict[str, Any] = {"threads": 0}  # what MNN's process-wide thread pool was sized to last


def _runtime(threads: int, precision: str) -> Any:
    """An MNN runtime manager of `threads` CPU threads; making one sizes MNN's process-wide
    thread pool to `threads` (in under a millisecond)."""
    import MNN.nn

    config = {"backend": "CPU", "numThread": threads, "precision": precision}
    with open(os.devnull, "w") as devnull, _c_stdout_to(devnull.fileno()):
        runtime = MNN.nn.create_runtime_manager((config,))  # says "MNN use high precision"
    _pool["threads"], _pool["runtime"] = threads, runtime
    return runtime


def _size_pool(threads: int, precision: str) -> None:
    """MNN's CPU thread pool is one per process, sized by the runtime manager made last: a
    module of another thread count runs on it as it is (a one-thread module after a two-thread
    one kept both cores busy and ran slower; a two-thread module after a one-thread one ran on
    one core). So a call on another count than the last one sizes the pool again."""
    if _pool["threads"] != threads:
        _runtime(threads, precision)
