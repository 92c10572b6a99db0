"""`python -m dryrun.charts --stack NAME`: render every Helm chart the stack installs with `helm
template`, at the version the program pins and with exactly the values it passes.

Under mocks a chart is only its inputs; what the chart makes of them (a template that fails on a
value, a key it ignores, a certificate it generates at render time) shows only when it renders.
The pull-request workflow runs this for every stack file, where the charts' registries are
reachable; `--chart RELEASE=DIR` renders a local copy of a chart instead (air-gapped machines).
Values come from the program run under the stand-in mocks, so what AWS would only know after the
apply (an ARN, a VPC id) is a plausible placeholder, never `<known after apply>`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml
from pulumi.errors import RunError

from settings import SettingsError
from settings.entry_point import exit_with

from .runner import ROOT, UsageError, problem_text, run_program, stack_config, stack_path

CHART_TYPE = "kubernetes:helm.sh/v4:Chart"


@dataclass(frozen=True)
class ChartRelease:
    """One chart the program declares, as `helm template` takes it."""

    resource: str  # the Pulumi resource's name
    release: str
    chart: str
    version: str | None
    repo: str | None
    namespace: str | None
    values: dict[str, Any]
    value_files: tuple[str, ...]
    dependency_update: bool

    @classmethod
    def of(cls, name: str, inputs: dict[str, Any]) -> ChartRelease:
        files = tuple(getattr(asset, "path", str(asset)) for asset in inputs.get("valueYamlFiles") or ())
        return cls(resource=name, release=inputs.get("name") or name, chart=inputs["chart"],
                   version=inputs.get("version"), repo=(inputs.get("repositoryOpts") or {}).get("repo"),
                   namespace=inputs.get("namespace"), values=inputs.get("values") or {}, value_files=files,
                   dependency_update=bool(inputs.get("dependencyUpdate")))

    def template_command(self, helm: str, values_file: Path, chart: str | None = None) -> list[str]:
        """`helm template` as Pulumi's Chart renders it: the release, its namespace, the chart's
        own value files first, then the program's values over them."""
        command = [helm, "template", self.release, chart or self.chart]
        if chart is None and self.version:
            command += ["--version", self.version]
        if chart is None and self.repo:
            command += ["--repo", self.repo]
        if self.namespace:
            command += ["--namespace", self.namespace]
        for path in self.value_files:
            command += ["--values", str(ROOT / path)]
        return command + ["--values", str(values_file)]


def declared_charts(stack: str, stacks_dir: Path | None = None) -> list[ChartRelease]:
    """Every Helm chart the program declares for the stack, as it declares it; UsageError, in one
    line, when there is no such stack or the program refuses its config."""
    stack_path(stack, stacks_dir)
    try:
        config, secrets = stack_config(stack, stacks_dir)
        run = run_program(config, stack=stack, secret_keys=secrets)
    except (SettingsError, RunError) as error:
        raise UsageError(f"stack {stack}: {problem_text(str(error))}") from None
    return [ChartRelease.of(resource.name, resource.inputs) for resource in run.of_type(CHART_TYPE)]


def render(chart: ChartRelease, helm: str, work: Path, local_chart: str | None) -> subprocess.CompletedProcess:
    values_file = work / f"{chart.resource}.values.yaml"
    values_file.write_text(yaml.safe_dump(chart.values, sort_keys=True))
    source = local_chart or (str(ROOT / chart.chart) if chart.dependency_update else None)
    if source is not None:
        # A chart on disk gets its dependencies as Pulumi gets them for dependencyUpdate (a chart
        # from a registry comes with them): `helm dependency update`, in place.
        updated = subprocess.run([helm, "dependency", "update", source], capture_output=True, text=True)
        if updated.returncode != 0:
            return updated
    return subprocess.run(chart.template_command(helm, values_file, source), capture_output=True, text=True)


def _local_chart(text: str) -> tuple[str, str]:
    release, sep, path = text.partition("=")
    if not sep or not release or not path:
        raise argparse.ArgumentTypeError(f"--chart {text!r}: write RELEASE=DIR, e.g. --chart qwen=./llm-d-router-gateway")
    if not Path(path).is_dir():
        raise argparse.ArgumentTypeError(f"--chart {text!r}: {path} is not a directory holding a chart")
    return release, path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dryrun.charts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", required=True, help="stack to read (stacks/Pulumi.<stack>.yaml)")
    parser.add_argument("--stacks-dir", type=Path, help="where the stack files are (default: stacks/)")
    parser.add_argument("--helm", default="helm", help="the helm binary (default: helm on PATH)")
    parser.add_argument("--chart", type=_local_chart, action="append", default=[], metavar="RELEASE=DIR",
                        help="render this release from a local copy of its chart instead of its registry")
    parser.add_argument("--list", action="store_true", help="list the charts with their versions, render nothing")
    args = parser.parse_args(argv)
    try:
        charts = declared_charts(args.stack, args.stacks_dir)
    except UsageError as error:
        print(f"dryrun.charts: {error}", file=sys.stderr)
        return 2
    if args.list:
        for chart in charts:
            print(f"{chart.release}\t{chart.chart}\t{chart.version or '-'}\t{chart.repo or '-'}")
        return 0
    if not charts:
        print(f"stack {args.stack} installs no Helm chart")
        return 0
    if shutil.which(args.helm) is None:
        print(f"dryrun.charts: --helm {args.helm}: not found; install helm (the workflow pins it) or pass its path",
              file=sys.stderr)
        return 2
    local = dict(args.chart)
    unknown = sorted(set(local) - {chart.release for chart in charts})
    if unknown:
        print(f"dryrun.charts: --chart {unknown[0]}: stack {args.stack} installs no release of that name; its "
              f"releases: {', '.join(chart.release for chart in charts)}", file=sys.stderr)
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for number, chart in enumerate(charts, start=1):
            result = render(chart, args.helm, Path(work), local.get(chart.release))
            where = f" from {local[chart.release]}" if chart.release in local else ""
            label = f"[{number}/{len(charts)}] {chart.release} ({chart.chart} {chart.version or 'local'}{where})"
            if result.returncode == 0:
                objects = sum(1 for document in yaml.safe_load_all(result.stdout) if document)
                print(f"{label}: rendered {objects} objects")
            else:
                failed += 1
                print(f"{label}: FAILED\n{result.stderr.strip()}", file=sys.stderr)
    if failed:
        print(f"{failed} of {len(charts)} charts failed to render for stack {args.stack}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    exit_with(main)
