"""`python -m dryrun --stack NAME [--set KEY=VALUE ...] [--unset KEY ...] [--json] [--show TEXT]`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pulumi.errors import RunError

from settings import SettingsError
from settings.entry_point import exit_with

from . import __doc__ as PACKAGE_DOC
from .mocks import PreviewMocks
from .overrides import Override, OverrideError, apply_overrides
from .report import LEGEND, Snapshot, change_report, compare, listing, snapshot
from .runner import UsageError, problem_text, run_program, stack_config, stack_path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dryrun", description=PACKAGE_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", required=True,
                        help="the stack's short name: stacks/Pulumi.<stack>.yaml, e.g. dev")
    parser.add_argument("--stacks-dir", type=Path, metavar="DIR",
                        help="where the stack files are (default: the repo's stacks/)")
    parser.add_argument("--set", action=InOrder, default=[], metavar="KEY=VALUE", dest="overrides",
                        help="a config change to preview (repeatable): a flat key as `pulumi config set` stores it "
                             "(weights.prefix=0) or, inside an object or list of the stack file, a path as `pulumi "
                             "config set --path` does ('models[1].replicas=2'); prints only what the change changes")
    parser.add_argument("--unset", action=InOrder, default=[], metavar="KEY", dest="overrides",
                        help="a key to remove (repeatable), as `pulumi config rm` (with --path inside an object or "
                             "list) would: same keys as --set, e.g. 'models[1].replicas'; changes apply in the "
                             "order given")
    parser.add_argument("--json", action="store_true", help="print JSON for a script instead of YAML for a person")
    parser.add_argument("--show", metavar="TEXT",
                        help="only the resources whose type or Kubernetes kind contains TEXT, e.g. Deployment, "
                             "aws:iam, helm")
    return parser


class InOrder(argparse.Action):
    """--set and --unset in one list, in the order given: a later change applies to an earlier one's result."""

    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), (option_string, value)])


def shown_path(path: Path) -> str:
    """The stack file as the reader would name it: relative to here when it is below here."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def dry_run(stack: str, config: dict[str, str], secret_keys: list[str], what: str) -> Snapshot:
    """The program run as `pulumi preview` would run it, under mocks; UsageError when it refuses the config."""
    try:
        run = run_program(config, stack=stack, secret_keys=secret_keys, preview=True,
                          mocks=PreviewMocks(config.get("aws:region", "")))
    except RunError as error:
        raise UsageError(f"{what}: {problem_text(str(error))}") from None
    return snapshot(run, secret_values(config, secret_keys))


def secret_values(config: dict[str, str], secret_keys: list[str]) -> list[str]:
    """Every secret config value as the program receives it, and the ciphertext inside a `secure:` one."""
    values = []
    for key in secret_keys:
        value = config.get(key, "")
        values.append(value)
        try:
            values.append(json.loads(value)["secure"])
        except (ValueError, TypeError, KeyError):
            pass
    return values


def render_listing(args: argparse.Namespace, where: str, snap: Snapshot) -> str:
    if args.json:
        return json.dumps({"stack": args.stack, "stackFile": where, "legend": LEGEND,
                           "resources": [e.as_json() for e in snap.shown(args.show)], "outputs": snap.outputs,
                           "warnings": list(snap.warnings)}, indent=2) + "\n"
    return listing(args.stack, where, snap, args.show)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        path = stack_path(args.stack, args.stacks_dir)
        overrides = [Override.parse(text) if option == "--set" else Override.removal(text)
                     for option, text in args.overrides]
        try:
            config, secret_keys = stack_config(args.stack, args.stacks_dir)
        except SettingsError as error:
            raise UsageError(problem_text(str(error))) from None
        changed_config, changed_secrets = apply_overrides(config, secret_keys, overrides)
        where = shown_path(path)
        if not overrides:
            print(render_listing(args, where, dry_run(args.stack, config, secret_keys, f"stack {args.stack}")), end="")
            return 0
        change_text = " ".join(map(str, overrides))
        # The changed stack first: a refused --set is reported before the stack as filed is run.
        after = dry_run(args.stack, changed_config, changed_secrets, f"stack {args.stack} with {change_text}")
        before = dry_run(args.stack, config, secret_keys, f"stack {args.stack} as filed (the diff's base)")
    except (UsageError, OverrideError) as error:
        print(f"dryrun: {error}", file=sys.stderr)
        return 2
    change = compare(before, after, args.show, (f"{where} as filed", f"with {change_text}"))
    if args.json:
        print(json.dumps({"stack": args.stack, "stackFile": where,
                          "set": [f"{o.key}={o.value}" for o in overrides if o.value is not None],
                          "unset": [o.key for o in overrides if o.value is None], "legend": LEGEND,
                          **change.as_json()}, indent=2))
    else:
        print(change_report(args.stack, where, change_text, change, args.show), end="")
    return 0


if __name__ == "__main__":
    exit_with(main)
