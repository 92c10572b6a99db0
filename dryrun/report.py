"""What a dry run shows: every registered resource in its section, the stack's outputs and the
program's warnings, as YAML for a person or JSON for a script; with --set, only what changed."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

import yaml
from pulumi.asset import Archive, Asset
from pulumi.output import Unknown
from pulumi.runtime.rpc import UNKNOWN as UNKNOWN_SENTINEL
from pulumi.runtime.rpc import _special_secret_sig as SECRET_SIG
from pulumi.runtime.rpc import _special_sig_key as SIG_KEY

from .runner import PROJECT, ProgramRun

SECRET = "[secret]"
KNOWN_AFTER_APPLY = "<known after apply>"
LEGEND = (f"{KNOWN_AFTER_APPLY} is a value only AWS can tell, on deployment (an id, an ARN, an endpoint, the account, "
          "an existing cluster's details), or one computed from such a value, as `pulumi preview` shows them; "
          f"{SECRET} is a secret, never shown.")

# Sections in the order they are printed: (key, heading, what a reader should know about them).
SECTIONS = (
    ("aws", "AWS resources", ""),
    ("helm", "Helm charts", ""),
    ("manifests", "Kubernetes manifests from files", "the objects in each file are read on deployment, not here"),
    ("kubernetes", "Kubernetes objects", ""),
    ("providers", "Providers", ""),
    ("components", "Components", "groups of the resources above; they create nothing themselves"),
    ("other", "Other resources", ""),
)


@dataclass(frozen=True)
class Entry:
    """One registered resource as shown: its section, a heading a person reads, its inputs as plain data."""

    section: str
    type: str
    name: str
    title: str
    inputs: Any
    details: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return self.type, self.name

    def as_json(self) -> dict[str, Any]:
        return {"section": self.section, "type": self.type, "name": self.name, "title": self.title,
                **self.details, "inputs": self.inputs}


@dataclass(frozen=True)
class Snapshot:
    """A run reduced to what is shown, secrets and unknowns already replaced."""

    entries: tuple[Entry, ...]
    outputs: dict[str, Any]
    warnings: tuple[str, ...]

    def shown(self, show: str | None) -> tuple[Entry, ...]:
        """The entries --show keeps: its text in the type or the Kubernetes kind, case-insensitive."""
        if not show:
            return self.entries
        wanted = show.lower()
        return tuple(e for e in self.entries
                     if wanted in e.type.lower() or wanted in str(e.details.get("kind", "")).lower())


def snapshot(run: ProgramRun, secret_values: list[str]) -> Snapshot:
    """`secret_values`: the stack's secret config values, hidden wherever the program copied one."""
    clean = _Cleaner(secret_values)
    entries = sorted((_entry(r.type, r.name, clean(r.inputs)) for r in run.resources),
                     key=lambda e: ([s for s, _, _ in SECTIONS].index(e.section), e.title, e.type, e.name))
    outputs = {name: SECRET if name in run.secret_outputs else
               clean(run.outputs[name]) if name in run.outputs else KNOWN_AFTER_APPLY for name in run.exported}
    return Snapshot(tuple(entries), outputs, tuple(clean(w) for w in run.warnings))


class _Cleaner:
    def __init__(self, secret_values: list[str]):
        self.secret_values = [v for v in secret_values if v]

    def __call__(self, value: Any) -> Any:
        if isinstance(value, Unknown) or value == UNKNOWN_SENTINEL:
            return KNOWN_AFTER_APPLY
        if isinstance(value, dict):
            if value.get(SIG_KEY) == SECRET_SIG:
                return SECRET
            return {key: self(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(item) for item in value]
        if isinstance(value, float) and value.is_integer():
            return int(value)  # numbers cross the mocks' protobuf as floats; the program gave whole ones
        if isinstance(value, str):
            for secret in self.secret_values:
                value = value.replace(secret, SECRET)
            return value
        if isinstance(value, (Asset, Archive)):
            # What it is and where it comes from: FileAsset: path/to/values.yaml.
            return {type(value).__name__: self(getattr(value, "path", None) or getattr(value, "uri", None)
                                               or getattr(value, "text", None))}
        return value


def _entry(typ: str, name: str, inputs: dict[str, Any]) -> Entry:
    resource = f"{typ} {name}"
    if typ.startswith("kubernetes:helm.sh/"):
        chart, version = inputs["chart"], inputs.get("version", "(no version pinned)")
        repo = (inputs.get("repositoryOpts") or {}).get("repo")
        source = repo or ("its OCI registry" if str(chart).startswith("oci://") else "a local path")
        namespace, release = inputs.get("namespace", "default"), inputs.get("name", name)
        return Entry("helm", typ, name, f"{chart} {version} from {source}, release {namespace}/{release}  ({resource})",
                     inputs, {"chart": chart, "version": inputs.get("version"), "repo": repo, "namespace": namespace,
                              "release": release})
    if typ.startswith("kubernetes:yaml/"):
        source = inputs.get("file") or ", ".join(inputs.get("files") or []) or "inline YAML"
        return Entry("manifests", typ, name, f"{source}  ({resource})", inputs, {"source": source})
    if typ.startswith("kubernetes:") and "kind" in inputs:
        metadata = inputs.get("metadata") or {}
        namespace, object_name = metadata.get("namespace"), metadata.get("name", KNOWN_AFTER_APPLY)
        where = f"{namespace}/{object_name}" if namespace else object_name
        return Entry("kubernetes", typ, name, f"{inputs['kind']} {where}  ({resource})", inputs,
                     {"kind": inputs["kind"], "namespace": namespace, "objectName": object_name})
    if typ.startswith(("aws:", "aws-native:", "eks:")):
        return Entry("aws", typ, name, resource, inputs, {})
    if typ.startswith("pulumi:providers:"):
        return Entry("providers", typ, name, resource, inputs, {})
    if typ.startswith(f"{PROJECT}:"):
        return Entry("components", typ, name, resource, inputs, {})
    return Entry("other", typ, name, resource, inputs, {})


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a rendered config file) as literal blocks, so they read and diff line by line;
    a JSON document in a string (an IAM policy) indented first."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    if text[:1] in "[{":
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        if isinstance(document, (dict, list)):
            text = json.dumps(document, indent=2)
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _represent_text)


def as_yaml(value: Any) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True, width=1000)


def _indented(text: str, by: str = "    ") -> list[str]:
    return [by + line if line else line for line in text.rstrip("\n").split("\n")]


def listing(stack: str, where: str, snap: Snapshot, show: str | None) -> str:
    """Everything the stack declares, section by section."""
    head = (f"Dry run of stack {stack} ({where}): the program run under Pulumi's mocks; nothing was deployed "
            "and AWS was not asked.")
    lines = [head, LEGEND, ""]
    lines += _warnings_block(snap.warnings)
    entries = snap.shown(show)
    for section, heading, note in SECTIONS:
        members = [e for e in entries if e.section == section]
        if not members:
            continue
        lines += [f"== {heading} ({len(members)}){': ' + note if note else ''}", ""]
        if section == "components":
            lines += [*(f"  {e.title}" for e in members), ""]
            continue
        for entry in members:
            lines += [f"  {entry.title}", *_body(entry), ""]
    if show and not entries:
        lines += [f"No resource's type or kind contains {show!r}.", ""]
    lines += ["== Stack outputs", ""] + _indented(_outputs_yaml(snap.outputs), "  ")
    return "\n".join(lines) + "\n"


def _body(entry: Entry, by: str = "    ") -> list[str]:
    """The inputs as YAML under the heading; nothing for a resource that takes none (a component)."""
    return _indented(as_yaml(entry.inputs), by) if entry.inputs else []


def _warnings_block(warnings: tuple[str, ...]) -> list[str]:
    if not warnings:
        return ["The program logs no warning.", ""]
    return [f"== Warnings the program logs ({len(warnings)})", "", *(f"  warning: {w}" for w in warnings), ""]


def _outputs_yaml(outputs: dict[str, Any]) -> str:
    return "".join(as_yaml({name: value}) for name, value in outputs.items())


@dataclass(frozen=True)
class Change:
    """What --set changes: resources added, removed and changed (each with its YAML diff), outputs and warnings."""

    added: tuple[Entry, ...]
    removed: tuple[Entry, ...]
    changed: tuple[tuple[Entry, str], ...]
    outputs: tuple[tuple[str, str], ...]
    warnings_added: tuple[str, ...]
    warnings_removed: tuple[str, ...]

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.outputs or self.warnings_added
                    or self.warnings_removed)

    def as_json(self) -> dict[str, Any]:
        return {"added": [e.as_json() for e in self.added], "removed": [e.as_json() for e in self.removed],
                "changed": [{**e.as_json(), "diff": diff} for e, diff in self.changed],
                "outputs": [{"name": name, "diff": diff} for name, diff in self.outputs],
                "warnings": {"added": list(self.warnings_added), "removed": list(self.warnings_removed)}}


def compare(before: Snapshot, after: Snapshot, show: str | None, labels: tuple[str, str]) -> Change:
    old = {e.key: e for e in before.shown(show)}
    new = {e.key: e for e in after.shown(show)}
    changed = tuple((new[key], _diff(as_yaml(old[key].inputs), as_yaml(new[key].inputs), labels))
                    for key in new if key in old and old[key].inputs != new[key].inputs)
    outputs = tuple((name, _diff(_output_yaml(before.outputs, name), _output_yaml(after.outputs, name), labels))
                    for name in dict.fromkeys([*before.outputs, *after.outputs])
                    if _output_yaml(before.outputs, name) != _output_yaml(after.outputs, name))
    return Change(added=tuple(e for key, e in new.items() if key not in old),
                  removed=tuple(e for key, e in old.items() if key not in new), changed=changed, outputs=outputs,
                  warnings_added=tuple(w for w in after.warnings if w not in before.warnings),
                  warnings_removed=tuple(w for w in before.warnings if w not in after.warnings))


def _output_yaml(outputs: dict[str, Any], name: str) -> str:
    """One output as YAML; empty when the stack does not export it."""
    return _outputs_yaml({name: outputs[name]}) if name in outputs else ""


def _diff(before: str, after: str, labels: tuple[str, str]) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), *labels))


def change_report(stack: str, where: str, change_text: str, change: Change, show: str | None) -> str:
    """Only what the change changes, like `pulumi preview --diff`."""
    head = f"Dry run of stack {stack} ({where}) with {change_text}, against the stack as filed"
    if change.is_empty:
        resources = f"resources whose type or kind contains {show!r}" if show else "resources"
        return f"{head}: no changes to the {resources}, their inputs, the outputs or the warnings.\n"
    counts = (f"{len(change.changed)} to change, {len(change.added)} to add, {len(change.removed)} to remove, "
              f"{len(change.outputs)} output{'s' if len(change.outputs) != 1 else ''} changing")
    lines = [f"{head}: {counts}.", LEGEND, ""]
    for mark, entries in (("+", change.added), ("-", change.removed)):
        for entry in entries:
            lines += [f"{mark} {entry.title}", *_body(entry, f"{mark}   "), ""]
    for entry, diff in change.changed:
        lines += [f"~ {entry.title}", *_indented(diff), ""]
    if change.outputs:
        lines += ["== Stack outputs", ""]
        for name, diff in change.outputs:
            lines += [f"~ {name}", *_indented(diff), ""]
    if change.warnings_added or change.warnings_removed:
        lines += ["== Warnings the program logs", "", *(f"+ warning: {w}" for w in change.warnings_added),
                  *(f"- warning: {w}" for w in change.warnings_removed), ""]
    return "\n".join(lines)
