from as2d.sequences import common_prefix


def test_common_prefix_of_tokens_and_text() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 5, 6]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2  # one ends first
    assert common_prefix([], [1]) == 0
    assert common_prefix(" Hello wor", " Hello world") == 10
    assert common_prefix("abc", "xbc") == 0
