"""Audio files written for tests with FFmpeg's encoders (PyAV): what soundfile cannot write."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np


def encode_with_av(
    path: Path, audio: np.ndarray, rate: int, codec: str, plain_vbr_mp3: bool = False
) -> None:
    """Write mono float32 `audio` at `rate` with one of FFmpeg's encoders (mp3, aac).

    plain_vbr_mp3: variable bit rate and no Xing header (so no stated length).
    """
    options = {"write_xing": "0"} if plain_vbr_mp3 else {}
    with av.open(str(path), "w", options=options) as container:
        stream = container.add_stream(codec, rate=rate, layout="mono")
        if plain_vbr_mp3:
            stream.codec_context.flags |= av.codec.context.Flags.qscale
            stream.codec_context.global_quality = 118 * 7  # FF_QP2LAMBDA x LAME quality 7
        frame = av.AudioFrame.from_ndarray(audio[None], format="flt", layout="mono")
        frame.sample_rate = rate
        to_codec = av.AudioResampler(format=stream.format.name, layout="mono", rate=rate)
        for converted in [*to_codec.resample(frame), *to_codec.resample(None), None]:
            for packet in stream.encode(converted):
                container.mux(packet)
