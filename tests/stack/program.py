"""The program under the dry run's mocks (dryrun/), with what only tests add: the region every stack
file sets, and the repo's stand-in clone of AWS's dependencies chart wherever a test names none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dryrun import runner
from dryrun.mocks import HYPERPOD_ARN, CloudMocks, NoResourceReferencesMonitor, Registered
from dryrun.runner import PROGRAM, PROJECT, ROOT, ProgramRun, comparable, stack_config

__all__ = ["HYPERPOD_ARN", "CloudMocks", "NoResourceReferencesMonitor", "Registered", "PROGRAM", "PROJECT", "ROOT",
           "ProgramRun", "comparable", "stack_config", "DEPENDENCIES_CLONE", "with_test_defaults", "run_program"]

# A stand-in clone of aws/sagemaker-hyperpod-cli, used wherever a test does not name its own.
DEPENDENCIES_CLONE = ROOT / "tests" / "fixtures" / "sagemaker-hyperpod-cli"


def with_test_defaults(config: dict[str, Any], dependencies_chart: Path | None) -> dict[str, Any]:
    """The region every stack file sets, and (unless None) the dependencies chart clone to use
    in place of whatever path the config names: tests never have AWS's real clone."""
    config = {"aws:region": "us-west-2", **config}
    hyperpod = config.get("hyperpod")
    if isinstance(hyperpod, str):
        hyperpod = json.loads(hyperpod)
    existing = str((hyperpod or {}).get("existing", config.get("hyperpod.existing", "false"))).lower() == "true"
    if dependencies_chart is None or config.get("platform") == "eks" or existing:
        return config
    if isinstance(hyperpod, dict):
        config["hyperpod"] = {**hyperpod, "dependenciesChart": str(dependencies_chart)}
    else:
        config["hyperpod.dependenciesChart"] = str(dependencies_chart)
    return config


def run_program(config: dict[str, Any], *, stack: str = "test", secret_keys: list[str] | None = None,
                preview: bool = False, dependencies_chart: Path | None = DEPENDENCIES_CLONE) -> ProgramRun:
    """Evaluate __main__.py once under fresh mocks; `config` keys are without the namespace."""
    # CloudMocks is looked up here at each call: a test swaps it to see what a refused run registered.
    return runner.run_program(with_test_defaults(config, dependencies_chart), stack=stack, secret_keys=secret_keys,
                              preview=preview, mocks=CloudMocks())
