"""Degraded speech for the hard benchmark set: telephone band, babble, reverberation, speed.

Clean studio prompts and synthetic speech flatter a drafter; users send phone calls, noisy
rooms and fast talkers. Each function takes and returns 16 kHz mono float32 samples (the
rate every model in as2d reads, `SAMPLE_RATE`) and is deterministic, so a seeded build
makes the same files every time.

Example:
    noisy = mix_at_snr(speech, babble([talker_a, talker_b, talker_c]), snr_db=10.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import soxr

from as2d.eval.datasets import DatasetError
from as2d.types import SAMPLE_RATE

TELEPHONE_RATE = 8000  # narrowband telephony (G.711): nothing above 4 kHz
MU = 255  # G.711 mu-law's compression constant
PEAK = 0.95  # outputs are scaled down to this peak when they would clip


def telephone_band(audio: np.ndarray) -> np.ndarray:
    """`audio` as a phone line carries it: 8 kHz, 8-bit mu-law, and back to 16 kHz.

    soxr's anti-aliasing filter removes what lies above 4 kHz on the way down, and its
    anti-imaging filter keeps it out on the way up; mu-law adds its quantisation noise.
    """
    narrow = soxr.resample(audio, SAMPLE_RATE, TELEPHONE_RATE)
    coded = mu_law_decode(mu_law_encode(narrow))
    return soxr.resample(coded, TELEPHONE_RATE, SAMPLE_RATE).astype(np.float32)


def mu_law_encode(audio: np.ndarray) -> np.ndarray:
    """Samples in [-1, 1] as 8-bit codes (0..255) of the mu-law curve (continuous G.711).

    Example:
        mu_law_encode(np.array([-1.0, 0.0, 1.0])) -> [0, 128, 255]
    """
    x = np.clip(audio, -1.0, 1.0)
    y = np.sign(x) * np.log1p(MU * np.abs(x)) / np.log1p(MU)  # [-1, 1], finer near 0
    return np.round((y + 1) / 2 * MU).astype(np.uint8)


def mu_law_decode(codes: np.ndarray) -> np.ndarray:
    """The samples that 8-bit mu-law `codes` stand for (the inverse of `mu_law_encode`)."""
    y = codes.astype(np.float32) / MU * 2 - 1
    return (np.sign(y) * np.expm1(np.abs(y) * np.log1p(MU)) / MU).astype(np.float32)


def babble(talkers: Sequence[np.ndarray]) -> np.ndarray:
    """Several people talking at once: each talker scaled to the same power, then summed.

    Args:
        talkers: one stream of speech per talker, all of the same length.
    """
    return np.sum([t / max(power(t), 1e-12) ** 0.5 for t in talkers], axis=0).astype(np.float32)


def mix_at_snr(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """`speech` plus `noise` scaled so that speech power / noise power is `snr_db`.

    Power is the mean square over the whole recording, pauses included. `noise` is repeated
    or cut to the length of `speech`; the mix is scaled down if it would clip, which keeps
    the ratio.

    Example:
        mix_at_snr(speech, noise, 10.0): the noise carries a tenth of the speech's power.
    """
    noise = np.resize(noise, speech.shape)  # repeats or cuts
    gain = (power(speech) / max(power(noise), 1e-12) / 10 ** (snr_db / 10)) ** 0.5
    return _below_clipping(speech + gain * noise)


def reverberate(audio: np.ndarray, rt60_s: float, room_m: Sequence[float]) -> np.ndarray:
    """`audio` played in a shoebox room and recorded across it (pyroomacoustics' image
    source model); the reverberant tail is kept, so the result is longer.

    Args:
        audio: the dry speech.
        rt60_s: the reverberation time asked of the room (Sabine's formula gives the walls'
            absorption and the reflection order).
        room_m: its length, width and height; the talker stands near one corner and the
            microphone across the room.
    """
    try:  # optional: the bench extra
        import pyroomacoustics as pra
    except ImportError as err:
        raise DatasetError(
            f"pyroomacoustics is not installed ({err.name}); pip install 'as2d[bench]'"
        ) from err
    absorption, max_order = pra.inverse_sabine(rt60_s, room_m)
    room = pra.ShoeBox(
        room_m, fs=SAMPLE_RATE, materials=pra.Material(absorption), max_order=max_order
    )
    length, width, height = room_m
    room.add_source([0.25 * length, 0.4 * width, 0.55 * height], signal=audio)
    room.add_microphone([0.75 * length, 0.6 * width, 0.4 * height])
    room.simulate()
    return _below_clipping(room.mic_array.signals[0])


def change_speed(audio: np.ndarray, factor: float) -> np.ndarray:
    """`audio` played `factor` times as fast (above 1: shorter), pitch moving with it as on
    tape: resampled from SAMPLE_RATE x factor to SAMPLE_RATE.

    Example:
        change_speed(ten_seconds, 1.1) -> 9.09 s
    """
    return soxr.resample(audio, SAMPLE_RATE * factor, SAMPLE_RATE).astype(np.float32)


def power(audio: np.ndarray) -> float:
    """Mean square of the samples (0 for none)."""
    return float(np.mean(np.square(audio, dtype=np.float64))) if audio.size else 0.0


def _below_clipping(audio: np.ndarray) -> np.ndarray:
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    scale = PEAK / peak if peak > PEAK else 1.0
    return (audio * scale).astype(np.float32)
