"""Checks registered resources' inputs against the installed provider SDKs' own input types.

Mocks accept any input, so a misspelled property would only fail in a real `pulumi up`. Every
fact used here comes from the SDKs: the type-token registry each SDK fills at import
(`_utilities.register`), the `@pulumi.type_token` on each resource class, the `Args` class of its
`__init__` overload, the `@pulumi.input_type` classes with their `pulumi.getter(name=...)` wire
names, their `__init__` signatures (required inputs) and type hints (nested types, `Enum`s, scalars).

Inputs are checked as the engine receives them (camelCase, after serialisation), so:
- numbers are floats even where the SDK says int: an int must be integral, not of type int;
- a secret arrives wrapped and is checked unwrapped; an unknown value (`pulumi.output.Unknown`
  in a preview) or an Output matches any type;
- a resource passed as an input arrives as a URN or id (no resource references) or as a Resource;
  an asset or archive arrives as a pulumi.Asset or pulumi.Archive;
- a provider's config values that are not strings arrive as JSON text and are checked decoded.
"""

from __future__ import annotations

import difflib
import enum
import functools
import importlib
import importlib.util
import inspect
import json
import pkgutil
import sys
import types
import typing
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pulumi
from pulumi import _types as pulumi_types
from pulumi.output import Unknown
from pulumi.runtime import rpc

KUBERNETES_PACKAGE = "kubernetes"

SKIP_PROJECT_COMPONENT = ("a component of this project: its inputs are Python arguments, "
                          "not a provider schema; the resources it registers are checked instead")
SKIP_CUSTOM_RESOURCE = ("a Kubernetes custom resource (apiVersion not in pulumi_kubernetes): "
                        "its spec is free-form in the SDK")
KUBERNETES_OBJECT_SCOPE = ("Kubernetes object: top-level input names only, its body is validated "
                           "against the Kubernetes OpenAPI schemas elsewhere")
FULL_SCOPE = "all inputs: names, required inputs, nested types, enum values and scalar kinds"
PROVIDER_PREFIX = "pulumi:providers:"


class Registration(Protocol):
    type: str
    name: str
    inputs: dict[str, Any]


@dataclass(frozen=True)
class Problem:
    type: str
    name: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.type} {self.name!r}: {self.path or '(inputs)'}: {self.message}"


@dataclass(frozen=True)
class Skipped:
    type: str
    name: str
    rule: str


@dataclass(frozen=True)
class Checked:
    type: str
    name: str
    scope: str


@dataclass(frozen=True)
class InputsReport:
    problems: tuple[Problem, ...]
    skipped: tuple[Skipped, ...]
    checked: tuple[Checked, ...]

    def format(self) -> str:
        lines = [f"{len(self.problems)} problem(s) in the inputs of {len(self.checked)} checked resource(s):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class InputSchema:
    """One `@pulumi.input_type` class: wire name -> type hint, and the wire names it requires."""
    cls: type
    fields: dict[str, Any]
    required: frozenset[str]


def check_registrations(registrations: Iterable[Registration], *, project: str) -> InputsReport:
    """Checks every registration; `project` is the Pulumi project name, whose components are skipped."""
    problems: list[Problem] = []
    skipped: list[Skipped] = []
    checked: list[Checked] = []
    for registration in registrations:
        token, name = registration.type, registration.name
        try:
            package, module, _ = _split_token(token)
            if package == project:
                skipped.append(Skipped(token, name, SKIP_PROJECT_COMPONENT))
                continue
            if package == KUBERNETES_PACKAGE and _resource_module(package, module) is None:
                skipped.append(Skipped(token, name, SKIP_CUSTOM_RESOURCE))
                continue
            schema = resource_inputs(token)
        except LookupError as error:
            problems.append(Problem(token, name, "", str(error)))
            continue
        top_level_only = package == KUBERNETES_PACKAGE and {"apiVersion", "kind"} <= schema.fields.keys()
        checked.append(Checked(token, name, KUBERNETES_OBJECT_SCOPE if top_level_only else FULL_SCOPE))
        provider = token.startswith(PROVIDER_PREFIX)
        inputs = _decode_provider_config(registration.inputs, schema) if provider else registration.inputs
        found = _check_object(inputs, schema, "", nested=not top_level_only)
        problems += [Problem(token, name, path, message) for path, message in found]
    return InputsReport(tuple(problems), tuple(skipped), tuple(checked))


@functools.cache
def resource_inputs(token: str) -> InputSchema:
    """The input schema of the SDK resource class registered for `token`; LookupError if none is."""
    cls = resource_class(token)
    hints = [typing.get_type_hints(o, globalns=_namespace(cls), localns=_HINT_LOCALS)
             for o in typing.get_overloads(cls.__init__)]
    args_types = [a for h in hints if "args" in h for a in _alternatives(h["args"]) if pulumi_types.is_input_type(a)]
    if len(args_types) != 1:
        raise LookupError(f"{cls.__module__}.{cls.__name__} has no single Args input type in its __init__ "
                          f"overloads (found {args_types}); the checker cannot read its inputs")
    return input_schema(args_types[0])


def resource_class(token: str) -> type:
    """The SDK class registered for `token` (resource, component or provider); LookupError if none is."""
    package, module, name = _split_token(token)
    if token.startswith(PROVIDER_PREFIX):
        sdk = _sdk_module(name, token)
        info = getattr(rpc.get_resource_package(name, ""), "pkg_info", None)
        where = (info["fqn"], info["class"]) if info and info.get("token") == token else None
    else:
        sdk = _sdk_module(package, token)
        info = getattr(_resource_module(package, module), "mod_info", None)
        where = (info["fqn"], info["classes"][token]) if info and token in info["classes"] else None
    if where is None:
        raise LookupError(f"{sdk.__name__} {_sdk_version(sdk)} registers no resource type {token!r}: "
                          "check the type token (or the class used to create it) against the pinned SDK")
    cls = getattr(importlib.import_module(where[0]), where[1])
    if pulumi.get_type_token(cls) != token:
        raise LookupError(f"{token!r} maps to {where[0]}.{where[1]}, whose type token is "
                          f"{pulumi.get_type_token(cls)!r}: the SDK's registry and classes disagree")
    return cls


@functools.cache
def input_schema(cls: type) -> InputSchema:
    python_to_wire = pulumi_types.input_type_py_to_pulumi_names(cls)
    fields = {wire: typing.get_type_hints(getattr(cls, python).fget, globalns=_namespace(cls),
                                          localns=_HINT_LOCALS)["return"]
              for python, wire in python_to_wire.items()}
    parameters = inspect.signature(cls.__init__).parameters.values()
    required = frozenset(python_to_wire[p.name] for p in parameters
                         if p.default is inspect.Parameter.empty and p.name in python_to_wire)
    return InputSchema(cls, fields, required)


# Pulumi's Input[T] alias refers to 'Output[T]' by name; T's value does not matter here.
_HINT_LOCALS = {"Output": pulumi.Output, "T": Any}


def _namespace(cls: type) -> dict[str, Any]:
    return vars(sys.modules[cls.__module__])


def _split_token(token: str) -> tuple[str, str, str]:
    parts = token.split(":")
    if len(parts) != 3:
        raise LookupError(f"{token!r} is not a type token package:module:Type")
    return parts[0], parts[1], parts[2]


def _resource_module(package: str, module: str) -> rpc.ResourceModule | None:
    """The SDK's registry entry for one module of a package (None if the SDK has no such module)."""
    _sdk_module(package, f"{package}:{module}")
    return rpc.get_resource_module(package, module, "")


@functools.cache
def _installed_sdks() -> dict[str, str]:
    """Pulumi package name -> Python module, from each installed SDK's pulumi-plugin.json."""
    sdks = {}
    for module in pkgutil.iter_modules():
        if not module.name.startswith("pulumi_") or not module.ispkg:
            continue
        spec = importlib.util.find_spec(module.name)
        plugin = Path(next(iter(spec.submodule_search_locations))) / "pulumi-plugin.json"
        if plugin.is_file():
            sdks[json.loads(plugin.read_text())["name"]] = module.name
    return sdks


def _sdk_module(package: str, token: str) -> types.ModuleType:
    sdks = _installed_sdks()
    if package not in sdks:
        raise LookupError(f"no installed Pulumi SDK provides package {package!r} (for {token!r}); "
                          f"installed: {', '.join(sorted(sdks))}. Pin its SDK in requirements.txt")
    # Importing the SDK fills pulumi's type-token registry (its _utilities.register call).
    return importlib.import_module(sdks[package])


def _sdk_version(sdk: types.ModuleType) -> str:
    return json.loads((Path(sdk.__file__).parent / "pulumi-plugin.json").read_text())["version"]


def _decode_provider_config(inputs: dict[str, Any], schema: InputSchema) -> dict[str, Any]:
    """A provider's inputs with its JSON-encoded values decoded: a provider SDK sends every config
    value that is not a string as JSON text (`pulumi.runtime.to_json` in its _internal_init)."""
    decoded = dict(inputs)
    for key, value in inputs.items():
        text, known = _unwrap(value)
        if known and isinstance(text, str) and key in schema.fields and str not in _alternatives(schema.fields[key]):
            try:
                decoded[key] = json.loads(text)
            except ValueError:
                pass  # Not JSON: checked as the string it is.
    return decoded


def _check_object(value: dict[str, Any], schema: InputSchema, path: str, *, nested: bool) -> list[tuple[str, str]]:
    found = []
    for key, item in value.items():
        if key not in schema.fields:
            found.append((_join(path, key), _unknown_key_message(key, schema)))
        elif nested:
            found += _check_value(item, schema.fields[key], _join(path, key))
    for key in sorted(schema.required - {k for k, v in value.items() if v is not None}):
        found.append((_join(path, key), f"missing required input {key!r} of {schema.cls.__name__}"))
    return found


def _unknown_key_message(key: str, schema: InputSchema) -> str:
    close = difflib.get_close_matches(key, schema.fields, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"unknown input {key!r}{hint}; {schema.cls.__module__}.{schema.cls.__name__} takes: "
            f"{', '.join(sorted(schema.fields))}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_value(value: Any, hint: Any, path: str) -> list[tuple[str, str]]:
    value, known = _unwrap(value)
    if not known or value is None:
        return []
    alternatives = _alternatives(hint)
    if not alternatives or Any in alternatives:
        return []
    candidates = [a for a in alternatives if _shape_matches(a, value)]
    if not candidates:
        return [(path, f"expected {' or '.join(_describe(a) for a in alternatives)}, got {_describe_value(value)}")]
    # Accepted if any alternative accepts it; otherwise the closest alternative's problems.
    return min((_check_against(value, a, path) for a in candidates), key=len)


def _unwrap(value: Any) -> tuple[Any, bool]:
    """The plain value inside a secret as the mock monitor deserialises it, and whether it is known."""
    if isinstance(value, (Unknown, pulumi.Output)):
        return None, False
    if rpc.is_rpc_secret(value):
        return _unwrap(rpc.unwrap_rpc_secret(value))
    return value, True


def _alternatives(hint: Any) -> list[Any]:
    """The types a hint accepts, without the Optional/Awaitable/Output wrapping of pulumi.Input."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return [a for arg in typing.get_args(hint) for a in _alternatives(arg)]
    if hint is type(None) or hint is pulumi.Output or origin in (pulumi.Output, Awaitable):
        return []
    return [hint]


def _item_type(hint: Any, container: type) -> Any:
    """The element type of a Sequence hint or the value type of a Mapping hint; None for other hints."""
    return typing.get_args(hint)[-1] if typing.get_origin(hint) is container else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shape_matches(hint: Any, value: Any) -> bool:
    if typing.get_origin(hint) is typing.Literal:
        return True
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, str) or _is_number(value)
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):
        return _is_number(value)
    if hint is str:
        return isinstance(value, str)
    if _item_type(hint, Sequence) is not None:
        return isinstance(value, list)
    if _item_type(hint, Mapping) is not None or (isinstance(hint, type) and pulumi_types.is_input_type(hint)):
        return isinstance(value, dict)
    if isinstance(hint, type) and issubclass(hint, pulumi.Resource):
        # Without resource references the SDK sends a URN (component) or an id (custom resource).
        return isinstance(value, (str, pulumi.Resource))
    if isinstance(hint, type) and issubclass(hint, (pulumi.Asset, pulumi.Archive)):
        return isinstance(value, hint)
    raise TypeError(f"the input checker does not understand the SDK type hint {hint!r}; extend _shape_matches")


def _check_against(value: Any, hint: Any, path: str) -> list[tuple[str, str]]:
    if typing.get_origin(hint) is typing.Literal:
        allowed = typing.get_args(hint)
        return [] if value in allowed else [(path, f"{value!r} is not one of {', '.join(map(repr, allowed))}")]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        allowed = [member.value for member in hint]
        return [] if value in allowed else [
            (path, f"{value!r} is not a value of {hint.__name__}: {', '.join(map(repr, allowed))}")]
    if hint is int and not float(value).is_integer():
        return [(path, f"expected an integer, got {value!r}")]
    if (item := _item_type(hint, Sequence)) is not None:
        return [problem for i, element in enumerate(value) for problem in _check_value(element, item, f"{path}[{i}]")]
    if (item := _item_type(hint, Mapping)) is not None:
        return [problem for key, element in value.items() for problem in _check_value(element, item, f"{path}[{key!r}]")]
    if isinstance(hint, type) and pulumi_types.is_input_type(hint):
        return _check_object(value, input_schema(hint), path, nested=True)
    return []


def _describe(hint: Any) -> str:
    if (item := _item_type(hint, Sequence)) is not None:
        return f"a list of {' or '.join(_describe(a) for a in _alternatives(item)) or 'anything'}"
    if (item := _item_type(hint, Mapping)) is not None:
        return f"a map of {' or '.join(_describe(a) for a in _alternatives(item)) or 'anything'}"
    if isinstance(hint, type) and issubclass(hint, pulumi.Resource):
        return f"a {hint.__name__} resource"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"a {hint.__name__} ({', '.join(repr(m.value) for m in hint)})"
    if isinstance(hint, type) and pulumi_types.is_input_type(hint):
        return f"an object ({hint.__name__})"
    return hint.__name__ if isinstance(hint, type) else repr(hint)


def _describe_value(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (str, int, float, bool)):
        return f"{type(value).__name__} {value!r}"
    return f"a {type(value).__name__}"
