"""Load on `as2d serve`: a server in a subprocess, clients in threads, latencies and answers.

Used by `scripts/serve_load.py` (the numbers in notes) and by the tests (a smaller load).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]

    def children(self) -> list[int]:
        """The server's child processes (its drafter)."""
        out = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True
        ).stdout
        return [int(pid) for pid in out.split()]


@contextmanager
def started_server(args: Sequence[str], start_s: float = 180.0) -> Iterator[Server]:
    """`as2d serve ARGS` on a free port of 127.0.0.1, ready to answer; killed on the way out."""
    port = free_port()
    command = [sys.executable, "-m", "as2d.cli", "serve", "--port", str(port), *args]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    server = Server(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + start_s
        while True:
            try:
                urllib.request.urlopen(server.url + "/health", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # answered (401: the server wants a key): it is up
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    stderr = process.stderr.read() if process.stderr else ""
                    raise RuntimeError(f"as2d serve did not start: {stderr[-2000:]}") from None
                time.sleep(0.5)
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post_audio(
    url: str, fields: dict[str, str], file: bytes | None, name: str = "audio.wav"
) -> tuple[int, dict[str, str], bytes]:
    """A multipart POST of `fields` and `file`; returns (status, headers in lower case, body)."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    if file is not None:
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"'
        parts += [f"{head}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(), file]
        parts.append(b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    request = urllib.request.Request(url, body, headers)
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return response.status, _lower(response.headers.items()), response.read()
    except urllib.error.HTTPError as err:
        return err.code, _lower(err.headers.items()), err.read()


def _lower(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}


@dataclass
class LoadReport:
    latencies_s: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    token_ids: dict[str, list[list[list[int]]]] = field(default_factory=dict)  # per file
    wall_s: float = 0.0

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_s)

    @property
    def p95(self) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]

    def identical(self) -> bool:
        """Every answer about a file carried the same tokens."""
        return all(all(a == answers[0] for a in answers) for answers in self.token_ids.values())


def run_load(url: str, files: Sequence[Path], clients: int, requests: int) -> LoadReport:
    """`requests` transcriptions of `files` in turn, sent by `clients` threads at once."""
    report = LoadReport()
    lock = threading.Lock()
    todo = iter(range(requests))

    def client() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            path = files[i % len(files)]
            t0 = time.perf_counter()
            status, _, body = post_audio(
                url + "/v1/audio/transcriptions",
                {"model": "whisper-1", "response_format": "verbose_json"},
                path.read_bytes(),
                path.name,
            )
            latency = time.perf_counter() - t0
            tokens = []
            if status == 200:
                tokens = [w["token_ids"] for w in json.loads(body)["as2d"]["windows"]]
            with lock:
                report.latencies_s.append(latency)
                report.statuses.append(status)
                report.token_ids.setdefault(path.name, []).append(tokens)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report.wall_s = time.perf_counter() - start
    return report


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split()[2] != "Z"
