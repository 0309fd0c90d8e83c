"""Build the repository's benchmark set outside git (default: data-cache/bench/).

Two kinds of long English recordings, each a FLAC file with its reference text, listed in
`manifest.jsonl` for `as2d bench` (the building blocks are in `as2d.eval.builders`):

- asterisk: Debian's studio prompts (`apt-get download` + `dpkg-deb -x` into the cache,
  nothing installed system-wide) joined into recordings of about `--asterisk-minutes`;
- piper (or espeak-ng): the public-domain passages below (or `--text FILE`s, paragraphs
  separated by blank lines) read at a few speeds; both engines come with the `bench` extra
  (`pip install 'as2d[bench]'`, which `make bench-set` does).

Existing recordings are kept, so a second run only rewrites the manifest.

Example (small):
    .venv/bin/python scripts/make_bench_set.py --asterisk-count 1 --asterisk-minutes 1 \
        --tts-count 1 --tts-passages 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import soundfile as sf

from as2d.eval.builders import (
    asterisk_prompts,
    join_long_form,
    read_passages,
    synthesise,
    write_manifest,
)
from as2d.eval.datasets import DatasetError, Recording

REPO = Path(__file__).resolve().parents[1]
TTS_SPEEDS = (1.0, 1.14, 0.87)  # per recording; above 1 is faster

PASSAGES = (  # public domain, or written for this script; no digits or abbreviations
    "Four score and seven years ago our fathers brought forth on this continent a new "
    "nation, conceived in liberty, and dedicated to the proposition that all men are "
    "created equal. Now we are engaged in a great civil war, testing whether that nation, "
    "or any nation so conceived and so dedicated, can long endure. We are met on a great "
    "battlefield of that war. We have come to dedicate a portion of that field, as a final "
    "resting place for those who here gave their lives that that nation might live. It is "
    "altogether fitting and proper that we should do this. But, in a larger sense, we can "
    "not dedicate, we can not consecrate, we can not hallow this ground. The brave men, "
    "living and dead, who struggled here, have consecrated it, far above our poor power to "
    "add or detract. The world will little note, nor long remember what we say here, but "
    "it can never forget what they did here.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, "
    "it was the season of light, it was the season of darkness, it was the spring of hope, "
    "it was the winter of despair. We had everything before us, we had nothing before us, "
    "we were all going direct to heaven, we were all going direct the other way. In short, "
    "the period was so far like the present period, that some of its noisiest authorities "
    "insisted on its being received, for good or for evil, in the superlative degree of "
    "comparison only.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no "
    "money in my purse, and nothing particular to interest me on shore, I thought I would "
    "sail about a little and see the watery part of the world. It is a way I have of "
    "driving off the spleen and regulating the circulation. Whenever I find myself growing "
    "grim about the mouth, whenever it is a damp, drizzly November in my soul, then I "
    "account it high time to get to sea as soon as I can. There is nothing surprising in "
    "this. If they but knew it, almost all men in their degree, some time or other, "
    "cherish very nearly the same feelings towards the ocean with me.",
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune must be in want of a wife. However little known the feelings or views of such "
    "a man may be on his first entering a neighbourhood, this truth is so well fixed in the "
    "minds of the surrounding families, that he is considered the rightful property of "
    "some one or other of their daughters. My dear, said his lady to him one day, have you "
    "heard that Netherfield Park is let at last? Her husband replied that he had not. But "
    "it is, returned she, for our neighbour has just been here, and she told me all about "
    "it. He made no answer.",
    "To bake a simple loaf of bread, mix flour, water, salt and a little yeast in a large "
    "bowl until no dry flour remains. Cover the bowl and leave it somewhere warm for a few "
    "hours, until the dough has doubled in size and smells faintly sour. Turn it out onto a "
    "floured table, fold it over itself a few times, and shape it into a tight round. Let "
    "it rise once more while the oven heats as hot as it will go. Bake the loaf until the "
    "crust is deep brown and the bottom sounds hollow when you knock on it. Then comes the "
    "hardest part of all, which is waiting for it to cool before you cut the first slice.",
    "The morning train left the city in a thin grey rain. For the first hour the windows "
    "showed nothing but warehouses, car parks and the backs of houses, each with its own "
    "small garden and washing line. Then the tracks turned towards the river, and the "
    "country opened out into wide flat fields where cattle stood with their backs to the "
    "wind. A conductor walked slowly through the carriages, checking tickets and answering "
    "questions about connections. By the time the rain stopped, most of the passengers had "
    "fallen asleep, and the only sound was the steady rhythm of the wheels on the rails.",
)


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
    """Build what is missing of the benchmark set, write the manifest, print the totals."""
    args = parse_args(argv)
    try:
        recordings = build(args)
    except DatasetError as err:
        print(f"make_bench_set: error: {err}", file=sys.stderr)
        return 2
    manifest = write_manifest(args.out, recordings)
    seconds = sum(sf.info(r.audio).duration for r in recordings)
    print(f"{len(recordings)} recordings, {seconds / 3600:.2f} hours; manifest: {manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
