"""`--set KEY=VALUE` and `--unset KEY`: one config change, stored as `pulumi config set` would
store it, or removed as `pulumi config rm` would remove it.

A key under a top-level entry the stack file holds as an object or list (`hyperpod.dependenciesChart`
on dev), or one that indexes a list (`models[1].replicas`), is set inside that entry, as
`pulumi config set --path` would: true/false become booleans, integers numbers, the rest strings.
Any other key is a flat key (`weights.prefix`) whose value is the string given, JSON for an object.
`--unset` takes the same keys, and refuses one the config does not hold.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from settings.reader import did_you_mean

from .runner import PROJECT

SEGMENT = re.compile(r"(?:^|\.)([^.\[\]]+)|\[([0-9]+)\]")
INTEGER = re.compile(r"^-?[0-9]+$")


class OverrideError(ValueError):
    """A --set that names no config key or cannot be applied; the message is the whole line to print."""


@dataclass(frozen=True)
class Override:
    key: str
    # None removes the key.
    value: str | None

    def __str__(self) -> str:
        """The option as given: `--set KEY=VALUE` or `--unset KEY`."""
        return f"--unset {self.key}" if self.value is None else f"--set {self.key}={self.value}"

    @classmethod
    def parse(cls, text: str) -> Override:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise OverrideError(f"--set {text}: write KEY=VALUE, e.g. --set weights.prefix=0 or "
                                "--set 'models[1].replicas=2'")
        return cls(key.strip(), value)

    @classmethod
    def removal(cls, text: str) -> Override:
        if not text.strip() or "=" in text:
            raise OverrideError(f"--unset {text}: write the KEY alone, e.g. --unset weights.prefix or "
                                "--unset 'models[1].replicas'")
        return cls(text.strip(), None)

    @property
    def namespaced(self) -> str:
        return self.key if ":" in self.key else f"{PROJECT}:{self.key}"

    def path(self) -> list[str | int]:
        """`models[1].replicas` as ["models", 1, "replicas"]; OverrideError when it is no such path."""
        name = self.namespaced.split(":", 1)[1]
        segments, position = [], 0
        while position < len(name):
            match = SEGMENT.match(name, position)
            if match is None or (position == 0 and match.group(0).startswith(".")):
                raise OverrideError(f"{self}: {name!r} is not a config key or path; write names joined by dots "
                                    "and list indexes in brackets, e.g. 'models[1].replicas'")
            segments.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
            position = match.end()
        return segments


def apply_overrides(config: dict[str, str], secret_keys: list[str],
                    overrides: list[Override]) -> tuple[dict[str, str], list[str]]:
    """The stack's config (as the language host passes it) with each change applied in turn."""
    config, secret_keys = dict(config), list(secret_keys)
    for override in overrides:
        path = override.path()
        namespace = override.namespaced.split(":", 1)[0]
        top = f"{namespace}:{path[0]}"
        structured = _decoded(config.get(top))
        indexes_a_list = any(isinstance(segment, int) for segment in path)
        inside = len(path) > 1 and (isinstance(structured, (dict, list)) or indexes_a_list)
        if override.value is None:
            if inside and structured is not None:
                config[top] = json.dumps(_unset_inside(override, structured, path))
                changed = top
            elif not inside and override.namespaced in config:
                del config[override.namespaced]
                changed = override.namespaced
            else:
                held = [key.split(":", 1)[1] for key in config if key.startswith(f"{namespace}:")]
                raise OverrideError(_not_held(override, path[0], held))
        elif inside:
            root = structured if isinstance(structured, (dict, list)) else None
            config[top] = json.dumps(_set_inside(override, root, path[1:]))
            changed = top
        else:
            config[override.namespaced] = override.value
            changed = override.namespaced
        # A value set without --secret is stored in plain text, as `pulumi config set` would store it.
        secret_keys = [key for key in secret_keys if key != changed]
    return config, secret_keys


def _unset_inside(override: Override, root: Any, path: list[str | int]) -> Any:
    """`root` without the entry at path[1:] (a list entry goes, as `pulumi config rm --path` removes it)."""
    parent, where = root, path[0]
    for segment in path[1:-1]:
        parent, where = _entry(override, parent, segment, where), f"{where}{_shown(segment)}"
    last = path[-1]
    _entry(override, parent, last, where)
    del parent[last]
    return root


def _entry(override: Override, parent: Any, segment: str | int, where: str) -> Any:
    """parent[segment], or OverrideError saying what `where` holds instead."""
    if isinstance(parent, list) and isinstance(segment, int) and segment < len(parent):
        return parent[segment]
    if isinstance(parent, dict) and segment in parent:
        return parent[segment]
    if isinstance(parent, list):
        raise OverrideError(f"{override}: {where} is a list of {len(parent)} entries; there is no "
                            f"{where}{_shown(segment)} to remove")
    if isinstance(parent, dict):
        raise OverrideError(_not_held(override, segment, list(parent), where))
    raise OverrideError(f"{override}: {where} is a single value, with nothing inside to remove")


def _not_held(override: Override, name: str | int, held: list[str], where: str = "") -> str:
    inside = f"{where} holds" if where else "The stack's config holds"
    return (f"{override}: the stack does not set {override.key}, so there is nothing to remove.{did_you_mean(str(name), held)} "
            f"{inside} {', '.join(sorted(held)) or 'nothing'}")


def _shown(segment: str | int) -> str:
    return f"[{segment}]" if isinstance(segment, int) else f".{segment}"


def _decoded(value: str | None) -> Any:
    if value is None or value[:1] not in "[{":
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _set_inside(override: Override, root: Any, path: list[str | int]) -> Any:
    root = _container_for(path[0]) if root is None else root
    parent = root
    for segment, following in zip(path, [*path[1:], None]):
        if isinstance(segment, int) != isinstance(parent, list):
            what = "a list; index it, e.g. [0]" if isinstance(parent, list) else "an object; name one of its fields"
            raise OverrideError(f"{override}: where {segment!r} is, the config holds {what}")
        if isinstance(segment, int) and segment > len(parent):
            raise OverrideError(f"{override}: index {segment} is past the end of a list of {len(parent)} "
                                f"entries (the next one is [{len(parent)}])")
        current = parent[segment] if isinstance(segment, int) and segment < len(parent) else (
            parent.get(segment) if isinstance(parent, dict) else None)
        if following is None:
            value = _typed(override.value)
        else:
            value = current if isinstance(current, (dict, list)) else _container_for(following)
        if isinstance(segment, int) and segment == len(parent):
            parent.append(value)
        else:
            parent[segment] = value
        parent = value
    return root


def _container_for(segment: str | int) -> Any:
    return [] if isinstance(segment, int) else {}


def _typed(value: str) -> Any:
    """As `pulumi config set --path` stores a value: true/false as booleans, integers as numbers."""
    if value in ("true", "false"):
        return value == "true"
    return int(value) if INTEGER.match(value) else value
