"""The kill-loop and fuzz counts of the suite: each has a default that `.ci/run` runs, and an
environment variable that may raise it (a longer soak) but never lower it below the default,
so no setting of the environment runs a weaker suite than CI's."""

from __future__ import annotations

import os

__all__ = ["count_at_least"]


def count_at_least(variable: str, default: int) -> int:
    """`default`, or the environment's `variable` when set; a value below `default` is an
    error naming both."""
    text = os.environ.get(variable)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{variable}={text!r} is not a whole number") from None
    if value < default:
        raise ValueError(f"{variable}={value} is below the suite's {default}: the variable "
                         "may raise the count, never lower it")
    return value
