"""WER/CER after Whisper's normalisation, so our figures compare with published ones."""

import pytest

from as2d.eval.metrics import cer, normalize, wer


def test_normalisation_ignores_case_and_punctuation():
    assert normalize("Hello, World!") == normalize("hello world") == "hello world"


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("Mr. Smith", "mister smith"),  # titles
        ("Dr. Jones", "doctor jones"),
        ("the colour of the centre", "the color of the center"),  # the spelling map
        ("I organise the theatre", "i organize the theater"),
        ("twenty five", "25"),  # numbers
        ("Twenty-five dollars", "$25"),
        ("the first of May", "the 1st of may"),
        ("I'm gonna go", "i am going to go"),  # contractions
        ("Um, okay.", "okay"),  # hesitations
    ],
)
def test_english_normalisation_matches_whisper(written: str, spoken: str) -> None:
    assert normalize(written) == normalize(spoken) == spoken


def test_only_whispers_own_rules() -> None:
    """Whisper's normaliser, not a variant that expands more (whisper-normalizer's own does)."""
    assert normalize("kinda") == "kinda"
    assert normalize("cause") == "cause"


def test_wer_counts_word_edits():
    assert wer(["Press one, then two."], ["press one then 3"]) == 0.25
    assert wer(["a b c d"], ["a b c d"]) == 0.0
    assert wer(["the colour of the sea"], ["the color of sea"]) == 0.2  # one deletion in 5
    assert wer(["a b", "c d e f"], ["a x", "c d e f g"]) == pytest.approx(2 / 6)  # pooled


def test_wer_of_spelling_variants_is_zero():
    reference = "Mr. Smith paid twenty five dollars for the colour TV."
    assert wer([reference], ["mister smith paid $25 for the color tv"]) == 0.0


def test_other_languages_keep_their_words():
    assert normalize("Hola, ¿qué tal?", language="es").split() == ["hola", "qué", "tal"]
    assert normalize("colour", language="es").split() == ["colour"]  # the map is English-only


def test_cer_on_other_languages():
    assert cer(["bienvenido al correo"], ["bienvenido al correo"], language="es") == 0.0
    assert cer(["abcd"], ["abce"], language="es") == 0.25
