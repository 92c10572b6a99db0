"""Typed reading of Pulumi config values, in both forms Pulumi stores them.

`pulumi config set weights.prefix 0` stores the flat key `weights.prefix` with the
string "0"; `pulumi config set --path weights.prefix 0` stores `weights: {prefix: 0}`.
Inside a running program every top-level value is a string (objects arrive as JSON),
while a stack file read from disk holds native YAML values. A `ConfigNode` hides
both differences: it answers one leaf at a time, coercing strings to the leaf's type
and reporting a leaf set both ways with different values.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import HIDDEN, NAMESPACE, NOT_SET, Problem


# Digits only: int() would also take "1_000" and non-ASCII digits, which nothing downstream reads.
PLAIN_INTEGER = re.compile(r"^[+-]?[0-9]+$")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Problems:
    """Collects problems so that one run reports every bad value, not just the first."""

    def __init__(self, config_keys: bool = True, secret_keys: frozenset[str] = frozenset()) -> None:
        self.items: list[Problem] = []
        self.config_keys = config_keys
        self.secret_keys = secret_keys

    def add(self, key: str, value: object, message: str) -> None:
        top_level = re.split(r"[.\[]", key, maxsplit=1)[0]
        shown = HIDDEN if top_level in self.secret_keys and value is not NOT_SET else value
        self.items.append(Problem(key, shown, message, config_key=self.config_keys))


def decode_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return MISSING


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(valid), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


class ConfigNode:
    """An object-valued config key, seen through its structured and its flat form."""

    def __init__(self, key: str, structured: Any, flat: Mapping[str, str], problems: Problems):
        self.key = key
        self.problems = problems
        self.flat = dict(flat)
        if isinstance(structured, str):
            decoded = decode_json(structured)
            if not isinstance(decoded, dict):
                problems.add(key, structured, "must be an object, e.g. set keys with `pulumi config set --path "
                             f"{key}.<field> <value>`.")
                decoded = {}
            structured = decoded
        elif structured is MISSING or structured is None:
            structured = {}
        elif not isinstance(structured, dict):
            problems.add(key, structured, f"must be an object with named fields, e.g. `pulumi config set --path {key}.<field> <value>`.")
            structured = {}
        self.structured: dict[str, Any] = structured

    @property
    def is_set(self) -> bool:
        return bool(self.structured) or bool(self.flat)

    def names(self) -> set[str]:
        """Field names set in either form."""
        return set(self.structured) | {k.split(".", 1)[0] for k in self.flat}

    def set_under(self, name: str) -> list[tuple[str, Any]]:
        """Each key the user set at or below `name`, with its value: the object's field, then each
        flat key (`weight.prefix` is set below `weight`)."""
        found = [(self.child_key(name), self.structured[name])] if name in self.structured else []
        return found + [(self.child_key(key), value) for key, value in sorted(self.flat.items())
                        if key == name or key.startswith(name + ".")]

    def given(self, name: str) -> Any:
        """What the user set at or below `name`, as one value to show in a problem."""
        found = self.set_under(name)
        if len(found) == 1 and found[0][0] == self.child_key(name):
            return found[0][1]
        return {key: value for key, value in found}

    def child_key(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def child(self, name: str) -> ConfigNode:
        prefix = name + "."
        flat = {k[len(prefix):]: v for k, v in self.flat.items() if k.startswith(prefix)}
        structured = self.structured.get(name, MISSING)
        if name in self.flat:
            # `pulumi config set gateway.podDefaults '{...}'`: a whole object as JSON under a flat key.
            decoded = decode_json(self.flat[name])
            if isinstance(decoded, dict) and structured is MISSING:
                structured = decoded
            else:
                self.problems.add(self.child_key(name), self.flat[name],
                                  f"is an object; set its fields one by one, e.g. `pulumi config set "
                                  f"{self.child_key(name)}.<field> <value>`.")
        return ConfigNode(self.child_key(name), structured, flat, self.problems)

    def raw(self, name: str) -> Any:
        """The structured value of a field that has no flat form (lists of objects)."""
        if name in self.flat:
            decoded = decode_json(self.flat[name])
            return self.flat[name] if decoded is MISSING else decoded
        return self.structured.get(name, MISSING)

    def leaf(self, name: str, coerce: Callable[[str, Any], Any], default: Any = None) -> Any:
        """One field's value: flat form, structured form, or default when it is not set; both forms
        must agree. MISSING when it is set and refused: a stand-in would feed the checks that
        follow a value the user never set."""
        key = self.child_key(name)
        self.reject_below(name)
        structured = self.structured.get(name, MISSING)
        flat = self.flat.get(name, MISSING)
        from_structured = MISSING if structured is MISSING else coerce(key, structured)
        from_flat = MISSING if flat is MISSING else coerce(key, flat)
        if from_structured is not MISSING and from_flat is not MISSING and from_structured != from_flat:
            self.problems.add(key, flat, (
                f"is set twice with different values: as the flat key `{NAMESPACE_PREFIX}{key}` = {flat!r} "
                f"and inside the object `{NAMESPACE_PREFIX}{self.key}` (`--path`) as {structured!r}. "
                f"Remove one, e.g. `pulumi config rm {key}` or `pulumi config rm --path {key}`."))
            return MISSING
        if from_flat is not MISSING:
            return from_flat
        if from_structured is not MISSING:
            return from_structured
        return default if flat is MISSING and structured is MISSING else MISSING

    def reject_below(self, name: str, what: str = "a single value, not an object") -> None:
        """Flat keys under a single value (`weights.prefix.x`) would otherwise be silently ignored."""
        for flat_key in sorted(k for k in self.flat if k.startswith(name + ".")):
            full_key = self.child_key(flat_key)
            self.problems.add(full_key, self.flat[flat_key],
                              f"{self.child_key(name)} is {what}; remove this key with `pulumi config rm {full_key}`.")

    def reject_unknown(self, valid: Iterable[str]) -> None:
        valid = list(valid)
        for name in sorted(self.names() - set(valid)):
            for key, value in self.set_under(name):
                self.problems.add(key, value, f"is not a known key of {self.key}.{did_you_mean(name, valid)} "
                                              f"Valid keys: {', '.join(valid)}.")


NAMESPACE_PREFIX = f"{NAMESPACE}:"


def finite_number(value: Any) -> Any:
    """A config value (a number, or a string holding one) as a finite float, else MISSING."""
    number: Any = MISSING
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return MISSING
    return number if number is not MISSING and math.isfinite(number) else MISSING


class Coerce:
    """Coercions from a raw config value to a typed one; each reports its own problem and returns MISSING."""

    def __init__(self, problems: Problems):
        self.problems = problems

    def _fail(self, key: str, value: Any, message: str) -> Any:
        self.problems.add(key, value, message)
        return MISSING

    def integer(self, minimum: int | None = None, maximum: int | None = None, hint: str = "") -> Callable[[str, Any], Any]:
        bounds = _bounds_text(minimum, maximum)

        def coerce(key: str, value: Any) -> Any:
            number: Any = MISSING
            if isinstance(value, int) and not isinstance(value, bool):
                number = value
            elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
                number = int(value)
            elif isinstance(value, str) and PLAIN_INTEGER.match(value.strip()):
                number = int(value.strip())
            if number is MISSING:
                return self._fail(key, value, f"must be a whole number{bounds}.{hint}")
            if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
                return self._fail(key, value, f"is out of range: must be a whole number{bounds}.{hint}")
            return number

        return coerce

    def number(self, above: float, at_most: float, hint: str = "") -> Callable[[str, Any], Any]:
        def coerce(key: str, value: Any) -> Any:
            number = finite_number(value)
            if number is MISSING or not above < number <= at_most:
                return self._fail(key, value, f"must be a number greater than {above:g} and at most {at_most:g}.{hint}")
            return number

        return coerce

    def boolean(self, key: str, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return self._fail(key, value, "must be true or false.")

    def string(self, check: Callable[[str], str | None] | None = None) -> Callable[[str, Any], Any]:
        """A string; `check` returns a message (the fix) when the string is bad."""

        def coerce(key: str, value: Any) -> Any:
            if not isinstance(value, str) or not value:
                return self._fail(key, value, "must be a non-empty string.")
            message = check(value) if check else None
            return self._fail(key, value, message) if message else value

        return coerce

    def choice(self, options: Iterable[str]) -> Callable[[str, Any], Any]:
        options = tuple(options)

        def coerce(key: str, value: Any) -> Any:
            if isinstance(value, str) and value in options:
                return value
            shown = " or ".join(repr(o) for o in options)
            hint = did_you_mean(value, options) if isinstance(value, str) else ""
            return self._fail(key, value, f"must be {shown}.{hint}")

        return coerce

    def string_list(self, item: Callable[[str, Any], Any] | None = None, max_items: int | None = None,
                    min_items: int = 0, unique: bool = False) -> Callable[[str, Any], Any]:
        """A list of strings; a flat key may hold it as a JSON array or as comma-separated text."""

        def coerce(key: str, value: Any) -> Any:
            if isinstance(value, str):
                decoded = decode_json(value)
                value = decoded if isinstance(decoded, list) else [part.strip() for part in value.split(",") if part.strip()]
            if not isinstance(value, list):
                return self._fail(key, value, "must be a list of strings, e.g. '[\"a\", \"b\"]'.")
            if len(value) < min_items or (max_items is not None and len(value) > max_items):
                limit = f"between {min_items} and {max_items}" if max_items is not None else f"at least {min_items}"
                plural = "entry" if limit.endswith(" 1") else "entries"
                return self._fail(key, value, f"must hold {limit} {plural}; it holds {len(value)}.")
            items = []
            for index, entry in enumerate(value):
                entry_key = f"{key}[{index}]"
                checked = (item or self.string())(entry_key, entry)
                if checked is MISSING:
                    return MISSING
                items.append(checked)
            if unique:
                seen = set()
                for index, entry in enumerate(items):
                    if entry in seen:
                        return self._fail(f"{key}[{index}]", entry, "appears twice; list each entry once.")
                    seen.add(entry)
            return tuple(items)

        return coerce


def _bounds_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum} to {maximum}"
    if minimum is not None:
        return f" of at least {minimum}"
    if maximum is not None:
        return f" of at most {maximum}"
    return ""
