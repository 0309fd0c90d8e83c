"""The machine a benchmark runs on: its description, and waiting until it is quiet.

Timings on a shared machine are only comparable when nothing else competes for the
cores. Before each measured decode the benchmark waits until its own drafter processes
are idle (a drafter still finishing an earlier recording would steal a core) and, when
asked, until other processes on the machine use less than QUIET_CORES.
All figures come from /proc (Linux).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch

IDLE_TICKS = 1  # child processes are idle when they used at most this many clock ticks ...
IDLE_PERIOD_S = 0.3  # ... over this long
IDLE_TIMEOUT_S = 60.0
QUIET_CORES = 0.3  # other processes using less than this many cores: the machine is quiet
QUIET_POLL_S = 4.0
TICKS_PER_S = os.sysconf("SC_CLK_TCK")  # /proc CPU times are in these ticks


def describe() -> dict[str, object]:
    """CPU model, cores available to us, load average, library versions."""
    cpu = platform.processor()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.partition(":")[2].strip()
            break
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "load_1min": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: fields 3.. (state, ppid, ..., utime, stime)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def children() -> list[int]:
    """Processes whose parent is this one (drafters and multiprocessing's resource tracker)."""
    me, pids = os.getpid(), []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if int(_stat_fields(int(entry.name))[1]) == me:
                    pids.append(int(entry.name))
            except (OSError, IndexError):
                continue
    return pids


def _cpu_ticks(pids: list[int]) -> int:
    """User + system clock ticks used so far by `pids` (those still alive)."""
    total = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (OSError, IndexError):
            continue
    return total


def wait_children_idle() -> float:
    """Waits (at most IDLE_TIMEOUT_S) until no child process uses CPU; the seconds waited."""
    start = time.perf_counter()
    if not children():
        return 0.0
    before = _cpu_ticks(children())
    while time.perf_counter() - start < IDLE_TIMEOUT_S:
        time.sleep(IDLE_PERIOD_S)
        now = _cpu_ticks(children())
        if now - before <= IDLE_TICKS:
            break
        before = now
    return time.perf_counter() - start


def _busy_ticks() -> int:
    """Clock ticks all CPUs spent busy so far (/proc/stat: user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[:7])
    return user + nice + system + irq + softirq


def others_cores(period_s: float = 1.0) -> float:
    """Cores kept busy by processes outside this one and its children, over `period_s`."""
    own = [os.getpid(), *children()]
    t0, busy0, own0 = time.perf_counter(), _busy_ticks(), _cpu_ticks(own)
    time.sleep(period_s)
    ticks = _busy_ticks() - busy0 - (_cpu_ticks(own) - own0)
    return max(0.0, ticks / TICKS_PER_S / (time.perf_counter() - t0))


def wait_quiet(max_wait_s: float) -> float:
    """Waits (at most `max_wait_s`) until other processes use under QUIET_CORES for a second.

    Returns the other processes' cores measured last (what the next run starts with).
    """
    deadline = time.perf_counter() + max_wait_s
    while True:
        others = others_cores()
        if others < QUIET_CORES or time.perf_counter() >= deadline:
            return others
        time.sleep(QUIET_POLL_S)
