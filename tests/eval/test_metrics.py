from as2d.eval.metrics import cer, normalize, wer


def test_normalisation_ignores_case_and_punctuation():
    assert normalize("Hello, World!") == normalize("hello world")


def test_wer_counts_word_edits():
    assert wer(["Press one, then two."], ["press one then 3"]) == 0.25
    assert wer(["a b c d"], ["a b c d"]) == 0.0


def test_cer_on_other_languages():
    assert cer(["bienvenido al correo"], ["bienvenido al correo"], language="es") == 0.0
    assert cer(["abcd"], ["abce"], language="es") == 0.25
