"""Degradations of the hard set, on a real prompt: what each one promises a listener."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from as2d.audio.load import load_audio
from as2d.eval.degrade import (
    babble,
    change_speed,
    mix_at_snr,
    mu_law_decode,
    mu_law_encode,
    power,
    reverberate,
    telephone_band,
)
from as2d.types import SAMPLE_RATE

DATA = Path(__file__).parents[1] / "data" / "asterisk"


def speech() -> np.ndarray:
    """Allison's 6 s vm-newuser prompt, 16 kHz."""
    return load_audio(DATA / "en" / "vm-newuser.wav")


def share_above(audio: np.ndarray, hz: float) -> float:
    """The share of `audio`'s power at frequencies above `hz`."""
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    return float(
        spectrum[np.fft.rfftfreq(len(audio), 1 / SAMPLE_RATE) >= hz].sum() / spectrum.sum()
    )


def test_telephone_band_keeps_nothing_above_4_khz():
    noise = np.random.default_rng(0).standard_normal(len(speech())).astype(np.float32)
    wideband = speech() + 0.05 * noise  # the 8 kHz prompt plus energy up to 8 kHz
    assert share_above(wideband, 4000) > 0.05
    phone = telephone_band(wideband)
    assert len(phone) == len(wideband)
    assert share_above(phone, 4000) < 1e-6
    assert share_above(phone, 0) == pytest.approx(1.0)  # still sound: speech in the band


def test_mu_law_codes_and_round_trip():
    assert mu_law_encode(np.array([-1.0, 0.0, 1.0])).tolist() == [0, 128, 255]
    x = speech()
    decoded = mu_law_decode(mu_law_encode(x))
    assert 10 * np.log10(power(x) / power(decoded - x)) > 30  # 8 bits, companded: ~35 dB


@pytest.mark.parametrize("snr_db", [5.0, 20.0])
def test_babble_is_mixed_at_the_asked_snr(snr_db: float):
    x = speech()
    others = [load_audio(path) for path in sorted([*DATA.glob("es/*.wav"), *DATA.glob("fr/*.wav")])]
    noise = babble([np.resize(t, len(x)) for t in others])  # 6 other prompts
    mixed = mix_at_snr(x, noise, snr_db)
    assert np.max(np.abs(mixed)) <= 0.95 + 1e-6  # scaled down rather than clipped
    # mixed = a * speech + b * noise: the ratio of what each brings, whatever the scaling
    (a, b), *_ = np.linalg.lstsq(np.stack([x, noise], axis=1), mixed, rcond=None)
    measured = 10 * np.log10(power(a * x) / power(b * noise))
    assert measured == pytest.approx(snr_db, abs=0.5)


def test_babble_talkers_count_alike_however_loud():
    talker = speech()
    together = babble([talker, 3 * talker])
    np.testing.assert_allclose(together, 2 * talker / power(talker) ** 0.5, atol=1e-5)


def test_reverberation_adds_a_decaying_tail():
    dry = speech()[: 2 * SAMPLE_RATE]  # cut in the middle of a word
    wet = reverberate(dry, rt60_s=0.6, room_m=(6.0, 4.5, 3.0))
    n, window = len(dry), SAMPLE_RATE // 5  # 200 ms
    assert len(wet) >= n + SAMPLE_RATE // 2
    after = n + SAMPLE_RATE // 20  # past the direct sound's delay (a few metres)
    first, second = (power(wet[after + i * window : after + (i + 1) * window]) for i in (0, 1))
    assert first > 1e-3 * power(wet[:n])  # the room keeps ringing after the talker stops
    assert second < first / 10  # and dies away


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_changes_the_duration_by_its_factor(factor: float):
    x = speech()
    assert len(change_speed(x, factor)) == pytest.approx(len(x) / factor, abs=2)
