"""Where measured costs are kept: per machine (processor or GPU, runtime and its version,
device), so that a cost timed on one machine or runtime never steers another's decisions.
Without torch: the command line reads them before torch loads (`gate.drafting_may_pay`)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from as2d.drafting.family import DraftCosts
from as2d.writers import write_atomic

# Measured costs are cached per version of the code that they time: bump it when a change
# moves them (v2: oneDNN verify passes and int8 drafters), or old timings steer `auto`.
COST_VERSION = "v2"


def machine_key(device: str = "cpu", gpu_name: str | None = None, runtime: str = "torch") -> str:
    """What a measured cost holds for: the CPU model (or `gpu_name`), the runtime (a package:
    "torch", "mnn") and its version, the device type (`Backend.cost_key`).

    Example: machine_key() -> "amd_epyc-torch2.13.0_cpu-cpu-d8154890"
    """
    version = importlib.metadata.version(runtime)
    text = f"{gpu_name or _cpu_model()}-{runtime}{version}-{device}"
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]  # tells apart what the slug merges
    return f"{re.sub(r'[^a-z0-9.-]+', '_', text.lower())[:80]}-{digest}"


def cost_path(cache: Path, model: str, machine: str, threads: int) -> Path:
    """Where the cost of `model` (a name, path or id, with its settings) on `threads` of
    `machine` (`machine_key`) is kept under `cache`.

    Example: cost_path(Path("~/.cache/as2d"), "whisper-base-cpu-default", key, 2)
    -> ~/.cache/as2d/cost/v2/<key>/whisper-base-cpu-default-2threads.json
    """
    name = re.sub(r"[^\w.-]+", "_", model)
    return cache / "cost" / COST_VERSION / machine / f"{name}-{threads}threads.json"


def target_cost_name(target: str, device: str, dtype: str | None) -> str:
    """The name a target's pass costs are kept under: "whisper-base-cpu-default"."""
    return f"{target}-{device}-{dtype or 'default'}"


def drafter_costs_path(cache: Path, drafter: str, threads: int, sized: bool = True) -> Path:
    """Where a drafter process's warm-up costs (`DrafterProcess.warm_costs`) are kept;
    `sized`: its encoder reads a window's speech and a tail (else always 30 s)."""
    name = f"drafter-{drafter}-{'sized' if sized else 'full'}"
    return cost_path(cache, name, machine_key(), threads)


def save_drafter_costs(path: Path, costs: Mapping[str, DraftCosts]) -> None:
    """Keeps a drafter's costs by language at `path`, atomically; a cache that cannot be
    written is left as it is (the costs are measured again at the next start)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({k: asdict(v) for k, v in costs.items()}) + "\n")
    except OSError:
        pass


def load_drafter_costs(path: Path) -> dict[str, DraftCosts] | None:
    """A drafter's costs by language kept at `path`; None where there are none (or they are
    of an older form)."""
    try:
        data = json.loads(path.read_text())
        return {k: DraftCosts(**{f: float(x) for f, x in v.items()}) for k, v in data.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def _cpu_model() -> str:
    """The processor's model name from /proc/cpuinfo ("unknown-cpu" where there is none)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            names = [line.split(":", 1)[1] for line in cpuinfo if line.startswith("model name")]
    except OSError:
        names = []
    return names[0].strip() if names else "unknown-cpu"
