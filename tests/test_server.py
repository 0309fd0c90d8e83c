"""`as2d serve` in a subprocess on 127.0.0.1, spoken to with the official `openai` client and
with raw HTTP for bad requests: answers equal `as2d transcribe` token for token."""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import os
import select
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import soundfile as sf

from as2d.api import Options, Transcriber
from as2d.cli import main
from as2d.eval.serve_load import alive, post_audio, run_load, started_server

DATA = Path(__file__).parent / "data"
CLIP = DATA / "asterisk" / "en" / "demo-nogo.wav"
LONG = DATA / "long_en.flac"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The module server's store: drafts, encoder outputs, recordings."""
    return tmp_path_factory.mktemp("drafts")


@pytest.fixture(scope="module")
def server(store) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A server with a small queue (1) and upload limit (3 MB), stopped with SIGTERM."""
    args = ["--queue", "1", "--max-upload-mb", "3", "--language", "en", "--store", str(store)]
    with started_server(args) as running:
        yield running.url, running.process


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def cli_json(tmp_path_factory) -> dict[str, dict]:
    """`as2d transcribe --format json` of the test files, by name."""
    out = tmp_path_factory.mktemp("cli")
    files = [str(CLIP), str(LONG)]
    assert main(["transcribe", *files, "--language", "en", "--format", "json", "-o", str(out)]) == 0
    return {Path(f).name: json.loads((out / f"{Path(f).stem}.json").read_text()) for f in files}


_post = post_audio


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    values = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(values[0])


def _error(body: bytes) -> str:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return str(error["message"])


def test_the_server_says_where_it_listens_once_it_does(server):
    """One line on stderr, written before the first request could be answered."""
    url, proc = server
    assert proc.stderr is not None
    fd = proc.stderr.fileno()  # read as it is, without waiting for more
    assert select.select([fd], [], [], 10)[0], "nothing on stderr"
    lines = os.read(fd, 1 << 16).decode().splitlines()
    assert lines[0] == f"as2d: serving whisper-base on {url} (Ctrl-C to stop)"


def test_transcriptions_equal_the_command_line(client, cli_json):
    expected = cli_json[CLIP.name]
    with CLIP.open("rb") as f:
        verbose = client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="verbose_json"
        )
    ours = verbose.model_extra["as2d"]
    assert [w["token_ids"] for w in ours["windows"]] == [
        w["token_ids"] for w in expected["windows"]
    ]
    assert verbose.text == expected["text"]
    with CLIP.open("rb") as f:
        text = client.audio.transcriptions.create(
            model="whisper-base", file=f, response_format="text"
        )
    assert text == expected["text"] + "\n"
    with CLIP.open("rb") as f:
        srt = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="srt")
    segments = [s.text for s in verbose.segments]  # timed sentences, the same in srt
    assert " ".join(segments) == expected["text"] and len(segments) > 1
    assert srt.startswith("1\n") and all(f"\n{text}\n" in srt for text in segments)


def test_verbose_json_times_words_when_asked_as_openai_s_api_does(client, cli_json):
    with CLIP.open("rb") as f:
        verbose = client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="verbose_json",
            timestamp_granularities=["word", "segment"],
        )  # fmt: skip
    words = verbose.words
    assert " ".join(w.word for w in words) == cli_json[CLIP.name]["text"]
    assert all(a.start <= a.end <= b.start for a, b in itertools.pairwise(words))
    assert verbose.segments[0].start == words[0].start
    with CLIP.open("rb") as f, pytest.raises(openai.BadRequestError, match="verbose_json"):
        client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="json", timestamp_granularities=["word"]
        )


def test_a_prompt_of_earlier_text_conditions_the_target_as_the_api_does(client):
    prompt = "Asterisk, Digium and the PBX console."
    with CLIP.open("rb") as f:
        verbose = client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="verbose_json", prompt=prompt
        )
    with Transcriber(Options(method="target", language="en")) as transcriber:
        run = transcriber.transcribe(CLIP, previous=prompt)
        expected = [w.token_ids for w in run]
    assert [w["token_ids"] for w in verbose.model_extra["as2d"]["windows"]] == expected


def test_streaming_sends_the_text_as_windows_finish(client, cli_json):
    with LONG.open("rb") as f:
        events = list(client.audio.transcriptions.create(model="whisper-1", file=f, stream=True))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert len(deltas) == len([w for w in cli_json[LONG.name]["windows"] if w["text"]])
    assert events[-1].type == "transcript.text.done"
    assert events[-1].text == "".join(deltas) == cli_json[LONG.name]["text"]


def _events(body: bytes) -> list[dict]:
    """The server-sent events of a streamed answer."""
    lines = body.decode().split("\n")
    return [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]


def test_a_streamed_verbose_json_sends_each_window_s_segments_then_the_whole_body(server):
    """The page's progress on a file: our event per window decided (its segments, numbered
    and shaped as verbose_json's, and the audio decided), then the very body the unstreamed
    request answers."""
    url = server[0] + "/v1/audio/transcriptions"
    fields = {"model": "whisper-1", "response_format": "verbose_json",
              "timestamp_granularities[]": "word"}  # fmt: skip
    status, headers, body = _post(url, {**fields, "stream": "true"}, LONG.read_bytes(), LONG.name)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = _events(body)
    assert [e["type"] for e in events][-1] == "transcript.text.done"
    windows = [e for e in events if e["type"] == "as2d.transcript.window"]
    streamed = events[-1]["as2d"]["verbose_json"]
    status, _, body = _post(url, fields, LONG.read_bytes(), LONG.name)
    assert status == 200
    expected = json.loads(body)
    assert streamed["text"] == events[-1]["text"] == expected["text"]
    assert streamed["segments"] == expected["segments"] and streamed["words"] == expected["words"]
    assert [w["token_ids"] for w in streamed["as2d"]["windows"]] == [
        w["token_ids"] for w in expected["as2d"]["windows"]
    ]
    assert len(windows) == len(expected["as2d"]["windows"]) > 1  # every window, text or not
    segments = [s for w in windows for s in w["segments"]]
    assert [{k: v for k, v in s.items() if k != "words"} for s in segments] == expected["segments"]
    assert [word for s in segments for word in s["words"]] == expected["words"]
    done = [w["done_s"] for w in windows]
    assert done == sorted(done) and done[-1] <= windows[-1]["total_s"]
    assert windows[0]["total_s"] == pytest.approx(expected["duration"], abs=0.05)


def test_translations_answer_with_the_translate_task(server, tmp_path):
    status, _, body = _post(
        server[0] + "/v1/audio/translations",
        {"model": "whisper-1", "response_format": "verbose_json"},
        CLIP.read_bytes(),
    )
    assert status == 200, body
    answer = json.loads(body)
    assert answer["task"] == "translate" and answer["text"]
    out = tmp_path / "cli"
    main(["transcribe", str(CLIP), "--task", "translate", "--language", "en", "--format", "json",
          "-o", str(out)])  # fmt: skip
    expected = json.loads((out / "demo-nogo.json").read_text())
    assert [w["token_ids"] for w in answer["as2d"]["windows"]] == [
        w["token_ids"] for w in expected["windows"]
    ]


@pytest.mark.parametrize(
    ("fields", "file", "status", "says"),
    [
        ({"model": "whisper-1"}, b"not audio at all" * 64, 400, "not an audio file"),
        ({"model": "whisper-1"}, b"", 400, "empty"),
        ({"model": "gpt-4o"}, CLIP.read_bytes(), 400, "unknown model"),
        (
            {"model": "whisper-1", "stream": "true", "response_format": "srt"},
            CLIP.read_bytes(),
            400,
            "response_format must be one of ('json', 'text', 'verbose_json'), not srt",
        ),
        (
            {"model": "whisper-1", "stream": "true", "response_format": "vtt"},
            CLIP.read_bytes(),
            400,
            "stream=true sends the text as events",
        ),
        (
            {"model": "whisper-1", "stream": "true", "response_format": "verbose_json"},
            b"not audio at all" * 64,
            400,
            "not an audio file",
        ),
        ({"model": "whisper-1", "response_format": "xml"}, CLIP.read_bytes(), 400, "json"),
        ({"model": "whisper-1", "temperature": "0.7"}, CLIP.read_bytes(), 400, "temperature"),
        ({"model": "whisper-1", "stream": "maybe"}, CLIP.read_bytes(), 400, "stream"),
        ({"model": "whisper-1", "language": "xx"}, CLIP.read_bytes(), 400, "unknown language"),
        ({"model": "whisper-1"}, None, 400, "no file"),
    ],
)
def test_bad_requests_get_an_openai_error_and_the_server_goes_on(
    server, fields, file, status, says
):
    code, _, body = _post(server[0] + "/v1/audio/transcriptions", fields, file, "a.wav")
    assert code == status
    message = _error(body)
    assert says in message and "as2d-uploads" not in message  # names the upload, not our file
    assert "Errno" not in message
    code, _, body = _post(server[0] + "/v1/audio/transcriptions", {"model": "whisper-1"},
                          CLIP.read_bytes())  # fmt: skip
    assert code == 200 and json.loads(body)["text"]


def test_an_english_only_target_refuses_other_languages_and_says_its_own(tmp_path):
    """whisper-tiny.en cannot translate or hear French: 400. What it transcribes is English,
    and `duration` is the upload's length, not where its last window ends."""
    audio, rate = sf.read(CLIP, dtype="float32")
    padded = tmp_path / "padded.wav"
    sf.write(padded, np.concatenate([audio, np.zeros(3 * rate, np.float32)]), rate)
    with started_server(["--target", "whisper-tiny.en", "--method", "target"]) as running:
        url = running.url + "/v1/audio"
        for endpoint, fields in (
            ("translations", {"model": "whisper-1"}),
            ("transcriptions", {"model": "whisper-1", "language": "fr"}),
        ):
            status, _, body = _post(f"{url}/{endpoint}", fields, CLIP.read_bytes())
            assert status == 400 and "English-only" in _error(body)
        fields = {"model": "whisper-1", "response_format": "verbose_json"}
        status, _, body = _post(url + "/transcriptions", fields, padded.read_bytes())
    assert status == 200, body
    answer = json.loads(body)
    assert answer["language"] == "en"
    assert answer["duration"] == pytest.approx(sf.info(padded).duration, abs=1e-3)
    assert answer["segments"][-1]["end"] < answer["duration"] - 2


def test_an_upload_over_the_limit_is_refused_before_it_is_read(server):
    host, port = server[0].removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/v1/audio/transcriptions")
    conn.putheader("Content-Type", "multipart/form-data; boundary=x")
    conn.putheader("Content-Length", str(4 << 20))  # 4 MB announced, none sent
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413
    assert "larger than 3 MB" in _error(response.read())


def test_chat_with_a_whisper_target_is_a_clear_400(server):
    request = urllib.request.Request(
        server[0] + "/v1/chat/completions", b"{}", {"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 400
    assert "audio LLM target" in _error(err.value.read())


def test_chat_with_an_audio_llm_answers_as_ask_does(tiny_qwen_dirs):
    """Chat completions with a tiny random Qwen2-Audio target: the answer is `ask`'s."""
    directory = str(tiny_qwen_dirs["qwen2_audio"])
    clip = DATA / "asterisk" / "en" / "vm-newuser.wav"
    request = "Who is speaking, and what do they want?"
    audio = {"data": base64.b64encode(clip.read_bytes()).decode(), "format": "wav"}
    content = [{"type": "text", "text": request}, {"type": "input_audio", "input_audio": audio}]
    with started_server(["--target", directory, "--method", "pld", "--budget", "4"]) as running:
        client = openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0)
        messages = [{"role": "user", "content": content}]
        reply = client.chat.completions.create(model=directory, messages=messages)
        with pytest.raises(openai.BadRequestError, match="input_audio"):
            client.chat.completions.create(
                model=directory, messages=[{"role": "user", "content": content[:1]}]
            )
        status, _, body = _post(running.url + "/v1/recordings", {}, clip.read_bytes(), clip.name)
        assert status == 200, body
        recording = json.loads(body)["id"]
        by_id = client.chat.completions.create(
            model=directory,
            messages=[{"role": "user", "content": content[:1]}],
            extra_body={"recording_id": recording},
        )
    options = Options(target=directory, method="target", task="ask", request=request)
    with Transcriber(options) as transcriber:
        run = transcriber.transcribe(clip)
        expected = [w.token_ids for w in run]
    assert [w["token_ids"] for w in reply.model_extra["as2d"]["windows"]] == expected
    assert [w["token_ids"] for w in by_id.model_extra["as2d"]["windows"]] == expected
    assert reply.choices[0].message.content == run.text


def test_models_health_and_metrics(server):
    models = json.loads(urllib.request.urlopen(server[0] + "/v1/models").read())
    assert [m["id"] for m in models["data"]] == ["whisper-base", "whisper-1"]
    health = json.loads(urllib.request.urlopen(server[0] + "/health").read())
    assert health["status"] == "ok" and health["drafter"] in ("up", "none")
    metrics = urllib.request.urlopen(server[0] + "/metrics").read().decode()
    assert 'as2d_requests_total{endpoint="transcriptions",status="200"}' in metrics
    assert "as2d_queue_depth" in metrics and "as2d_accepted_tokens_total" in metrics
    assert "as2d_tokens_per_second" in metrics


def test_a_full_queue_answers_503_with_retry_after(server):
    answers: list[tuple[int, object]] = []

    def send() -> None:
        url = server[0] + "/v1/audio/transcriptions"
        status, headers, _ = _post(url, {"model": "whisper-1"}, LONG.read_bytes(), "long.flac")
        answers.append((status, headers.get("retry-after")))

    threads = [threading.Thread(target=send) for _ in range(3)]  # one decoding, one queued
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(status for status, _ in answers)[0] == 200
    busy = [retry for status, retry in answers if status == 503]
    assert busy and all(retry for retry in busy)


def test_a_drafter_killed_mid_request_changes_nothing_and_is_replaced(server, cli_json):
    url, proc = server
    drafters = _children(proc.pid)
    answer: dict = {}

    def send() -> None:
        _, _, body = _post(url + "/v1/audio/transcriptions",
                           {"model": "whisper-1", "response_format": "verbose_json"},
                           LONG.read_bytes(), "long.flac")  # fmt: skip
        answer.update(json.loads(body))

    thread = threading.Thread(target=send)
    thread.start()
    time.sleep(2.0)  # decoding its first windows
    for pid in drafters:
        os.kill(pid, signal.SIGKILL)
    thread.join()
    expected = cli_json[LONG.name]
    assert [w["token_ids"] for w in answer["as2d"]["windows"]] == [
        w["token_ids"] for w in expected["windows"]
    ]
    code, _, _ = _post(url + "/v1/audio/transcriptions", {"model": "whisper-1"}, CLIP.read_bytes())
    assert code == 200
    health = json.loads(urllib.request.urlopen(url + "/health").read())
    assert health["drafter"] == "up"
    assert set(_children(proc.pid)) - set(drafters)  # a new drafter process


def test_a_client_that_disconnects_cancels_its_recording(server):
    url, _ = server
    audio_before = _metric(url, "as2d_audio_seconds_total")
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    boundary = "b0undary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="long.flac"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + LONG.read_bytes()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    conn.request("POST", "/v1/audio/transcriptions", body,
                 {"Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    time.sleep(1.5)  # its first window is being decoded
    conn.close()
    code, _, body = _post(url + "/v1/audio/transcriptions", {"model": "whisper-1"},
                          CLIP.read_bytes())  # fmt: skip
    assert code == 200
    # Only the short clip was decoded to the end: the long recording stopped where it was.
    assert _metric(url, "as2d_audio_seconds_total") - audio_before < 30
    metrics = urllib.request.urlopen(url + "/metrics").read().decode()
    assert 'status="499"' in metrics


def test_load_of_four_clients_answers_every_request_alike(tmp_path):
    """A bounded load (4 clients, 12 requests over three recordings) on a server of its own."""
    files = [
        CLIP,
        DATA / "asterisk" / "en" / "dir-intro.wav",
        DATA / "asterisk" / "en" / "tt-allbusy.wav",
    ]
    with started_server(["--queue", "8", "--language", "en"]) as running:
        report = run_load(running.url, files, clients=4, requests=12)
        children = running.children()
        running.process.send_signal(signal.SIGTERM)
        running.process.wait(timeout=60)
    assert report.statuses == [200] * 12
    assert report.identical() and len(report.token_ids) == 3
    assert report.p95 >= report.p50 > 0
    time.sleep(0.5)
    assert not [pid for pid in children if alive(pid)]


def _recording(url: str, rid: str) -> dict:
    return json.loads(urllib.request.urlopen(f"{url}/v1/recordings/{rid}").read())


def _delete(url: str, rid: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}/v1/recordings/{rid}", method="DELETE")
    try:
        with urllib.request.urlopen(request) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _by_id(url: str, rid: str) -> list[dict]:
    fields = {"model": "whisper-1", "response_format": "verbose_json", "recording_id": rid}
    status, _, body = _post(url + "/v1/audio/transcriptions", fields, None)
    assert status == 200, body
    return json.loads(body)["as2d"]["windows"]


def _kept(store: Path, rid: str) -> list[Path]:
    """Everything on disk for the recording `rid`: its upload, drafts, encoder outputs."""
    audio = rid.removeprefix("rec_")
    return [
        *store.glob(f"recordings/{rid}.*"),
        *store.glob(f"{audio}-*"),
        *store.glob(f"encoder/{audio}"),
    ]


def test_a_recording_sent_ahead_is_prepared_while_idle_answered_alike_and_deleted(
    server, store, cli_json
):
    url, _ = server
    status, _, body = _post(url + "/v1/recordings", {}, LONG.read_bytes(), "long.flac")
    assert status == 200, body
    recording = json.loads(body)
    assert recording["status"] in ("queued", "preparing", "ready")
    deadline = time.monotonic() + 300
    while recording["status"] != "ready" and time.monotonic() < deadline:
        assert recording["status"] in ("queued", "preparing"), recording
        time.sleep(0.5)
        recording = _recording(url, recording["id"])
    assert recording["status"] == "ready" and recording["drafted_s"] == recording["duration_s"]
    assert recording["prepared"] == {
        "drafter": "ct2:whisper-base",  # the most accurate: nobody waits for it
        "drafted_windows": 4,
        "encoded_windows": 4,
        "windows": 4,
        "complete": True,
    }
    windows = _by_id(url, recording["id"])
    assert [w["token_ids"] for w in windows] == [
        w["token_ids"] for w in cli_json[LONG.name]["windows"]
    ]
    assert sum(w["accepted_tokens"] for w in windows) > 0
    assert sum(w["encode_s"] for w in windows) < 0.5  # read from disk, not computed
    assert len(_kept(store, recording["id"])) == 3
    assert _delete(url, recording["id"]) == (
        200,
        {"id": recording["id"], "object": "recording.deleted", "deleted": True},
    )
    assert _kept(store, recording["id"]) == []
    for rid in (recording["id"], "rec_unknown"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{url}/v1/recordings/{rid}")
        assert err.value.code == 404
        status, error = _delete(url, rid)
        assert status == 404 and "no recording" in error["error"]["message"]


def test_recordings_on_disk_are_bounded_and_one_still_preparing_is_answered_alike(
    tmp_path, cli_json
):
    """A request for a recording still being prepared takes what is there and does the rest
    live (the same tokens); recordings beyond --max-recordings-mb go, least recently used
    first, with everything kept for them."""
    store = tmp_path / "store"
    clips = [
        DATA / "asterisk" / "en" / f"{n}.wav" for n in ("demo-nogo", "dir-instr", "tt-allbusy")
    ]
    sizes = [c.stat().st_size for c in clips]  # 168, 105, 144 KB
    limit_mb = (sum(sizes) - 1) / 2**20  # the three clips do not fit, the last two do
    args = ["--language", "en", "--store", str(store), "--max-recordings-mb", f"{limit_mb:.6f}"]
    with started_server(args) as running:
        url = running.url
        status, _, body = _post(url + "/v1/recordings", {}, LONG.read_bytes(), "long.flac")
        assert status == 200, body
        long_id = json.loads(body)["id"]
        time.sleep(3)  # under way: its first windows prepared, or some of them
        windows = _by_id(url, long_id)
        assert [w["token_ids"] for w in windows] == [
            w["token_ids"] for w in cli_json[LONG.name]["windows"]
        ]
        ids = []
        for clip in clips:
            status, _, body = _post(url + "/v1/recordings", {}, clip.read_bytes(), clip.name)
            assert status == 200, body
            ids.append(json.loads(body)["id"])
        gone, kept = [long_id, ids[0]], ids[1:]
        for rid in gone:
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"{url}/v1/recordings/{rid}")
            assert err.value.code == 404
        assert [_recording(url, rid)["id"] for rid in kept] == kept
        deadline = time.monotonic() + 60  # a window being prepared as it went is removed after
        while any(_kept(store, rid) for rid in gone) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [p for rid in gone for p in _kept(store, rid)] == []
        assert sum(p.stat().st_size for p in store.glob("recordings/*")) <= limit_mb * 2**20


def test_sigterm_stops_the_server_cleanly(server):
    """Last in this file: the server drains and exits by the signal (uvicorn raises it again
    once it has shut down, for supervisors), with no traceback and no process left."""
    _, proc = server
    children = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    time.sleep(0.5)
    assert not [pid for pid in children if alive(pid)]
