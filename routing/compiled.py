"""The simulator's compiled core: its hot modules, built by Cython from their own source.

`predict` spends its time in a few modules: the picker's scoring and prefix index, the
simulated engine and the event loop that drives them. `.ci/build_core.py` (run by `./test.sh`
and `./demo.sh` when they set up `.venv`) compiles exactly those `.py` files, typed by the
`.pxd` file beside each, plus the C twins of a few functions and classes (NATIVE_MODULES), and
records each source's digest. The `.py` files stay the reference: they run as they are when
nothing is compiled, when `ROUTING_PURE_PYTHON=1` is set, or when a source no longer matches
what was compiled (then with a warning): the tests hold both to the same golden predictions.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Sequence

PACKAGE_DIR = Path(__file__).resolve().parent
# The modules compiled from their .py source, in the order they import each other.
COMPILED_MODULES = ("routing.picker.prefix", "routing.picker.load", "routing.picker.endpoint_picker",
                    "routing.simulation.latency", "routing.simulation.engine", "routing.simulation.fleet")
# Compiled only: C twins of the pure-Python functions and classes they stand in for (the block-hash
# chains of picker/prefix.py, the prefix index, the engine's block pool, the replay's event queue)
# and the table they share.
NATIVE_MODULES = ("routing.picker.chains", "routing.picker.tables", "routing.picker.prefix_index",
                  "routing.simulation.block_pool", "routing.simulation.events")
# What the build compiled, and from which source: {"modules": {name: sha256 of its .py/.pyx and .pxd}}.
MANIFEST = PACKAGE_DIR / ".compiled-core.json"
PURE_PYTHON_ENV = "ROUTING_PURE_PYTHON"
REBUILD = ".venv/bin/python .ci/build_core.py"


def source_files(module: str) -> list[Path]:
    """The files a module is compiled from: its .py (or .pyx) and the .pxd that types it."""
    base = PACKAGE_DIR.parent.joinpath(*module.split("."))
    return [path for path in (base.with_suffix(".py"), base.with_suffix(".pyx"), base.with_suffix(".pxd"))
            if path.exists()]


def source_digest(module: str) -> str:
    digest = hashlib.sha256()
    for path in source_files(module):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def compiled_file(module: str) -> Path | None:
    """The built extension module for `module`, if there is one."""
    base = PACKAGE_DIR.parent.joinpath(*module.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = base.parent / (base.name + suffix)
        if candidate.exists():
            return candidate
    return None


def stale_modules(manifest: Path = MANIFEST) -> list[str]:
    """The modules whose source changed since they were compiled (all, for an unreadable manifest)."""
    modules = (*COMPILED_MODULES, *NATIVE_MODULES)
    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return list(modules)
    return [module for module in modules if recorded.get(module) != source_digest(module)]


def core_mode() -> tuple[bool, str]:
    """Whether the compiled core runs, and why (one line for reports and warnings)."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return False, f"pure Python ({PURE_PYTHON_ENV}=1)"
    built = [module for module in (*COMPILED_MODULES, *NATIVE_MODULES) if compiled_file(module)]
    if not built:
        return False, f"pure Python (no compiled core: `{REBUILD}` builds it)"
    if len(built) < len(COMPILED_MODULES) + len(NATIVE_MODULES):
        return False, f"pure Python (the compiled core is incomplete: `{REBUILD}` rebuilds it)"
    stale = stale_modules()
    if stale:
        return False, (f"pure Python (the compiled core is older than {', '.join(stale)}: `{REBUILD}` "
                       "rebuilds it)")
    return True, "compiled"


class _SourceOnly(importlib.abc.MetaPathFinder):
    """Loads the core's modules from their .py files, and refuses its native-only ones, so that
    none of a stale or unwanted build runs (the compiled modules type each other: all or none)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None):
        if fullname in NATIVE_MODULES:
            raise ImportError(f"{fullname} runs only compiled, and the core runs as pure Python")
        if fullname in COMPILED_MODULES:
            source = source_files(fullname)[0]
            return importlib.util.spec_from_file_location(fullname, source)
        return None


def choose_core() -> tuple[bool, str]:
    """Puts the pure-Python modules first on the import path unless the compiled core is
    present, current and wanted; warns when a build exists but is stale or incomplete.
    Returns `core_mode()`."""
    compiled, why = core_mode()
    if not compiled:
        if "older than" in why or "incomplete" in why:
            warnings.warn(f"routing: running {why}", RuntimeWarning, stacklevel=3)
        if not any(isinstance(finder, _SourceOnly) for finder in sys.meta_path):
            sys.meta_path.insert(0, _SourceOnly())
    return compiled, why


ACTIVE, MODE = choose_core()
