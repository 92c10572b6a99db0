"""Runs __main__.py under Pulumi's mocks and records what it registers, exports and logs."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml

from settings import NAMESPACE, read_stack_config, stack_file
from settings.errors import problem_lines

from .mocks import CloudMocks, Registered

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "__main__.py"
PROJECT = NAMESPACE


class UsageError(ValueError):
    """A user mistake (stack, --set, or config the program refuses); the message is one line per problem."""


def problem_text(message: str) -> str:
    """A settings error (a header, then `  - problem` lines) as the dry run prints it: one line per
    problem, a lone one on the header's line."""
    head, *problems = message.strip().splitlines()
    return problem_lines(head, [problem.strip().removeprefix("- ") for problem in problems])


def stack_path(stack: str, stacks_dir: Path | None) -> Path:
    if not stack or "/" in stack or "\\" in stack or stack in (".", ".."):
        raise UsageError(f"--stack {stack!r}: give the stack's short name, the <stack> of stacks/Pulumi.<stack>.yaml "
                         "(e.g. --stack dev); point --stacks-dir at another directory of stack files")
    path = stack_file(stack, stacks_dir)
    if not path.is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        raise UsageError(f"--stack {stack}: there is no stack file {path}; stacks there: {', '.join(known) or 'none'}")
    return path


@dataclass
class ProgramRun:
    resources: list[Registered]
    # Every export that resolved; one left unknown in a preview is missing here.
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)
    calls: list[tuple[str, dict]] = field(default_factory=list)
    exported: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.type == typ]

    def named(self, name: str) -> Registered:
        matches = [r for r in self.resources if r.name == name]
        assert len(matches) == 1, f"expected one resource named {name!r}, found {len(matches)}"
        return matches[0]

    def kubernetes_object(self, kind: str, name: str) -> dict[str, Any]:
        matches = [r.inputs for r in self.resources if r.inputs.get("kind") == kind
                   and r.inputs.get("metadata", {}).get("name") == name]
        assert len(matches) == 1, f"expected one {kind} {name!r}, found {len(matches)}"
        return matches[0]


def comparable(value: Any) -> Any:
    """Registered inputs as plain data: assets by their path (two FileAssets of one file differ as objects)."""
    return json.loads(json.dumps(value, default=lambda v: {"asset": getattr(v, "path", repr(v))}))


def stack_config(stack: str, stacks_dir: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """A stack file's config as the language host passes it: every value a string, objects as JSON.
    The project's keys, checked as settings reads them, and those of other namespaces (aws:region)."""
    path = stack_file(stack, stacks_dir)
    raw, secret_keys = read_stack_config(path)
    config = {f"{PROJECT}:{k}": v for k, v in raw.items()}
    secrets = [f"{PROJECT}:{k}" for k in secret_keys]
    for key, value in ((yaml.safe_load(path.read_text()) or {}).get("config") or {}).items():
        if ":" in key and not key.startswith(f"{PROJECT}:"):
            config[key] = value
            secrets += [key] if isinstance(value, dict) and set(value) == {"secure"} else []
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}, secrets


class _Warnings(logging.Handler):
    """What the program logs with pulumi.log.warn: the mocks' engine hands it to this logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        # Made directly, not by getLogger: nothing else in the process sees these records.
        self.logger = logging.Logger("inference-gateway-program")
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.WARNING:
            self.messages.append(record.getMessage())


def run_program(config: dict[str, Any], *, stack: str = "test", secret_keys: list[str] | None = None,
                preview: bool = False, mocks: CloudMocks | None = None) -> ProgramRun:
    """Evaluate __main__.py once under fresh mocks (CloudMocks unless given); `config` keys are
    without the project's namespace unless they name another (aws:region)."""
    mocks = mocks if mocks is not None else CloudMocks()
    warnings = _Warnings()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=preview, monitor=mocks.monitor,
                             logger=warnings.logger)
    pulumi.runtime.set_all_config(
        {f"{PROJECT}:{k}" if ":" not in k else k: v if isinstance(v, str) else json.dumps(v)
         for k, v in config.items()},
        [f"{PROJECT}:{k}" if ":" not in k else k for k in (secret_keys or [])])
    run = ProgramRun(mocks.resources, warnings=warnings.messages)
    exports: dict[str, Any] = {}

    @pulumi.runtime.test
    def evaluate():
        spec = importlib.util.spec_from_file_location("inference_gateway_program", PROGRAM)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        run.exported = list(exports)
        # One apply per export: in a preview an unknown export must not hold back the known ones.
        return pulumi.Output.all(*[pulumi.Output.from_input(value).apply(
            lambda resolved, name=name: run.outputs.__setitem__(name, resolved)) for name, value in exports.items()])

    original_export = pulumi.export
    pulumi.export = lambda name, value: exports.__setitem__(name, value)
    try:
        evaluate()
        run.secret_outputs = _secret_exports(exports)
    finally:
        pulumi.export = original_export
        pulumi.runtime.set_all_config({}, [])
    run.calls = mocks.calls
    return run


def _secret_exports(exports: dict[str, Any]) -> set[str]:
    outputs = {name: value for name, value in exports.items() if isinstance(value, pulumi.Output)}
    loop = asyncio.new_event_loop()
    try:
        return {name for name, value in outputs.items() if loop.run_until_complete(value.is_secret())}
    finally:
        loop.close()
