"""Client regexes compile as Kafka's RE2/J: linear-time matching, RE2 syntax."""

from __future__ import annotations

import pytest

from broker.regex import InvalidRegex, compile_regex


def test_whole_names_match():
    pattern = compile_regex("orders-.*")
    assert pattern.fullmatch("orders-eu")
    assert not pattern.fullmatch("old-orders-eu")


@pytest.mark.parametrize("pattern", ["(", "(?=x)y", r"(a)\1", "(?<!x)y"])
def test_what_re2_refuses_is_invalid(pattern):
    # Lookaround and backreferences are Python's, not RE2/J's: Kafka refuses them too.
    with pytest.raises(InvalidRegex):
        compile_regex(pattern)


def test_a_backtracking_bomb_is_matched_in_linear_time():
    """With Python's re this match takes 2^60 steps; this test would hang until its timeout."""
    assert not compile_regex("(a+)+$").fullmatch("a" * 60 + "!")
