"""Random and truncated input to the parts that read what users and disks hand them: the draft
store (`DraftStore.load`), the server's multipart parser (`as2d serve`, over HTTP) and the audio
reader (`audio.load`). Seeded, and bounded to a few hundred cases: no traceback, no 500, and
nothing from the libraries on stderr."""

from __future__ import annotations

import http.client
import json
import os
import random
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from as2d.audio.load import AudioError, audio_duration, load_audio
from as2d.eval.serve_load import Server, started_server
from as2d.runtime.drafts import DraftStore, StoredDraft
from audio_files import encode_with_av

DATA = Path(__file__).parent / "data"
CLIP = DATA / "asterisk" / "en" / "vm-newuser.wav"
SEED = 31

# ---------------------------------------------------------------- the draft store

WINDOWS = [StoredDraft(0.0, 9.5, "Welcome to Comedian Mail."), StoredDraft(9.5, 12.0, "First,")]


def load_bytes(store: DraftStore, data: bytes) -> object:
    """`store.load` of a store file that holds `data`."""
    (store.root / "key.json").write_bytes(data)
    return store.load("key")


def assert_drafts_or_none(loaded: object) -> None:
    """What `load` may answer: nothing, or windows as `save` writes them."""
    if loaded is None:
        return
    windows = loaded.windows  # type: ignore[attr-defined]
    assert all(isinstance(w, StoredDraft) for w in windows)
    assert all(isinstance(w.start, float) and isinstance(w.end, float) for w in windows)
    assert all(isinstance(w.text, str) for w in windows)


def test_store_files_cut_or_garbled_are_ignored(tmp_path):
    store = DraftStore(tmp_path)
    store.save("key", WINDOWS)
    saved = (tmp_path / "key.json").read_bytes()
    assert load_bytes(store, saved) is not None
    rng = random.Random(SEED)
    for _ in range(100):
        cut = saved[: rng.randrange(len(saved))]
        noise = rng.randbytes(rng.randrange(1, 200))
        for data in (cut, noise, cut + noise):
            assert_drafts_or_none(load_bytes(store, data))


def random_json(rng: random.Random, depth: int = 0) -> object:
    """A JSON value of any type, nested a little."""
    kinds = ["null", "bool", "int", "float", "str"] + (["list", "dict"] if depth < 3 else [])
    match rng.choice(kinds):
        case "null":
            return None
        case "bool":
            return rng.random() < 0.5
        case "int":
            return rng.randint(-5, 5)
        case "float":
            return rng.choice([0.5, -1.0, 1e308, float("nan")])
        case "str":
            return rng.choice(["", "x", "start", "text"])
        case "list":
            return [random_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = ["start", "end", "text", "windows", "extra"]
    return {k: random_json(rng, depth + 1) for k in rng.sample(keys, rng.randrange(4))}


def random_window(rng: random.Random) -> object:
    """A window as `save` writes it, with a field dropped, added or of another type."""
    window: dict[str, object] = {"start": 1.0, "end": 2.0, "text": "hello"}
    match rng.randrange(3):
        case 0:
            del window[rng.choice(list(window))]
        case 1:
            window["extra"] = random_json(rng)
        case _:
            window[rng.choice(list(window))] = random_json(rng)
    return window


def test_store_files_of_valid_json_with_wrong_fields_are_ignored(tmp_path):
    store = DraftStore(tmp_path)
    rng = random.Random(SEED)
    for _ in range(200):
        windows = [random_window(rng) for _ in range(rng.randrange(1, 3))]
        document = rng.choice([{"windows": windows}, random_json(rng)])
        assert_drafts_or_none(load_bytes(store, json.dumps(document).encode()))


# ---------------------------------------------------------------- the server's multipart parser


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One small server (tiny.en, target only) for the module; its start-up line read."""
    store = tmp_path_factory.mktemp("drafts")
    args = ["--target", "whisper-tiny.en", "--method", "target", "--store", str(store)]
    with started_server(args) as running:
        assert stderr_so_far(running).startswith("as2d: serving whisper-tiny.en on ")
        yield running


def stderr_so_far(server: Server) -> str:
    """What the server has written to stderr since last asked (without waiting for more)."""
    assert server.process.stderr is not None
    fd = server.process.stderr.fileno()
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def post(server: Server, body: bytes, content_type: str) -> tuple[int, bytes]:
    """A POST of `body` as it is to the transcriptions endpoint: (status, answer)."""
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", "/v1/audio/transcriptions", body, {"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def multipart(boundary: str, fields: dict[str, str], audio: bytes) -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
    parts += [f"{head}Content-Type: audio/wav\r\n\r\n".encode(), audio, b"\r\n"]
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def garbled_requests(rng: random.Random, count: int) -> Iterator[tuple[bytes, str]]:
    """(body, content type): a valid request cut short, with bytes changed, bytes added, its
    boundary wrong or missing, or random bytes as multipart."""
    audio = CLIP.read_bytes()[:8000]  # a short recording: a body that stays valid is fast
    boundary = "as2dfuzz"
    valid = multipart(boundary, {"model": "whisper-1", "response_format": "json"}, audio)
    types = [
        f"multipart/form-data; boundary={boundary}",
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=other",
        f'multipart/form-data; boundary="{boundary}"; charset=\x7f',
    ]
    for _ in range(count):
        body = bytearray(valid)
        match rng.randrange(4):
            case 0:
                body = body[: rng.randrange(len(body))]
            case 1:
                for _ in range(rng.randrange(1, 20)):
                    body[rng.randrange(300)] = rng.randrange(256)  # headers, field values
            case 2:
                at = rng.randrange(len(body))
                body[at:at] = rng.randbytes(rng.randrange(1, 100))
            case _:
                body = bytearray(rng.randbytes(rng.randrange(500)))
        yield bytes(body), rng.choice(types) if rng.random() < 0.3 else types[0]


def test_garbled_multipart_gets_4xx_and_leaves_the_server_well(server):
    answers: dict[int, int] = {}
    for body, content_type in garbled_requests(random.Random(SEED), 150):
        status, answer = post(server, body, content_type)
        answers[status] = answers.get(status, 0) + 1
        assert status in (200, 400, 413), answer
        if status != 200:
            error = json.loads(answer)["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert "Errno" not in error["message"] and "as2d-uploads" not in error["message"]
    assert answers.get(400, 0) > 100  # most of them were refused, by one rule or another
    assert urllib.request.urlopen(server.url + "/health", timeout=10).status == 200
    valid = multipart("b", {"model": "whisper-1"}, CLIP.read_bytes())
    status, answer = post(server, valid, "multipart/form-data; boundary=b")
    assert status == 200 and json.loads(answer)["text"].startswith("Welcome to Comedian Mail.")
    assert stderr_so_far(server) == ""  # no traceback, nothing from python-multipart


def test_a_malformed_multipart_body_is_one_400_and_nothing_on_stderr(server):
    """Data before the first boundary: python-multipart warns about it on its logger."""
    status, answer = post(server, b"garbage\r\n--x--\r\n", "multipart/form-data; boundary=x")
    assert status == 400
    assert json.loads(answer)["error"]["message"].startswith("could not read the form: ")
    assert stderr_so_far(server) == ""


# ---------------------------------------------------------------- the audio reader


def recordings(directory: Path) -> list[bytes]:
    """CLIP as wav, and written as flac, ogg (libsndfile), mp3 and m4a (FFmpeg), and the
    first part of tests/data's flac."""
    audio, rate = sf.read(CLIP, dtype="float32")
    for ext in ("flac", "ogg"):
        sf.write(directory / f"clip.{ext}", audio, rate)
    for ext, codec in (("mp3", "mp3"), ("m4a", "aac")):
        encode_with_av(directory / f"clip.{ext}", audio, rate, codec)
    made = [(directory / f"clip.{ext}").read_bytes() for ext in ("flac", "ogg", "mp3", "m4a")]
    return [CLIP.read_bytes(), (DATA / "long_en.flac").read_bytes()[:200_000], *made]


def garbled_audio(rng: random.Random, originals: list[bytes], count: int) -> Iterator[bytes]:
    """Real recordings cut short, with bytes changed, or random bytes behind a real header."""
    for _ in range(count):
        original = rng.choice(originals)
        match rng.randrange(3):
            case 0:
                yield original[: rng.randrange(len(original))]
            case 1:
                data = bytearray(original)
                for _ in range(rng.randrange(1, 50)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
                yield bytes(data)
            case _:
                yield original[: rng.randrange(64)] + rng.randbytes(rng.randrange(2000))


def test_garbled_audio_is_read_or_refused_with_an_audio_error(tmp_path, capfd):
    refused = 0
    for i, data in enumerate(garbled_audio(random.Random(SEED), recordings(tmp_path), 200)):
        path = tmp_path / f"garbled-{i}.bin"
        path.write_bytes(data)
        try:
            audio_duration(path)
            audio = load_audio(path)
        except AudioError as err:
            message = str(err)
            assert "\n" not in message and "Errno" not in message and str(path) in message
            refused += 1
            continue
        finally:
            path.unlink()
        assert audio.dtype == np.float32 and audio.ndim == 1
    assert 20 < refused < 200  # some damage is read through, some is not
    assert capfd.readouterr().err == ""  # nothing from libsndfile, libmpg123 or FFmpeg
