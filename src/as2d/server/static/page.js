// as2d's page: live captions over the Realtime WebSocket and files through
// /v1/audio/transcriptions. Plain JavaScript, no build, nothing fetched from elsewhere.
//
// Live: each utterance shows the drafter's provisional text (our event
// as2d.input_audio_transcription.provisional carries the whole caption, so it can be revised;
// OpenAI's deltas only append) and is replaced in place by the target's final text on
// `completed`, with the delay from the server's speech_stopped to that final.
// Files: the upload's progress, then the decoding's: the answer is streamed (our event
// as2d.transcript.window carries each decided window's segments and how much of the audio is
// decided), and the done event's verbose_json is shown as the unstreamed answer would be.
// `?server=URL` talks to an as2d server elsewhere (it must list this page's origin with
// --allow-origin). What the page saw is kept in `window.as2dPage` for tests and for curiosity.
"use strict";

const RATE = 24000; // OpenAI's Realtime PCM16 rate
const CHUNK_S = 0.1; // seconds of audio per input_audio_buffer.append
const ENDPOINT_MS = 600; // the pause that ends an utterance (as `as2d transcribe --endpoint-ms`)
const STOP_WAIT_MS = 15000; // after Stop, how long finals of the open utterance are awaited
const KEY_STORE = "as2d-api-key";
const EVENT = {
  started: "input_audio_buffer.speech_started",
  stopped: "input_audio_buffer.speech_stopped",
  delta: "conversation.item.input_audio_transcription.delta",
  provisional: "as2d.input_audio_transcription.provisional",
  completed: "conversation.item.input_audio_transcription.completed",
  fileWindow: "as2d.transcript.window",
  fileDone: "transcript.text.done",
};

const $ = (id) => document.getElementById(id);
const page = {
  server: new URL(location.href).searchParams.get("server") || location.origin,
  key: sessionStorage.getItem(KEY_STORE) || "",
  info: null, // GET /v1/server
  live: null, // the running live session
  // what was shown, for tests: finals ({item, text, delay}) in order, every provisional text
  // per item, the error lines, the file's text, downloads and decoding progress (the share
  // decided at each window), the seconds of audio sent, the count of each server event and
  // each item's events in order
  seen: { finals: [], provisional: {}, errors: [], file: null, sentS: 0, events: {}, items: {} },
};
window.as2dPage = page.seen;

// ---------------------------------------------------------------- errors and the key

function showError(message) {
  const line = $("error");
  line.textContent = message;
  line.hidden = false;
  page.seen.errors.push(message);
}

function clearError() {
  $("error").hidden = true;
}

function askForKey(message) {
  $("key-form").hidden = false;
  $("key").focus();
  showError(message);
}

/** "the key is wrong" -> "The key is wrong": the server's words as the start of a line. */
function sentence(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function authHeaders() {
  return page.key ? { Authorization: `Bearer ${page.key}` } : {};
}

/** The error line of an HTTP answer: OpenAI's error object where there is one. */
async function httpError(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body.error && body.error.message) message = body.error.message;
  } catch (_) {
    /* not JSON: the status says it */
  }
  return message;
}

// ---------------------------------------------------------------- what the server runs

async function loadInfo() {
  let response;
  try {
    response = await fetch(`${page.server}/v1/server`, { headers: authHeaders() });
  } catch (_) {
    $("server").textContent = `Cannot reach ${page.server}, or it does not serve this page's origin.`;
    return;
  }
  if (response.status === 401) {
    $("server").textContent = "The server needs an API key.";
    askForKey(`${sentence(await httpError(response))}: enter it above.`);
    return;
  }
  if (!response.ok) {
    showError(`The server answered: ${await httpError(response)}`);
    return;
  }
  page.info = await response.json();
  describeServer(page.info);
}

function describeServer(info) {
  const live = info.live_method === "as2d"
    ? "live: as2d (the drafter's provisional text, then the target's exact final)"
    : "live: target-only (final text only, no provisional text)";
  $("server").textContent = `${info.target} · files: ${info.method} · ${live}`;
  $("live-mode").textContent = info.live_method === "as2d"
    ? "Grey italic text is provisional; it is replaced by the final text when you pause."
    : "This server decodes target-only: each utterance appears once it has ended.";
  const select = $("language");
  const codes = info.languages === null ? [] : info.languages.length ? info.languages : ["en"];
  for (const code of codes) select.add(new Option(code, code));
  if (info.language) select.value = info.language;
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  page.key = $("key").value.trim();
  sessionStorage.setItem(KEY_STORE, page.key);
  $("key-form").hidden = true;
  clearError();
  loadInfo();
});

// ---------------------------------------------------------------- live

function socketUrl() {
  const url = new URL("/v1/realtime?intent=transcription", page.server);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url.href;
}

/** The subprotocols a browser offers in place of headers: the key as OpenAI's clients pass it. */
function protocols() {
  return page.key ? ["realtime", `openai-insecure-api-key.${page.key}`] : [];
}

function sessionUpdate() {
  const language = $("language").value || null;
  return {
    type: "session.update",
    session: {
      type: "transcription",
      audio: {
        input: {
          format: { type: "audio/pcm", rate: RATE },
          transcription: { model: "whisper-1", language },
          turn_detection: { type: "server_vad", silence_duration_ms: ENDPOINT_MS },
        },
      },
    },
  };
}

async function startLive() {
  clearError();
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    showError("No microphone here: the browser gives one only to https pages and localhost.");
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false,
               autoGainControl: false },
    });
  } catch (err) {
    showError(microphoneError(err));
    return;
  }
  setLive(true, "Connecting…");
  const live = { stream, ws: null, audio: null, stopping: false, failed: false, open: new Set(),
                 stoppedAt: {}, ready: false, pending: [] };
  page.live = live;
  live.ws = new WebSocket(socketUrl(), protocols());
  live.ws.onopen = () => live.ws.send(JSON.stringify(sessionUpdate()));
  live.ws.onmessage = (message) => onEvent(live, JSON.parse(message.data));
  live.ws.onclose = (event) => onClose(live, event);
  // captured from Start on, held until the session is set up: the first words are not lost
  startAudio(live).catch((err) => {
    if (page.live === live && !live.stopping) { // not ended meanwhile (a refusal says its line)
      failLive(live, `The audio could not start: ${err.message}`);
    }
  });
}

function microphoneError(err) {
  if (err.name === "NotAllowedError") return "The microphone permission was refused.";
  if (err.name === "NotFoundError") return "No microphone was found.";
  if (err.name === "NotReadableError") return "The microphone is in use by another program.";
  return `The microphone could not be opened: ${err.message || err.name}`;
}

/** The microphone through an AudioWorklet to 24 kHz PCM16 appends (capture.js). */
async function startAudio(live) {
  let context;
  try {
    context = new AudioContext({ sampleRate: RATE }); // the browser resamples, where it can
    live.source = context.createMediaStreamSource(live.stream);
  } catch (_) {
    if (context) context.close();
    context = new AudioContext(); // e.g. Firefox: the device's rate, resampled in capture.js
    live.source = context.createMediaStreamSource(live.stream);
  }
  live.audio = context;
  await context.audioWorklet.addModule("/static/capture.js");
  if (live.audio !== context) return; // stopped or failed meanwhile: released already
  const node = new AudioWorkletNode(context, "pcm-capture",
    { processorOptions: { rate: RATE, chunkS: CHUNK_S } });
  node.port.onmessage = (message) => sendAudio(live, message.data);
  live.source.connect(node);
  node.connect(context.destination); // silent (the node writes no output), but pulled
  page.seen.audioRate = context.sampleRate;
}

function sendAudio(live, buffer) {
  if (live.stopping) return;
  if (!live.ready) {
    live.pending.push(buffer);
    return;
  }
  if (live.ws.readyState !== WebSocket.OPEN) return;
  const bytes = new Uint8Array(buffer);
  page.seen.sentS += bytes.length / 2 / RATE;
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  live.ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: btoa(binary) }));
}

function onEvent(live, event) {
  const item = event.item_id;
  page.seen.events[event.type] = (page.seen.events[event.type] || 0) + 1;
  if (item) (page.seen.items[item] ||= []).push(event.type);
  if (event.type === "session.updated") {
    live.ready = true;
    live.pending.splice(0).forEach((buffer) => sendAudio(live, buffer));
    setLive(true, "Listening…");
  } else if (event.type === EVENT.started) {
    live.open.add(item);
    utterance(item);
  } else if (event.type === EVENT.provisional) {
    showProvisional(item, event.text, true);
  } else if (event.type === EVENT.delta) {
    showProvisional(item, event.delta, false);
  } else if (event.type === EVENT.stopped) {
    live.stoppedAt[item] = performance.now();
  } else if (event.type === EVENT.completed) {
    showFinal(live, item, event.transcript);
  } else if (event.type === "error") {
    onServerError(live, event.error || {});
  }
}

function onServerError(live, error) {
  if (live.stopping && error.code === "input_audio_buffer_commit_empty") {
    live.ws.close(); // Stop with no open utterance: nothing to wait for
    return;
  }
  if (error.code === "missing_api_key" || error.code === "invalid_api_key") {
    live.failed = true;
    askForKey(`The server refused the key: ${error.message}`);
  } else if (error.code === "session_limit") {
    failLive(live, `The server is busy: ${error.message}. Try again later.`);
  } else if (error.code === "origin_not_allowed") {
    failLive(live, `The server refused this page: ${error.message}.`);
  } else {
    showError(`The server said: ${error.message || error.code}`);
  }
}

function onClose(live, event) {
  if (!live.stopping && !live.failed) {
    const reason = event.reason ? `: ${event.reason}` : "";
    showError(`The connection to the server closed (code ${event.code}${reason}).`);
  }
  endLive(live);
}

function failLive(live, message) {
  live.failed = true;
  showError(message);
  if (live.ws.readyState <= WebSocket.OPEN) live.ws.close();
  endLive(live);
}

/** Stop: the open utterance is committed (its final comes), then the socket closes. */
function stopLive() {
  const live = page.live;
  if (!live) return;
  live.stopping = true;
  releaseAudio(live);
  if (live.ws.readyState === WebSocket.OPEN) {
    live.ws.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
    setLive(true, "Finishing the last utterance…");
    setTimeout(() => live.ws.close(), STOP_WAIT_MS);
    if (live.open.size === 0) live.ws.close();
  } else {
    endLive(live);
  }
}

function releaseAudio(live) {
  live.stream.getTracks().forEach((track) => track.stop());
  if (live.audio) live.audio.close();
  live.audio = null;
}

function endLive(live) {
  releaseAudio(live);
  if (page.live === live) page.live = null;
  setLive(false, live.failed ? "Stopped." : "Stopped. Press Start to go on.");
}

function setLive(running, status) {
  $("start").disabled = running;
  $("stop").disabled = !running;
  $("live-status").textContent = status;
}

// ---------------------------------------------------------------- captions

function utterance(item) {
  let row = document.querySelector(`.utterance[data-item="${item}"]`);
  if (!row) {
    row = document.createElement("p");
    row.className = "utterance provisional";
    row.dataset.item = item;
    row.innerHTML = '<span class="text"></span><span class="tag">provisional</span>';
    $("captions").append(row);
  }
  return row;
}

/** The drafter's text: whole (ours, may revise) or an increment (OpenAI's delta). */
function showProvisional(item, text, whole) {
  const row = utterance(item);
  if (!row.classList.contains("provisional")) return; // its final came first
  const span = row.querySelector(".text");
  if (whole) row.dataset.whole = "1";
  else if (row.dataset.whole) return; // our whole caption already says it
  span.textContent = whole ? text.trim() : (span.textContent + text).trimStart();
  (page.seen.provisional[item] ||= []).push(span.textContent);
}

function showFinal(live, item, transcript) {
  const row = utterance(item);
  const text = transcript.trim();
  row.className = `utterance final${text ? "" : " empty"}`;
  row.querySelector(".text").textContent = text || "(no words)";
  const since = live.stoppedAt[item];
  const delay = since === undefined ? null : (performance.now() - since) / 1000;
  row.querySelector(".tag").textContent = delay === null ? "final" : `final ${delay.toFixed(2)} s`;
  row.querySelector(".tag").title = "from the end of speech (speech_stopped) to the final text";
  page.seen.finals.push({ item, text: transcript, delay });
  live.open.delete(item);
  if (live.stopping && live.open.size === 0) live.ws.close();
}

$("start").addEventListener("click", startLive);
$("stop").addEventListener("click", stopLive);

// ---------------------------------------------------------------- files

function transcribeFile(file) {
  clearError();
  const player = $("player");
  if (player.src) URL.revokeObjectURL(player.src);
  player.src = URL.createObjectURL(file);
  player.hidden = false;
  $("transcript").replaceChildren();
  $("downloads").hidden = true;
  page.seen.file = null;
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("model", "whisper-1");
  form.append("response_format", "verbose_json");
  form.append("timestamp_granularities[]", "segment");
  form.append("timestamp_granularities[]", "word");
  form.append("stream", "true");
  if ($("language").value) form.append("language", $("language").value);
  upload(file, form);
}

/** XMLHttpRequest, not fetch: it reports the upload's progress, and the answer's server-sent
 * events as they come. */
function upload(file, form) {
  const request = new XMLHttpRequest();
  const bar = $("file-progress");
  // what the answer said so far: its text read up to `read`, the audio decided of the total
  const run = { file, started: performance.now(), timer: null, read: 0, doneS: 0, totalS: 0,
                body: null, error: null, progress: [] };
  bar.hidden = false;
  bar.value = 0;
  request.open("POST", `${page.server}/v1/audio/transcriptions`);
  for (const [name, value] of Object.entries(authHeaders())) request.setRequestHeader(name, value);
  request.upload.onprogress = (e) => {
    if (e.lengthComputable) bar.value = e.loaded / e.total;
    fileStatus(`Uploading ${file.name}: ${Math.round((100 * e.loaded) / (e.total || 1))} %`);
  };
  request.upload.onload = () => {
    bar.removeAttribute("value"); // indeterminate until the first window is decided
    run.timer = setInterval(() => fileStatus(decodingLine(run)), 250);
  };
  request.onprogress = () => {
    if (request.status === 200) readEvents(run, request.responseText);
  };
  request.onload = () => finishUpload(run, request);
  request.onerror = () => {
    clearInterval(run.timer);
    bar.hidden = true;
    fileStatus("");
    showError(`The upload of ${file.name} failed: the server could not be reached.`);
  };
  request.send(form);
}

/** The whole server-sent events in `text` after those read. */
function readEvents(run, text) {
  let end;
  while ((end = text.indexOf("\n\n", run.read)) !== -1) {
    const lines = text.slice(run.read, end).split("\n");
    run.read = end + 2;
    for (const line of lines) {
      if (line.startsWith("data: ")) onFileEvent(run, JSON.parse(line.slice(6)));
    }
  }
}

function onFileEvent(run, event) {
  if (event.type === EVENT.fileWindow) {
    run.doneS = event.done_s;
    run.totalS = event.total_s;
    const share = Math.min(1, event.done_s / (event.total_s || event.done_s || 1));
    $("file-progress").value = share;
    run.progress.push(share);
    fileStatus(decodingLine(run));
    showSegments(event.segments);
  } else if (event.type === EVENT.fileDone) {
    run.body = event.as2d.verbose_json;
  } else if (event.type === "error") {
    run.error = event.error;
  }
}

function decodingLine(run) {
  const seconds = ((performance.now() - run.started) / 1000).toFixed(0);
  if (run.totalS) {
    const percent = Math.round((100 * Math.min(run.doneS, run.totalS)) / run.totalS);
    return `Decoding ${run.file.name}: ${percent} % of ${run.totalS.toFixed(1)} s of audio… ${seconds} s`;
  }
  const length = $("player").duration;
  const audio = Number.isFinite(length) ? ` (${length.toFixed(1)} s of audio)` : "";
  return `Decoding ${run.file.name}${audio}… ${seconds} s`;
}

function fileStatus(text) {
  $("file-status").textContent = text;
}

/** A line about the file: the server's words, which may name it already. */
function fileLine(file, message) {
  return message.startsWith(file.name) ? message : `${file.name}: ${message}`;
}

function finishUpload(run, request) {
  const file = run.file;
  clearInterval(run.timer);
  $("file-progress").hidden = true;
  if (request.status !== 200) {
    let body = null;
    try {
      body = JSON.parse(request.responseText);
    } catch (_) {
      /* said below */
    }
    fileStatus("");
    const message = body && body.error ? body.error.message : `${request.status} ${request.statusText}`;
    if (request.status === 401) askForKey(`The server refused the key: ${message}`);
    else showError(fileLine(file, message));
    return;
  }
  readEvents(run, request.responseText); // the last events, where no progress event read them
  const body = run.body;
  if (!body) {
    fileStatus("");
    showError(fileLine(file, run.error || "the answer ended before the transcript"));
    return;
  }
  const seconds = ((performance.now() - run.started) / 1000).toFixed(1);
  fileStatus(`${file.name}: ${body.duration.toFixed(1)} s of audio in ${seconds} s (${body.as2d.method})`);
  $("transcript").replaceChildren(); // the segments streamed, now as the whole answer has them
  showTranscript(body);
  offerDownloads(file.name, body);
  page.seen.file = { text: body.text, downloads: downloads(body), progress: run.progress };
}

// ---------------------------------------------------------------- the transcript

/** The subtitle cues as `as2d transcribe` writes them (writers.py `cues`): each window's timed
 * segments (with their words, leading spaces kept), else one cue per window. */
function cues(body) {
  const windows = body.as2d.windows;
  if (windows.some((w) => w.segments.length)) return windows.flatMap((w) => w.segments);
  return windows.filter((w) => w.text).map((w) => ({ start: w.start, end: w.end, text: w.text, words: [] }));
}

function showTranscript(body) {
  for (const cue of cues(body)) showCue(cue);
}

/** Segments of a window as it is decided (verbose_json's: words without their spaces). */
function showSegments(segments) {
  for (const s of segments) {
    const words = (s.words || []).map((w, i) => ({ ...w, word: i ? ` ${w.word}` : w.word }));
    showCue({ start: s.start, end: s.end, text: s.text, words });
  }
}

function showCue(cue) {
  const row = document.createElement("p");
  row.className = "segment";
  const time = document.createElement("span");
  time.className = "time";
  time.textContent = `${clock(cue.start)} – ${clock(cue.end)}`;
  time.onclick = () => seek(cue.start);
  const text = document.createElement("span");
  if (cue.words.length) {
    for (const w of cue.words) text.append(wordSpan(w));
  } else {
    text.textContent = cue.text;
  }
  row.append(time, text);
  $("transcript").append(row);
}

function wordSpan(w) {
  const lead = w.word.match(/^\s*/)[0];
  const span = document.createElement("span");
  span.className = "word";
  span.textContent = w.word.slice(lead.length);
  span.dataset.start = w.start;
  span.dataset.end = w.end;
  span.onclick = () => seek(w.start);
  const fragment = document.createDocumentFragment();
  fragment.append(lead, span);
  return fragment;
}

function clock(seconds) {
  const m = Math.floor(seconds / 60);
  const s = (seconds - 60 * m).toFixed(1).padStart(4, "0");
  return `${m}:${s}`;
}

function seek(seconds) {
  const player = $("player");
  player.currentTime = seconds;
  player.play().catch(() => {});
}

/** The word being played is marked; checked every frame while playing. */
function highlight() {
  const now = $("player").currentTime;
  for (const span of document.querySelectorAll(".word")) {
    const on = now >= Number(span.dataset.start) && now < Number(span.dataset.end);
    if (on !== span.classList.contains("now")) span.classList.toggle("now", on);
  }
  if (!$("player").paused) requestAnimationFrame(highlight);
}

$("player").addEventListener("play", () => requestAnimationFrame(highlight));
$("player").addEventListener("seeked", highlight);

// ---------------------------------------------------------------- downloads (writers.py's forms)

function stamp(seconds, sep) {
  let ms = Math.round(seconds * 1000);
  const h = Math.floor(ms / 3600000);
  ms -= h * 3600000;
  const m = Math.floor(ms / 60000);
  ms -= m * 60000;
  const s = Math.floor(ms / 1000);
  ms -= s * 1000;
  const two = (n) => String(n).padStart(2, "0");
  return `${two(h)}:${two(m)}:${two(s)}${sep}${String(ms).padStart(3, "0")}`;
}

function toSrt(body) {
  return cues(body)
    .map((c, i) => `${i + 1}\n${stamp(c.start, ",")} --> ${stamp(c.end, ",")}\n${c.text}\n`)
    .join("\n");
}

function toVtt(body) {
  const karaoke = (c) => {
    if (!c.words.length) return c.text;
    const [first, ...rest] = c.words;
    return [first.word.trim(), ...rest.map((w) => `<${stamp(w.start, ".")}><c>${w.word}</c>`)].join("");
  };
  const blocks = cues(body).map((c) => `${stamp(c.start, ".")} --> ${stamp(c.end, ".")}\n${karaoke(c)}\n`);
  return ["WEBVTT\n", ...blocks].join("\n");
}

function downloads(body) {
  return {
    txt: `${body.text}\n`,
    srt: toSrt(body),
    vtt: toVtt(body),
    json: `${JSON.stringify(body, null, 1)}\n`,
  };
}

function offerDownloads(name, body) {
  const stem = name.replace(/\.[^.]*$/, "") || "audio";
  const types = { txt: "text/plain", srt: "application/x-subrip", vtt: "text/vtt", json: "application/json" };
  for (const [format, content] of Object.entries(downloads(body))) {
    const link = $(`get-${format}`);
    if (link.href) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(new Blob([content], { type: types[format] }));
    link.download = `${stem}.${format}`;
  }
  $("downloads").hidden = false;
}

$("file").addEventListener("change", (event) => {
  if (event.target.files.length) transcribeFile(event.target.files[0]);
  event.target.value = "";
});
const drop = $("drop");
drop.addEventListener("dragover", (event) => {
  event.preventDefault();
  drop.classList.add("over");
});
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  if (event.dataTransfer.files.length) transcribeFile(event.dataTransfer.files[0]);
});

loadInfo();
