"""Errors that name the config key, the bad value and the fix."""

from __future__ import annotations

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
        shown = "(not set)" if self.value is _NOT_SET else repr(self.value)
        key = f"{NAMESPACE}:{self.key}" if self.config_key else self.key
        return f"{key} = {shown}: {self.message}"


class _NotSet:
    def __repr__(self) -> str:
        return "(not set)"


# Marks a Problem about a key that is missing rather than wrong.
_NOT_SET = _NotSet()
NOT_SET = _NOT_SET


class SettingsError(ValueError):
    """Every problem found in a stack's config, reported together so one run shows them all."""

    def __init__(self, problems: list[Problem], where: str = "in the stack configuration; nothing was deployed"):
        self.problems = tuple(problems)
        count = len(self.problems)
        header = f"{count} problem{'s' if count != 1 else ''} {where}:"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))
