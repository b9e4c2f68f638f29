"""The suite's kill-loop and fuzz counts: the environment may raise them, never lower them."""

import pytest
from suite_counts import count_at_least


def test_the_default_without_the_variable(monkeypatch):
    monkeypatch.delenv("ENGINE_TEST_COUNT", raising=False)
    assert count_at_least("ENGINE_TEST_COUNT", 16) == 16


def test_the_variable_raises_the_count(monkeypatch):
    monkeypatch.setenv("ENGINE_TEST_COUNT", "40")
    assert count_at_least("ENGINE_TEST_COUNT", 16) == 40


@pytest.mark.parametrize(("text", "message"), [
    ("3", "ENGINE_TEST_COUNT=3 is below the suite's 16"),
    ("many", "ENGINE_TEST_COUNT='many' is not a whole number"),
])
def test_a_lower_or_unreadable_value_is_refused(monkeypatch, text, message):
    monkeypatch.setenv("ENGINE_TEST_COUNT", text)
    with pytest.raises(ValueError, match=message):
        count_at_least("ENGINE_TEST_COUNT", 16)
