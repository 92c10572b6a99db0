"""Command-line pieces shared by `predict`, `verify` and `serve`: one parser per kind of value,
and one way to resolve `--stack/--model/--stacks-dir` to a model entry.

argparse `type=` functions raise ArgumentTypeError (argparse then exits with status 2 and
the message); `load_stack_model` and `unique_named_urls` raise OptionError, which each
command prints with its own prefix before exiting with status 2.
"""

from __future__ import annotations

import argparse
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from settings import ModelSettings, Settings, SettingsError, load_stack, parse_weight_overrides
from settings.errors import problem_lines
from settings.model import ROUTING_RECIPES
from settings.picker import endpoint_picker_config
from settings.picker_config import STICKY_PARAMETERS
from settings.reader import did_you_mean

URL_SCHEMES = ("http", "https")


def http_url(option: str, example: str = "http://127.0.0.1:8080") -> Callable[[str], str]:
    """An argparse type: an http:// or https:// URL with a host, else the option, the value and the fix."""

    def parse(text: str) -> str:
        problem = url_problem(text)
        if problem:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: {problem}, e.g. {option} {example}")
        return text

    return parse


def url_problem(text: str) -> str | None:
    """Why `text` is not a usable http(s) base URL, or None."""
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as error:
        return f"not a valid URL ({error})"
    if parts.scheme.lower() not in URL_SCHEMES:
        scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        return f"{scheme}; the gateway and vLLM speak http:// or https://"
    if not parts.hostname:
        return "no host in the URL"
    return None


def named_url(option: str) -> Callable[[str], tuple[str, str]]:
    """An argparse type for NAME=URL (e.g. --pod-url, --backend)."""
    example = f"{option} pod-a=http://127.0.0.1:18001"

    def parse(text: str) -> tuple[str, str]:
        name, sep, url = text.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: expected NAME=URL, e.g. {example}")
        problem = url_problem(url)
        if problem:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: expected NAME=URL with an http:// or https:// "
                                             f"URL ({problem}), e.g. {example}")
        return name, url

    return parse


def port_number(option: str) -> Callable[[str], int]:
    """An argparse type: a TCP port, 1..65535."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not 1 <= value <= 65535:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: a port is a whole number from 1 to 65535, "
                                             f"e.g. {option} 8000")
        return value

    return parse


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_number(text: str, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of {unit}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    return _positive_number(text, "seconds")


def nonnegative_seconds(text: str) -> float:
    """An argparse type: a number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds, 0 or more")
    return value


def positive_rate(text: str) -> float:
    """An argparse type: requests per second, above 0."""
    return _positive_number(text, "requests per second")


def weights_option(text: str) -> dict[str, int]:
    """An argparse type for --weights NAME=N,...: the weights it names, else every problem with it."""
    try:
        return parse_weight_overrides(text, key="--weights")
    except SettingsError as error:
        several = len(error.problems) > 1
        raise argparse.ArgumentTypeError(problem_lines(f"{len(error.problems)} problems:" if several else "",
                                                       error.problems)) from None


def routing_option(text: str) -> tuple[str, dict[str, int | float]]:
    """An argparse type for --routing RECIPE[,NAME=VALUE,...]: `weights`, or `sticky` with its
    filter's parameters by upstream's names, as models[].routing sets them in a stack."""
    example = "e.g. --routing sticky or --routing sticky,maxTTFTPenaltyMs=5000,peakPrefillThroughput=4000"
    recipe, *pairs = (part.strip() for part in text.split(","))
    if recipe not in ROUTING_RECIPES:
        raise argparse.ArgumentTypeError(f"--routing {text!r}: starts with the recipe, one of "
                                         f"{', '.join(ROUTING_RECIPES)}; {example}")
    parameters: dict[str, int | float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if name not in STICKY_PARAMETERS:
            raise argparse.ArgumentTypeError(f"--routing {pair!r}: not a parameter of the sticky recipe."
                                             f"{did_you_mean(name, STICKY_PARAMETERS)} Its parameters: "
                                             f"{', '.join(STICKY_PARAMETERS)}; {example}")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not sep or number != number or number in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"--routing {pair!r}: write NAME=NUMBER, {example}")
        parameters[name] = int(number) if number.is_integer() else number
    if parameters and recipe != "sticky":
        raise argparse.ArgumentTypeError(f"--routing {text!r}: parameters belong to the sticky recipe; {example}")
    return recipe, parameters


class OptionError(ValueError):
    """Options that do not name something usable (a stack's model entry, distinct pods), with the fix."""


def unique_named_urls(option: str, pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The NAME=URL pairs a repeated `option` collected, by name; OptionError when a name repeats."""
    urls = dict(pairs)
    if len(urls) != len(pairs):
        raise OptionError(f"{option} names must be unique, got {', '.join(name for name, _ in pairs)}")
    return urls


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model and --stacks-dir, the same for every command (each adds --stack itself, since
    where --stack sits among the command's other choices differs)."""
    parser.add_argument("--model", help="with --stack: the model entry by name, e.g. qwen-small "
                                        "(default: the stack's only model)")
    parser.add_argument("--stacks-dir", type=Path, metavar="DIR",
                        help="with --stack: where the stack files are (default: the repo's stacks/)")


@dataclass(frozen=True)
class StackModel:
    """One model entry of one stack, and the stack's settings."""

    stack: str
    settings: Settings
    model: ModelSettings

    @property
    def where(self) -> str:
        return f"model {self.model.name!r} in stack {self.stack!r}"

    def picker_config(self, instead: str) -> dict:
        """The EndpointPickerConfig the stack runs for this model (rendered from its weights, or
        the user's file), or OptionError when a ConfigMap in the cluster decides (`instead`
        says what to pass then)."""
        config = endpoint_picker_config(self.model)
        if config is None:
            config_map = self.model.picker_config_map
            raise OptionError(f"{self.where} uses the picker ConfigMap {config_map.name} (key {config_map.key}) "
                              "that is already in the cluster, so its configuration is not in the stack; set "
                              f"models[].pickerConfigMap.file to it. {instead}")
        return config

    def weights(self, instead: str) -> dict[str, int]:
        """The weights the stack gives this model, or OptionError when a custom picker
        ConfigMap configures it instead (`instead` says what to pass then)."""
        if self.model.effective_weights is None:
            config_map = self.model.picker_config_map
            raise OptionError(f"{self.where} uses a custom picker ConfigMap ({config_map.name}, key "
                              f"{config_map.key}); only the weights field is modelled. {instead}")
        return dict(self.model.effective_weights)


def load_stack_model(stack: str | None, model: str | None, stacks_dir: Path | None) -> StackModel | None:
    """The model entry `--stack` and `--model` name; None when neither --stack nor anything
    that needs it was given.

    Rules, the same for predict, verify and serve: --model and --stacks-dir need --stack;
    --stack is a stack's short name (stacks/Pulumi.<stack>.yaml); --model may be left out
    when the stack has exactly one model.
    """
    if stack is None:
        for option, value in (("--model", model), ("--stacks-dir", stacks_dir)):
            if value is not None:
                raise OptionError(f"{option} {value}: needs --stack, e.g. --stack dev --model qwen-small")
        return None
    if not stack or "/" in stack or "\\" in stack or stack in (".", ".."):
        raise OptionError(f"--stack {stack!r}: give the stack's short name, the <stack> of "
                          "stacks/Pulumi.<stack>.yaml (e.g. --stack dev), not a path or an org/project/stack "
                          "name; point --stacks-dir at another directory of stack files")
    try:
        settings = load_stack(stack, stacks_dir)
        if model is None:
            if len(settings.models) != 1:
                names = ", ".join(m.name for m in settings.models)
                raise OptionError(f"--model: stack {stack!r} has {len(settings.models)} models ({names}); "
                                  f"name one, e.g. --model {settings.models[0].name}")
            entry = settings.models[0]
        else:
            entry = settings.model_named(model)
    except SettingsError as error:
        raise OptionError(str(error)) from None
    except LookupError as error:
        raise OptionError(f"--model {model}: {error}") from None
    return StackModel(stack, settings, entry)
