"""Reads a stack file (`stacks/Pulumi.<stack>.yaml`) the way `pulumi up` would see it.

Only the routing toolkit and the tests read stack files (`pulumi up` gets its config from
Pulumi), so a stack that cannot be read is told as a reader tells it (`StackFileError`): the
stack, its file and what is wrong, never that nothing was deployed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import NAMESPACE, NO_VALUE, Problem, SettingsError, problem_lines
from .model import Settings
from .parse import parse_settings

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"


class StackFileError(SettingsError):
    """A stack file a command reads but cannot use: its problems, said for a command that only
    reads the file (one line for one problem)."""

    def __init__(self, problems: list[Problem], text: str):
        super().__init__(problems)
        self.args = (text,)  # instead of SettingsError's header, which is `pulumi up`'s


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or STACKS_DIR) / f"Pulumi.{stack}.yaml"


def _shown_path(path: Path) -> str:
    """`path` as a user here would type it: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def read_stack_config(path: Path) -> tuple[dict[str, Any], frozenset[str]]:
    """The project's keys (without the namespace) and which of them are encrypted secrets."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise _file_error(path, f"is not valid YAML: {_yaml_problem(error)}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise _file_error(path, f"cannot be read as UTF-8 text ({error}).") from None
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


def _yaml_problem(error: yaml.YAMLError) -> str:
    """Where and what, on one line: PyYAML's own text spans lines and names "<unicode string>"."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(error).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}."


def _file_error(path: Path, message: str) -> SettingsError:
    return SettingsError([Problem(str(path), NO_VALUE, message, config_key=False)], where="reading the stack file")


def load_stack(stack: str, stacks_dir: Path | None = None) -> Settings:
    """Validated settings of a stack, from its file, exactly as the Pulumi program parses them;
    StackFileError when the file is missing, unreadable or holds invalid config."""
    path = stack_file(stack, stacks_dir)
    if not path.is_file():
        folder = path.parent
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in folder.glob("Pulumi.*.yaml"))
        if not folder.is_dir():
            others = f"there is no folder {_shown_path(folder)}"
        elif known:
            others = f"stacks here: {', '.join(known)}"
        else:
            others = f"{_shown_path(folder)} holds no Pulumi.<stack>.yaml file"
        message = f"has no file {_shown_path(path)}; {others}"
        raise StackFileError([Problem(f"stack {stack!r}", NO_VALUE, message, config_key=False)],
                             f"stack {stack!r} {message}")
    try:
        raw, secret_keys = read_stack_config(path)
    except SettingsError as error:
        problem = error.problems[0]
        raise StackFileError(list(error.problems), f"stack {stack!r}: {_shown_path(path)} {problem.message}") from None
    try:
        return parse_settings(raw, stack=stack, secret_keys=secret_keys)
    except SettingsError as error:
        where = f"stack {stack!r} ({_shown_path(path)})"
        lead = f"{where}:" if len(error.problems) == 1 else f"{where} has {len(error.problems)} problems:"
        raise StackFileError(list(error.problems), problem_lines(lead, error.problems)) from None
