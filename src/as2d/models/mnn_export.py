"""A Whisper target on MNN as a folder of its own, to copy to a device: `as2d export --runtime
mnn NAME DIR` writes it (`write_export`), `--runtime mnn --target DIR` runs from it
(`MnnWhisperTarget.from_export`), with no torch weights and no conversion there.

The folder holds the three graphs of `mnn_graphs.GRAPHS` (copied from the cache, where they
are exported once: `mnn_graphs.exported`), the model's `config.json` (its shape; it also makes
the folder a Whisper model to the checks of names and languages, `models/targets.py`), its
tokenizer files and `as2d-export.json`, the manifest (`Manifest`): what the folder is, each
graph's file, inputs, outputs and sha256, and the token ids and audio settings a decoder needs,
so that a port to another language can read them there.

No torch is imported here at the top: the command line asks `is_export` of any target name.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d.models.cache import sha256_file
from as2d.models.tokenizer import VOCAB_FILES, WhisperTokenizer
from as2d.types import SAMPLE_RATE
from as2d.writers import atomic_dir

if TYPE_CHECKING:  # torch comes with it
    from as2d.models.whisper_net import WhisperNet

MANIFEST = "as2d-export.json"
FORMAT = 1  # bump when the folder's layout changes: a reader refuses other formats
RUNTIME, DTYPE = "mnn", "float32"  # what the graphs run on, and their weights


@dataclass(frozen=True)
class GraphFile:
    """One graph of the folder: its file, its inputs and outputs in call order, and how to
    tell a whole copy of it (size, sha256)."""

    file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    bytes: int
    sha256: str


@dataclass(frozen=True)
class DecoderTokens:
    """The token ids Whisper's greedy decoding needs beside the vocabulary: its prompt
    (`WhisperTokenizer.prompt`), its end, and the ids it never emits (everywhere, and first)."""

    vocab_size: int
    eot: int  # <|endoftext|>
    sot: int  # <|startoftranscript|>
    transcribe: int
    translate: int
    sot_prev: int  # <|startofprev|>: earlier text before the prompt
    no_timestamps: int
    no_speech: int
    timestamp_begin: int  # <|0.00|>
    languages: dict[str, int]  # code -> id; empty for an English-only model
    suppress: tuple[int, ...]
    begin_suppress: tuple[int, ...]


@dataclass(frozen=True)
class Manifest:
    """`as2d-export.json`: what an export folder holds and how it is decoded."""

    format: int
    model: str  # the name it was exported from
    runtime: str
    dtype: str
    as2d: str  # the version that wrote it
    graphs: dict[str, GraphFile]  # by name: encoder, cross, decoder
    tokens: DecoderTokens
    n_mels: int  # log-mel bins of the encoder's input [1, n_mels, 3000]
    sample_rate: int  # Hz of the audio those are computed from

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Raises ValueError for anything but a manifest of this `FORMAT`."""
        data: dict[str, Any] = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
        graphs = {
            name: GraphFile(**{**g, "inputs": tuple(g["inputs"]), "outputs": tuple(g["outputs"])})
            for name, g in data["graphs"].items()
        }
        t = data["tokens"]
        tokens = DecoderTokens(
            **{**t, "suppress": tuple(t["suppress"]), "begin_suppress": tuple(t["begin_suppress"])}
        )
        return cls(**{**data, "graphs": graphs, "tokens": tokens})


def is_export(name_or_path: str | Path) -> bool:
    """Whether `name_or_path` is a folder `as2d export` wrote (it holds a manifest)."""
    return (Path(name_or_path) / MANIFEST).is_file()


def read_export(directory: Path) -> Manifest:
    """The manifest of an export folder, once its graphs are found whole (by size: hashing
    hundreds of MB on every load would cost a device seconds; `GraphFile.sha256` is there to
    check a copy with).

    Raises:
        ValueError: one line: no manifest of this format, another runtime or dtype, or a
            graph missing or of another size.
    """
    try:
        manifest = Manifest.from_json((directory / MANIFEST).read_text())
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{directory}: not an export as2d {_version()} reads ({err})") from err
    if (manifest.runtime, manifest.dtype) != (RUNTIME, DTYPE):
        raise ValueError(f"{directory}: an export for {manifest.runtime} {manifest.dtype}")
    for graph in manifest.graphs.values():
        path = directory / graph.file
        if not path.is_file() or path.stat().st_size != graph.bytes:
            raise ValueError(
                f"{path} is missing or not the exported one ({graph.bytes} bytes): "
                "copy the export again"
            )
    return manifest


def write_export(
    name: str, directory: Path, force: bool = False, report: Callable[[str], None] | None = None
) -> Manifest:
    """Writes the export folder of Whisper model `name` to `directory`, whole or not at all
    (`writers.atomic_dir`): its graphs (exported into the cache first where they are not
    there yet), `config.json`, tokenizer files and manifest.

    Args:
        name: a bundled name, a local Whisper directory or a hub id in the local cache.
        directory: the folder to write; it must be missing or empty, unless `force`.
        force: replace a folder there, whatever it holds.
        report: called with a line at each step (the command line prints it on stderr).

    Returns:
        The manifest written.

    Raises:
        ValueError: one line: `name` is no Whisper model here (ModelNotFoundError) or an
            export already; `directory` is a file, or a folder not empty (without `force`);
            the graphs are not in the cache and MNN is not installed to export them.
        OSError: `directory` cannot be written.
    """
    import torch

    from as2d.models.bundled import load_whisper_net, weights_dir
    from as2d.models.mnn_graphs import cache_dir, exported, has_graphs
    from as2d.models.mnn_whisper import mnn_available
    from as2d.models.targets import adapter_class

    if is_export(name):
        raise ValueError(f"{name} is an export already: copy the folder")
    adapter_class(name, RUNTIME)  # ModelNotFoundError: unknown, or not a Whisper model
    _check_directory(directory, force)
    cached = has_graphs(cache_dir(name))
    if not cached and not mnn_available():
        raise ValueError("MNN is not installed here: pip install 'as2d[mnn]'")
    directory = directory.absolute()  # `.` has a name to put a folder beside
    directory.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(directory, replace=force) as tmp:  # before minutes of work: writable?
        if report is not None and not cached:
            report(f"{name}: exporting its MNN graphs into {cache_dir(name)} (once)")
        graphs = exported(name)
        net, tokenizer = load_whisper_net(name, torch.float32)
        if report is not None:
            report(f"{name}: copying its graphs, config and tokenizer")
        manifest = _manifest(name, net, tokenizer, _copy_graphs(graphs, tmp))
        source = weights_dir(name)
        for file in ("config.json", *VOCAB_FILES):
            if (source / file).is_file():
                shutil.copyfile(source / file, tmp / file)
        (tmp / MANIFEST).write_text(manifest.to_json())
    return manifest


def _check_directory(directory: Path, force: bool) -> None:
    """Raises ValueError, one line, where `directory` cannot be a folder (it, or a folder it
    would be made in, is a file) or would be written over without `force`."""
    found = next(p for p in (directory, *directory.parents) if p.exists())
    if not found.is_dir():
        raise ValueError(f"{found} is a file, not a folder")
    if not force and found == directory and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty: give --force to replace it")


def _copy_graphs(source: Path, directory: Path) -> dict[str, GraphFile]:
    """The cache's graphs copied into `directory`, described."""
    from as2d.models.mnn_graphs import GRAPHS

    graphs = {}
    for name, (inputs, outputs) in GRAPHS.items():
        file = f"{name}.mnn"
        shutil.copyfile(source / file, directory / file)
        size, sha256 = (directory / file).stat().st_size, sha256_file(directory / file)
        graphs[name] = GraphFile(file, inputs, outputs, size, sha256)
    return graphs


def _manifest(
    name: str, net: WhisperNet, tokenizer: WhisperTokenizer, graphs: dict[str, GraphFile]
) -> Manifest:
    t = tokenizer
    tokens = DecoderTokens(
        vocab_size=net.shape.vocab_size,
        eot=t.eot,
        sot=t.sot,
        transcribe=t.transcribe,
        translate=t.translate,
        sot_prev=t.sot_prev,
        no_timestamps=t.no_timestamps,
        no_speech=t.no_speech,
        timestamp_begin=t.timestamp_begin,
        languages=t.languages,
        suppress=net.suppression.suppress_tokens,
        begin_suppress=net.suppression.begin_suppress_tokens,
    )
    return Manifest(
        format=FORMAT,
        model=name,
        runtime=RUNTIME,
        dtype=DTYPE,
        as2d=_version(),
        graphs=graphs,
        tokens=tokens,
        n_mels=net.shape.num_mel_bins,
        sample_rate=SAMPLE_RATE,
    )


def _version() -> str:
    """as2d's version, as installed."""
    try:
        return importlib.metadata.version("as2d")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"
