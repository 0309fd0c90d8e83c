"""Live audio sources: a stream on standard input and the microphone, read as they arrive.

A file can be read at any pace; a live source cannot be waited for to end. Each reader
here yields 16 kHz mono float32 blocks of `LIVE_BLOCK_S` as soon as they are heard, so
that `SpeechWindower` closes a window a moment after its pause, and only those blocks
(plus decoder and resampler state) are ever in memory. Any of them is an `AudioSource`
(`load.iter_audio_blocks` passes an iterable of blocks on as it comes):

- `pcm_blocks`: raw 16-bit little-endian PCM (`arecord -f S16_LE`, `ffmpeg -f s16le`),
  resampled to 16 kHz by the same soxr stream as files (`load.resampled`);
- `container_blocks`: what FFmpeg can read from a pipe (wav, flac, ogg, mp3), through PyAV;
- `microphone_blocks`: an input device through `sounddevice` (the `mic` extra), which
  PortAudio already delivers at 16 kHz mono float32.

A source that pushes rather than being read, such as a Realtime socket's PCM16 appends, feeds
a `Pcm16Resampler` as its chunks come.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

import numpy as np

from as2d.audio.load import AudioError, decode_av, open_av, resample_stream, resampled
from as2d.types import SAMPLE_RATE

LIVE_BLOCK_S = 0.1  # a window's end is heard at most this long after its audio
PCM_BYTES = 2  # s16le: one sample of one channel
MIC_EXTRA = "install the mic extra (pip install 'as2d[mic]')"


class MicrophoneError(Exception):
    """No microphone to listen to: sounddevice or PortAudio missing, or no input device."""


class InputStream(Protocol):
    """What `read_blocks` needs of `sounddevice.InputStream`: `read(frames)` blocks until
    that many frames are recorded and returns them as [frames, channels] with a flag that
    says whether some were lost (the reader fell behind)."""

    def read(self, frames: int) -> tuple[np.ndarray, bool]: ...


def pcm_blocks(
    stream: BinaryIO,
    rate: int = SAMPLE_RATE,
    channels: int = 1,
    name: str = "stdin",
    block_s: float = LIVE_BLOCK_S,
    warn: Callable[[str], object] | None = None,
) -> Iterator[np.ndarray]:
    """Yield raw interleaved s16le PCM from `stream` as 16 kHz mono float32 blocks.

    Args:
        stream: a binary stream (a pipe): read until it ends, `block_s` at a time.
        rate: its sample rate (Hz); other rates than 16 kHz are resampled.
        channels: its channels, averaged to mono.
        name: the stream's name in messages.
        block_s: about how many seconds each block holds.
        warn: says (one line) that the stream ended inside a sample frame, whose bytes are
            dropped: every whole frame is kept (default: `warnings.warn`).

    Returns:
        An iterator of [samples] float32 arrays at 16 kHz.

    Raises:
        AudioError: while iterating, where the stream holds no data at all.
    """
    if rate <= 0 or channels <= 0:
        raise ValueError(f"rate and channels must be positive, got {rate} and {channels}")
    frames = max(1, round(block_s * rate))
    chunks = _pcm_chunks(stream, channels, frames, name, warn or _warn)
    yield from resampled(chunks, rate, frames)


def _pcm_chunks(
    stream: BinaryIO, channels: int, frames: int, name: str, warn: Callable[[str], object]
) -> Iterator[np.ndarray]:
    """Mono float32 chunks of up to `frames` at the stream's own rate; a frame split across
    reads is kept for the next one, and one split by the stream's end is dropped (a stray
    byte must not cost the audio before it)."""
    frame_bytes = PCM_BYTES * channels
    rest, empty = b"", True
    while data := stream.read(frames * frame_bytes):  # a pipe: blocks until full or ended
        data, empty = rest + data, False
        whole = len(data) - len(data) % frame_bytes
        rest = data[whole:]
        samples = np.frombuffer(data[:whole], dtype="<i2").reshape(-1, channels)  # [n, ch]
        yield samples.mean(axis=1, dtype=np.float32) / 32768.0
    if empty:
        raise AudioError(f"{name}: empty: no audio data came")
    if rest:
        over = f"{len(rest)} byte{'s' if len(rest) > 1 else ''}"
        warn(f"{name}: raw PCM ends inside a sample frame: its last {over} dropped")


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=2)


class Pcm16Resampler:
    """PCM16 little-endian mono bytes at `rate` → 16 kHz float32, streamed (soxr).

    Deterministic: the same chunks give the same samples (a test gives its reference the
    server's very samples this way).
    """

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._stream = resample_stream(rate)

    def feed(self, data: bytes, last: bool = False) -> np.ndarray:
        """The 16 kHz samples of `data` (an even byte count); `last` flushes the filter."""
        samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
        if self._stream is None:
            return samples
        return self._stream.resample_chunk(samples, last=last)


def container_blocks(
    stream: BinaryIO, name: str = "stdin", block_s: float = LIVE_BLOCK_S
) -> Iterator[np.ndarray]:
    """Yield the first audio stream of a container read from a pipe (a format FFmpeg can
    read without seeking: wav, flac, ogg, mp3) as 16 kHz mono float32 blocks.

    Raises:
        AudioError: while iterating: no data at all, not audio, or damaged or truncated data.
    """
    peek = getattr(stream, "peek", None)  # a pipe's reader: waits for data or the end
    if peek is not None and not peek(1):
        raise AudioError(f"{name}: empty: no audio data came")
    container = open_av(stream, name)
    rate = container.streams.audio[0].sample_rate
    yield from resampled(decode_av(container, name), rate, max(1, round(block_s * rate)))


def microphone_blocks(
    device: str | int | None = None, block_s: float = LIVE_BLOCK_S
) -> Iterator[np.ndarray]:
    """Yield the input `device` (None: the default one) as 16 kHz mono float32 blocks,
    until the caller stops (Ctrl-C). Call `check_microphone` first to hear of a missing
    microphone before anything else is loaded.

    Raises:
        MicrophoneError: while iterating: the device cannot be opened, or fails.
    """
    sd = _sounddevice()
    settings: dict[str, Any] = {"samplerate": SAMPLE_RATE, "channels": 1, "dtype": "float32"}
    try:
        opened = sd.InputStream(device=device, **settings)
    except (sd.PortAudioError, ValueError) as err:
        raise MicrophoneError(f"cannot open input device {device}: {err}") from err
    try:
        with opened as stream:
            yield from read_blocks(stream, round(block_s * SAMPLE_RATE))
    except sd.PortAudioError as err:  # unplugged, say
        raise MicrophoneError(f"input device {device}: {err}") from err


def read_blocks(stream: InputStream, frames: int) -> Iterator[np.ndarray]:
    """Yield `frames` at a time from a recording stream, mono (the first channel), forever.
    A reader that falls behind loses audio (PortAudio's flag): it goes on with what comes."""
    while True:
        data, _overflowed = stream.read(frames)  # [frames, channels]
        yield np.array(data[:, 0], dtype=np.float32)  # a copy: the stream reuses its buffer


def check_microphone(device: str | int | None = None) -> str:
    """The name of the input device `device` (None: the default one), checked to record
    16 kHz mono float32.

    Raises:
        MicrophoneError: sounddevice is not installed, PortAudio is missing, or there is
            no such input device.
    """
    sd = _sounddevice()
    try:
        info = sd.query_devices(device, kind="input")
        sd.check_input_settings(device=device, samplerate=SAMPLE_RATE, channels=1)
    except (sd.PortAudioError, ValueError) as err:
        which = "no input device" if device is None else f"no input device {device!r}"
        raise MicrophoneError(f"{which} ({err})") from err
    return str(info["name"])


def _sounddevice() -> Any:
    """The `sounddevice` module: imported here, so that only `as2d listen` needs it."""
    try:
        import sounddevice
    except ImportError as err:
        raise MicrophoneError(f"no microphone: {MIC_EXTRA}") from err
    except OSError as err:  # sounddevice is there, the PortAudio library is not
        raise MicrophoneError(
            f"no microphone: {err} (install PortAudio, e.g. apt install libportaudio2)"
        ) from err
    return sounddevice
