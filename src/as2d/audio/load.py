"""Read any audio file (or array, or stream of blocks) as 16 kHz mono float32, in blocks of
bounded size.

Every model in as2d consumes 16 kHz mono float32 (`SAMPLE_RATE`). libsndfile (through
soundfile) reads wav/flac/ogg/mp3 and most uncompressed formats; PyAV (FFmpeg) decodes
what libsndfile cannot (m4a/aac, opus in mp4/webm, ...). Channels are averaged and soxr
resamples as a stream, so an hour-long file is never held in memory as float32: callers
that can work block by block use `iter_audio_blocks`; `load_audio` is for short files. Live
sources (standard input, the microphone) are iterables of blocks made in `stream.py`.

Any failure to read (missing file, a directory, an empty file, not audio, truncated or
damaged data) raises `AudioError` with a one-line message that says so in words (no errno);
zero-length audio in a valid file is not an error. libsndfile's MP3 decoder (libmpg123)
prints its complaints about damaged frames to the process's stderr: those are kept off the
terminal (`_quiet_stderr`), and a file that cannot be decoded whole is reported once, as an
`AudioError`.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import av
import numpy as np
import soundfile as sf
import soxr

from as2d.types import SAMPLE_RATE

# a file, samples already at 16 kHz mono, or such samples in blocks as they come (live input)
AudioSource = str | Path | np.ndarray | Iterable[np.ndarray]
DEFAULT_BLOCK_S = 10.0  # 160_000 samples = 640 KB of float32 per block
# containers whose stated duration is exact: indexed ones, and FLAC (STREAMINFO's sample count)
_EXACT_DURATION_FORMATS = ("mov", "mp4", "m4a", "matroska", "webm", "flac")
_TRUNCATION_SLACK_S = 0.5  # decoded audio may fall this short of an indexed duration


class AudioError(Exception):
    """Audio could not be read: missing or empty file, not audio, truncated or damaged data."""


def iter_audio_blocks(
    source: AudioSource, block_s: float = DEFAULT_BLOCK_S
) -> Iterator[np.ndarray]:
    """Yield the audio as consecutive 16 kHz mono float32 blocks.

    Only one block (plus decoder and resampler state) is in memory at a time.

    Args:
        source: path of an audio file, a 1-D array of 16 kHz mono samples, or an iterable
            of such arrays (consumed one at a time, as they come; passed on as they are).
        block_s: about how many seconds each block holds (the last one may be shorter);
            an iterable's blocks keep their own sizes.

    Returns:
        An iterator of [samples] float32 arrays; none for zero-length audio.

    Raises:
        AudioError: at once for a missing path or a directory; while iterating for
            data that is not audio, truncated or corrupt.
    """
    if block_s <= 0:
        raise ValueError(f"block_s must be positive, got {block_s}")
    if isinstance(source, np.ndarray):
        return _array_blocks(_as_mono_16k(source), round(block_s * SAMPLE_RATE))
    if isinstance(source, (str, Path)):
        return _file_blocks(_checked_path(source), block_s)
    return (_as_mono_16k(block) for block in source)


def load_audio(source: str | Path | np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Return a whole (short) recording as one 16 kHz mono float32 array.

    Args:
        source: path of an audio file, or a 1-D array of mono samples.
        sample_rate: rate of `source` when it is an array; ignored for files.

    Returns:
        [samples] float32 at SAMPLE_RATE; empty for zero-length audio.

    Raises:
        AudioError: the file or array cannot be read as audio.
    """
    if isinstance(source, np.ndarray):
        audio = _as_mono_16k(source)
        if sample_rate == SAMPLE_RATE:
            return audio
        return soxr.resample(audio, sample_rate, SAMPLE_RATE).astype(np.float32, copy=False)
    blocks = list(iter_audio_blocks(source))
    return np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.float32)


def audio_duration(source: str | Path | np.ndarray) -> float:
    """Return the duration in seconds, from the file's headers when it has them.

    Args:
        source: path of an audio file, or a 1-D array of 16 kHz mono samples (a stream of
            blocks has no duration until it ends: see `iter_audio_blocks`).

    Returns:
        Duration in seconds (decodes the file only when no header states it).

    Raises:
        AudioError: the file cannot be read as audio.
    """
    if isinstance(source, np.ndarray):
        return len(_as_mono_16k(source)) / SAMPLE_RATE
    path = _checked_path(source)
    try:
        with _quiet_stderr():
            info = sf.info(str(path))
    except sf.LibsndfileError:
        pass
    else:
        if info.format != "MP3" or _mp3_states_length(path):
            return info.frames / info.samplerate
        return sum(len(block) for block in iter_audio_blocks(path)) / SAMPLE_RATE
    with open_av(path, path) as container:
        stream = container.streams.audio[0]
        if stream.duration is not None and stream.time_base is not None:
            return float(stream.duration * stream.time_base)
        if container.duration is not None:
            return container.duration / av.time_base
    return sum(len(block) for block in iter_audio_blocks(path)) / SAMPLE_RATE


def _as_mono_16k(samples: np.ndarray) -> np.ndarray:
    """Check that an array holds mono samples and return them as float32."""
    if samples.ndim != 1:
        raise AudioError(f"expected a 1-D array of mono samples, got shape {samples.shape}")
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32768.0
    if not np.issubdtype(samples.dtype, np.floating):
        raise AudioError(f"expected float or int16 samples, got dtype {samples.dtype}")
    return samples.astype(np.float32, copy=False)


def _array_blocks(audio: np.ndarray, block_len: int) -> Iterator[np.ndarray]:
    """Yield consecutive views of `audio`, `block_len` samples each."""
    for start in range(0, len(audio), block_len):
        yield audio[start : start + block_len]


def _checked_path(source: str | Path) -> Path:
    """Return `source` as a Path to an existing regular file, or raise AudioError."""
    path = Path(source)
    if path.is_dir():
        raise AudioError(f"{path}: is a directory, not an audio file")
    if not path.is_file():
        raise AudioError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: empty file (0 bytes)")
    return path


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The process's stderr (fd 2) goes to /dev/null in the block: libmpg123, libsndfile's MP3
    decoder, prints to it directly, past `sys.stderr`. Our own messages come from AudioError.
    The block is one open or one read (milliseconds); another thread's line then is lost too."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 at all: nothing to keep quiet
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _file_blocks(path: Path, block_s: float) -> Iterator[np.ndarray]:
    """Decode a file with libsndfile when it can, else with PyAV; resample to 16 kHz."""
    try:
        with _quiet_stderr():
            sound_file = sf.SoundFile(str(path))
    except sf.LibsndfileError:
        container = open_av(path, path)
        rate = container.streams.audio[0].sample_rate
        chunks = decode_av(container, path)
    else:
        rate, chunks = sound_file.samplerate, _sndfile_chunks(sound_file, block_s)
    yield from resampled(chunks, rate, round(block_s * rate))


def _sndfile_chunks(sound_file: sf.SoundFile, block_s: float) -> Iterator[np.ndarray]:
    """Yield mono float32 chunks at the file's own rate; check nothing is missing."""
    name, expected, rate = sound_file.name, sound_file.frames, sound_file.samplerate
    block_len = round(block_s * rate)
    with sound_file:
        if sound_file.format in ("WAV", "WAVEX") and _wav_is_truncated(Path(name)):
            raise AudioError(f"{name}: truncated WAV (its data is shorter than its header says)")
        read = 0
        try:
            # read() rather than blocks(): blocks() pads a short file up to its header length
            while len(chunk := _quiet_read(sound_file, block_len)):
                read += len(chunk)
                yield chunk.mean(axis=1, dtype=np.float32)
        except sf.LibsndfileError as error:
            raise AudioError(f"{name}: damaged or truncated audio data") from error
    exact = sound_file.format != "MP3" or _mp3_states_length(Path(name))
    if exact and read < expected:
        raise _truncated(name, read / rate, expected / rate)


def _quiet_read(sound_file: sf.SoundFile, frames: int) -> np.ndarray:
    """Up to `frames` frames as [frames, channels] float32, the MP3 decoder's chatter muted."""
    with _quiet_stderr():
        return sound_file.read(frames, dtype="float32", always_2d=True)


def _truncated(name: str | Path, got_s: float, expected_s: float) -> AudioError:
    return AudioError(
        f"{name}: truncated or damaged: {got_s:.1f} of its {expected_s:.1f} s could be decoded"
    )


def _wav_is_truncated(path: Path) -> bool:
    """Whether a RIFF/WAVE file's data chunk is shorter than its header declares.

    A size of 0 or 0xFFFFFFFF is what streaming writers leave behind; not truncation.
    """
    with path.open("rb") as file:
        if file.read(12)[8:12] != b"WAVE":
            return False
        while len(header := file.read(8)) == 8:
            chunk_id, size = struct.unpack("<4sI", header)
            if chunk_id == b"data":
                remaining = path.stat().st_size - file.tell()
                return 0 < size < 0xFFFFFFFF and remaining < size
            file.seek(size + (size & 1), 1)  # chunks are padded to an even size
    return False


def _mp3_states_length(path: Path) -> bool:
    """Whether an MP3 file carries a Xing/Info/VBRI header, so its length is exact.

    Without one, libsndfile estimates the length from the first frame's bit rate,
    which can be twice the truth for variable bit rates.
    """
    with path.open("rb") as file:
        head = file.read(10)
        skip = 0
        if head[:3] == b"ID3":  # an ID3v2 tag: 10 bytes, then a size in 4 bytes of 7 bits
            skip = 10 + sum((byte & 0x7F) << (7 * (3 - i)) for i, byte in enumerate(head[6:10]))
        file.seek(skip)
        first_frame = file.read(200)  # the tag sits after the frame's side information
    return any(tag in first_frame for tag in (b"Xing", b"Info", b"VBRI"))


def open_av(source: Path | BinaryIO, name: str | Path) -> av.container.InputContainer:
    """Open a file (or a stream `name`d in messages: a pipe, in a format FFmpeg can read
    from one) with PyAV and check it has an audio stream, or raise AudioError."""
    try:
        container = av.open(str(source) if isinstance(source, Path) else source, mode="r")
    except (av.error.InvalidDataError, UnicodeDecodeError) as error:
        raise AudioError(
            f"{name}: not an audio file that as2d can decode (an unknown format, or damaged)"
        ) from error
    except av.error.EOFError as error:
        raise AudioError(f"{name}: truncated (the file ends before its audio)") from error
    except av.FFmpegError as error:  # reading failed: permission denied, I/O error, ...
        raise AudioError(f"{name}: cannot be read ({error.strerror})") from error
    if not container.streams.audio or not container.streams.audio[0].sample_rate:
        container.close()
        raise AudioError(f"{name}: no audio stream in this file")
    return container


def decode_av(container: av.container.InputContainer, path: str | Path) -> Iterator[np.ndarray]:
    """Yield mono float32 chunks of the first audio stream; check nothing is missing."""
    with container:
        stream = container.streams.audio[0]
        decoded = 0
        try:
            for frame in _float_frames(container, stream):
                decoded += frame.samples
                yield frame.to_ndarray().mean(axis=0, dtype=np.float32)
        except av.FFmpegError as error:
            got_s = decoded / stream.sample_rate
            raise AudioError(f"{path}: damaged audio data at {got_s:.1f} s") from error
        indexed = container.format.name.split(",")[0] in _EXACT_DURATION_FORMATS
        if indexed and stream.duration is not None and stream.time_base is not None:
            expected_s = float(stream.duration * stream.time_base)
            if decoded / stream.sample_rate < expected_s - _TRUNCATION_SLACK_S:
                raise _truncated(path, decoded / stream.sample_rate, expected_s)


def _float_frames(
    container: av.container.InputContainer, stream: av.AudioStream
) -> Iterator[av.AudioFrame]:
    """Decode `stream` into planar float frames at the stream's nominal rate."""
    to_float = av.AudioResampler(format="fltp", rate=stream.sample_rate)
    for frame in container.decode(stream):
        yield from to_float.resample(frame)
    yield from to_float.resample(None)  # flush what the converter still holds


def resample_stream(rate: int) -> soxr.ResampleStream | None:
    """soxr's streaming resampler from mono float32 at `rate` to 16 kHz; None at 16 kHz."""
    return None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, "float32")


def resampled(chunks: Iterable[np.ndarray], rate: int, block_len: int) -> Iterator[np.ndarray]:
    """Gather mono chunks at `rate` into blocks of ~`block_len` and resample them to 16 kHz."""
    stream = resample_stream(rate)
    pending: list[np.ndarray] = []
    pending_len = 0
    for chunk in chunks:
        pending.append(chunk)
        pending_len += len(chunk)
        if pending_len >= block_len:
            block = np.concatenate(pending)
            pending, pending_len = [], 0
            block = block if stream is None else stream.resample_chunk(block)
            if len(block):
                yield block
    tail = np.concatenate(pending) if pending else np.zeros(0, dtype=np.float32)
    if stream is not None:
        tail = stream.resample_chunk(tail, last=True)
    if len(tail):
        yield tail
