"""Reads a stack file (`stacks/Pulumi.<stack>.yaml`) the way `pulumi up` would see it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import NAMESPACE, NO_VALUE, Problem, SettingsError
from .model import Settings
from .parse import parse_settings

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or STACKS_DIR) / f"Pulumi.{stack}.yaml"


def read_stack_config(path: Path) -> tuple[dict[str, Any], frozenset[str]]:
    """The project's keys (without the namespace) and which of them are encrypted secrets."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise _file_error(path, f"is not valid YAML: {error}") from None
    config = document.get("config") if isinstance(document, dict) else None
    config = {} if config is None and isinstance(document, dict) else config
    if not isinstance(config, dict):
        raise _file_error(path, "needs a top-level `config:` mapping of `inference-gateway:<key>: <value>` entries.")
    prefix = NAMESPACE + ":"
    raw: dict[str, Any] = {}
    secret_keys = set()
    for key, value in config.items():
        if not isinstance(key, str):
            raise _file_error(path, f"has the config key {key!r}, which YAML read as {type(key).__name__}; "
                                    "keys are `namespace:name` strings (quote it).")
        if not key.startswith(prefix):
            continue  # another provider's namespace, e.g. aws:region
        name = key[len(prefix):]
        if isinstance(value, dict) and set(value) == {"secure"}:
            secret_keys.add(name)
        raw[name] = value
    return raw, frozenset(secret_keys)


def _file_error(path: Path, message: str) -> SettingsError:
    return SettingsError([Problem(str(path), NO_VALUE, message, config_key=False)], where="reading the stack file")


def load_stack(stack: str, stacks_dir: Path | None = None) -> Settings:
    """Validated settings of a stack, from its file, exactly as the Pulumi program parses them."""
    path = stack_file(stack, stacks_dir)
    if not path.is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        raise SettingsError([Problem("stack", stack, f"has no file {path}; stacks here: {', '.join(known) or 'none'}.")])
    raw, secret_keys = read_stack_config(path)
    return parse_settings(raw, stack=stack, secret_keys=secret_keys)
