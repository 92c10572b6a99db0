"""`python -m settings clone-hyperpod-chart [DIR]`: AWS's HyperPod dependencies chart at the pinned
commit, where `hyperpod.dependenciesChart` expects it (the PR workflow runs the same command)."""

import sys

from .entry_point import exit_with
from .hyperpod import clone_dependencies_chart
from .model import HyperPodSettings, default_of

DEFAULT_DIR = default_of(HyperPodSettings, "dependencies_chart")
USAGE = f"usage: python -m settings clone-hyperpod-chart [DIR]   (DIR defaults to {DEFAULT_DIR})"


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "clone-hyperpod-chart" or len(argv) > 2:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        print(clone_dependencies_chart(argv[1] if len(argv) == 2 else DEFAULT_DIR))
    except RuntimeError as error:
        print(f"clone-hyperpod-chart: {error}", file=sys.stderr)
        return 1
    return 0


exit_with(lambda: main(sys.argv[1:]))
