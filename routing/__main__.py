"""`python -m routing COMMAND`: predict, calibrate, verify, serve and demo the endpoint picker's routing.

Each command's module registers its own subcommand with `add_parser(subparsers)`, setting
`func`: a callable taking the parsed arguments and returning the exit status.
"""

from __future__ import annotations

import argparse
import sys

from routing.lab import demo
from routing.live import calibrate, serve, verify
from routing.simulation import predict

COMMANDS = (predict, calibrate, verify, serve, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m routing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
