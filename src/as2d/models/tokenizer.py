"""Canonical Whisper tokenizer, identical to openai-whisper's, built offline from a model dir.

Why this exists: the drafter's text must be encoded exactly as the target would encode
it, or the aligner finds no anchors (DESIGN.md, Candidate sources). The
``tokenizer.json`` shipped with the bundled CT2 models decodes correctly but encodes
badly (``" the"`` comes out as ``"Ġ"``, ``"the"``). openai-whisper instead uses a
tiktoken BPE whose merge rank of every regular token *is* its token id (its
``gpt2.tiktoken`` / ``multilingual.tiktoken`` list exactly the model's regular vocabulary
in id order). So the canonical encoder can be rebuilt from any vocabulary listing:
map each token from GPT-2's byte-to-unicode alphabet back to bytes, rank = id, and use
GPT-2's pre-tokenization pattern. Special tokens (``<|...|>``) take their ids from the
same listing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import tiktoken

# GPT-2's pre-tokenization regex, as used by openai-whisper's tiktoken encodings.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ENGLISH_ONLY_REGULAR_TOKENS = 50256  # gpt2.tiktoken; multilingual.tiktoken has 50257
TASKS = ("transcribe", "translate")
_SPECIAL = re.compile(r"^<\|[^|]*\|>$")
_REQUIRED = (
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startofprev|>",
    "<|notimestamps|>",
)


@cache
def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: printable bytes map to themselves,
    the other 68 bytes to code points 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in mapping.values()]
    mapping.update({chr(256 + i): b for i, b in enumerate(others)})
    return mapping


@cache
def _to_latin1() -> dict[int, str]:
    """`_unicode_to_byte` as a `str.translate` table onto the Latin-1 character of each byte,
    so that a token's bytes are found at C speed (50 k tokens: 20 ms, not 110)."""
    return {ord(ch): chr(b) for ch, b in _unicode_to_byte().items()}


def _token_bytes(token: str) -> bytes:
    return token.translate(_to_latin1()).encode("latin-1")


VOCAB_FILES = ("tokenizer.json", "vocab.json", "added_tokens.json")  # what `read_vocab` reads


def read_vocab(path: Path) -> dict[str, int]:
    """Reads every token -> id of a Whisper tokenizer directory (CT2 or Hugging Face).

    Args:
        path: a directory with ``tokenizer.json``, or ``vocab.json`` (plus optional
            ``added_tokens.json``).

    Returns:
        Regular and special tokens together, in GPT-2's byte-level unicode spelling.

    Raises:
        FileNotFoundError: neither file exists.
    """
    path = Path(path)
    if (path / "tokenizer.json").exists():
        data = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
        vocab = dict(data["model"]["vocab"])
        vocab.update({t["content"]: t["id"] for t in data.get("added_tokens", [])})
        return vocab
    if (path / "vocab.json").exists():
        vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
        added = path / "added_tokens.json"
        if added.exists():
            vocab.update(json.loads(added.read_text(encoding="utf-8")))
        return vocab
    raise FileNotFoundError(f"no tokenizer.json or vocab.json in {path}")


def language_tokens(vocab: dict[str, int]) -> dict[str, int]:
    """Language code -> token id of a Whisper vocabulary (see :func:`read_vocab`), in id order:
    the specials between ``<|startoftranscript|>`` and ``<|translate|>``. Empty for an
    English-only vocabulary, whose prompt names no language. Reading a model's languages this
    way needs neither its weights nor torch (the command line checks ``--language`` with it).

    Example:
        language_tokens(read_vocab(whisper_base_dir))["fr"] -> 50265
    """
    specials = {t: i for t, i in vocab.items() if _SPECIAL.match(t)}
    if len(vocab) - len(specials) <= ENGLISH_ONLY_REGULAR_TOKENS:
        return {}
    sot, translate = specials["<|startoftranscript|>"], specials["<|translate|>"]
    found = sorted((i, t[2:-2]) for t, i in specials.items() if sot < i < translate)
    return {code: i for i, code in found}


class WhisperTokenizer:
    """Whisper's tokenizer: canonical BPE encoding plus the special-token ids.

    Attributes:
        multilingual: False for English-only models (``*.en``), whose prompt has no
            language or task token.
        eot, sot, transcribe, translate, no_timestamps, sot_prev, no_speech: special ids.
        timestamp_begin: id of ``<|0.00|>``; timestamps are the ids from here on.
    """

    def __init__(self, vocab: dict[str, int]) -> None:
        """Builds the tokenizer from a full token -> id listing (see :func:`read_vocab`).

        Args:
            vocab: regular tokens (byte-level unicode spelling) and ``<|...|>`` specials.
        """
        specials = {t: i for t, i in vocab.items() if _SPECIAL.match(t)}
        ranks = {_token_bytes(t): i for t, i in vocab.items() if t not in specials}
        # Ranks must be the ids 0..n-1 with eot right after them, as in openai-whisper.
        in_order = max(ranks.values()) == len(ranks) - 1 == specials.get("<|endoftext|>", 0) - 1
        missing = [t for t in _REQUIRED if t not in specials]
        no_speech = specials.get("<|nospeech|>", specials.get("<|nocaptions|>"))
        if missing or no_speech is None or not in_order:
            raise ValueError(f"not a Whisper vocabulary (missing {missing} or ids out of order)")
        # Specials are kept out of tiktoken: encode() never emits them, decode() drops them.
        self._encoding = tiktoken.Encoding(
            name=f"whisper-{len(ranks)}",
            pat_str=GPT2_PATTERN,
            mergeable_ranks=ranks,
            special_tokens={},
        )
        self._specials = specials
        self._ranks = ranks
        self._languages = language_tokens(vocab)
        self.multilingual = len(ranks) > ENGLISH_ONLY_REGULAR_TOKENS
        self.eot = specials["<|endoftext|>"]
        self.sot = specials["<|startoftranscript|>"]
        self.transcribe = specials["<|transcribe|>"]
        self.translate = specials["<|translate|>"]
        self.no_timestamps = specials["<|notimestamps|>"]
        self.sot_prev = specials["<|startofprev|>"]
        self.no_speech = no_speech  # <|nospeech|>, called <|nocaptions|> in older vocabularies
        self.timestamp_begin = specials.get("<|0.00|>", self.no_timestamps + 1)

    @classmethod
    def from_model_dir(cls, path: Path) -> WhisperTokenizer:
        """Reads ``tokenizer.json`` or ``vocab.json`` of a CT2 or Hugging Face model dir."""
        return cls(read_vocab(Path(path)))

    def encode(self, text: str) -> list[int]:
        """Encodes text canonically (as openai-whisper does); ``<|...|>`` stays plain text."""
        return self._encoding.encode_ordinary(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Decodes regular tokens; ids >= eot (specials, timestamps) are dropped."""
        return self._encoding.decode([int(i) for i in ids if i < self.eot])

    def token_bytes(self, token: int) -> bytes:
        """The bytes of one regular token; b"" for specials and timestamps (ids >= eot)."""
        return self._encoding.decode_single_token_bytes(token) if token < self.eot else b""

    def same_vocabulary(self, other: WhisperTokenizer) -> bool:
        """True if `other` maps every token, regular and special, to the same id."""
        return self._specials == other._specials and self._ranks == other._ranks

    def language_token(self, code: str) -> int:
        """Returns the id of ``<|code|>``, e.g. ``"en"`` -> 50259 for a multilingual model.

        Raises:
            ValueError: unknown language code, or an English-only model.
        """
        if not self.multilingual:
            raise ValueError(f"English-only model has no language tokens (asked for {code!r})")
        token = self._languages.get(code.lower())
        if token is None:
            raise ValueError(f"unknown language code {code!r}")
        return token

    def sot_sequence(self, language: str | None, task: str) -> list[int]:
        """The decoder prompt: ``[sot, language, task]`` (multilingual) or ``[sot]``.

        Args:
            language: language code; None leaves it out (to be detected by the caller).
            task: ``"transcribe"`` or ``"translate"``.

        Returns:
            Prompt ids, without ``<|notimestamps|>``.
        """
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if not self.multilingual:
            return [self.sot]
        lang = [] if language is None else [self.language_token(language)]
        return [self.sot, *lang, self.transcribe if task == "transcribe" else self.translate]

    def prompt(self, language: str | None, task: str) -> list[int]:
        """The decoder prompt as2d decodes with: :meth:`sot_sequence` + ``<|notimestamps|>``.

        Example:
            english.prompt(None, "transcribe") -> [50257, 50362]
            multilingual.prompt("fr", "translate") -> [50258, 50265, 50358, 50363]
        """
        return [*self.sot_sequence(language, task), self.no_timestamps]

    @property
    def languages(self) -> dict[str, int]:
        """Language code -> token id, in id order (empty for English-only models)."""
        return dict(self._languages)
