"""Errors that name the config key, the bad value and the fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NAMESPACE = "inference-gateway"


@dataclass(frozen=True)
class Problem:
    """One bad config value: where it is, what it was, and what to do about it."""

    key: str
    value: object
    message: str
    # False for command-line options, which have no config namespace.
    config_key: bool = True

    def __str__(self) -> str:
        key = f"{NAMESPACE}:{self.key}" if self.config_key else self.key
        if self.value is NO_VALUE:
            return f"{key}: {self.message}"
        return f"{key} = {self.value!r}: {self.message}"


class _Shown:
    """A stand-in value whose repr is the text shown in its place."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


# Marks a Problem about a key that is missing rather than wrong.
NOT_SET = _Shown("(not set)")
# For a problem about a whole file or option rather than one value.
NO_VALUE = _Shown("")
# Shown instead of the value of a key stored as a secret: error messages reach logs and PR comments.
HIDDEN = _Shown("<secret>")


def problem_lines(lead: str, problems: Sequence[object]) -> str:
    """`lead` and its problems as printed, one line per problem: a lone problem on the lead's line."""
    if len(problems) == 1:
        return f"{lead} {problems[0]}".strip()
    return "\n".join([lead, *(f"  - {problem}" for problem in problems)])


class SettingsError(ValueError):
    """Every problem found in a stack's config, reported together so one run shows them all."""

    def __init__(self, problems: list[Problem], where: str = "in the stack configuration; nothing was deployed"):
        self.problems = tuple(problems)
        count = len(self.problems)
        header = f"{count} problem{'s' if count != 1 else ''} {where}:"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))
