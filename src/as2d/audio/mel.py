"""Whisper's log-mel features in torch, as transformers' `WhisperFeatureExtractor` computes them
on its torch path (same filters, same operations), without importing transformers."""

from __future__ import annotations

import functools

import numpy as np
import torch

from as2d.types import HOP, N_SAMPLES, SAMPLE_RATE

N_FFT = 400  # 25 ms windows


def log_mel(audio: np.ndarray, n_mels: int) -> torch.Tensor:
    """[1, n_mels, 3000] features of the first 30 s of `audio` (16 kHz), zero-padded to 30 s."""
    wave = np.zeros((1, N_SAMPLES), dtype=np.float32)
    clip = np.asarray(audio, dtype=np.float32)[:N_SAMPLES]
    wave[0, : len(clip)] = clip
    window = torch.hann_window(N_FFT)
    stft = torch.stft(torch.from_numpy(wave), N_FFT, HOP, window=window, return_complex=True)
    power = (stft[..., :-1].abs() ** 2).contiguous()  # [1, 201, 3000]
    mel = torch.from_numpy(mel_filters(n_mels)).to(torch.float32).T @ power
    log = mel.clamp(min=1e-10).log10()
    log = torch.maximum(log, log.max() - 8.0)  # 80 dB of range below the loudest bin
    return (log + 4.0) / 4.0


@functools.cache
def mel_filters(n_mels: int) -> np.ndarray:
    """[201, n_mels] triangular filters from 0 to 8 kHz on the Slaney mel scale, each scaled to
    unit area (Slaney normalisation), in float64 as librosa and transformers build them."""
    fft_hz = np.linspace(0, SAMPLE_RATE // 2, 1 + N_FFT // 2)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(8000.0), n_mels + 2))
    width = np.diff(edges)
    offset = edges[None, :] - fft_hz[:, None]  # [201, n_mels + 2]
    rising = -offset[:, :-2] / width[:-1]
    falling = offset[:, 2:] / width[1:]
    triangles = np.maximum(np.zeros(1), np.minimum(rising, falling))
    return triangles * (2.0 / (edges[2 : n_mels + 2] - edges[:n_mels]))[None, :]


# The Slaney scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per
# factor 6.4).
_LOG_HZ, _LOG_MEL = 1000.0, 15.0


def _hz_to_mel(hz: float) -> float:
    if hz < _LOG_HZ:
        return 3.0 * hz / 200.0
    return _LOG_MEL + float(np.log(hz / _LOG_HZ)) * (27.0 / np.log(6.4))


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = 200.0 * mels / 3.0
    high = mels >= _LOG_MEL
    hz[high] = _LOG_HZ * np.exp(np.log(6.4) / 27.0 * (mels[high] - _LOG_MEL))
    return hz
