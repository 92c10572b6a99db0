"""Predict, measure and prove how the endpoint picker routes requests across model replicas.

No cloud needed for predict, serve and demo; verify and calibrate read a live stack's pods.
Try `./demo.sh` first (it sets up the venvs, then runs `demo`); `COMMAND --help` tells more.
"""

from __future__ import annotations

import argparse

from routing.lab import demo, servers, trace
from routing.live import calibrate, serve, verify
from routing.simulation import predict
from settings.entry_point import exit_with

COMMANDS = (predict, verify, serve, calibrate, demo, servers, trace)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m routing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each command's module adds its own subcommand, whose `func` runs it and returns the exit status.
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    exit_with(main)
