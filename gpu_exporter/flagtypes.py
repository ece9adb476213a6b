"""Value types for flags (the CLI's and the collectors' `options`).

Each raises ValueError with a message that says what is wrong; the CLI turns it into one
line naming the flag, and exit 2.
"""

from __future__ import annotations

import re


def seconds(text: str) -> float:
    """A duration in seconds greater than 0: `5`, `0.5`, `5s`."""
    text = str(text).strip()
    try:
        value = float(text[:-1]) if text.endswith("s") else float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration in seconds") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


def count(text: str) -> int:
    """A whole number greater than 0."""
    text = str(text).strip()
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


def regex(text: str) -> str:
    """A regular expression, checked when the flags are parsed; empty matches nothing."""
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"{text!r} is not a regular expression: {exc}") from None
    return text
